"""The executor: a kernel that exits, crashes or hangs costs only the cell it happened in.

Real kernels, a two-second cell timeout. That these statuses reach the
gradebook and task_results.csv is checked on the kernel-stopper samples with
every other sample, in test_samples_graded.
"""

import pytest
from executed_cells import SETUP, SHOW_STATE, enames, printed, run

from autograder.pipeline.execute import KERNEL_DIED, NOT_RUN, TIMEOUT


@pytest.mark.parametrize(
    "stop",
    [
        "os._exit(0)",
        "os.kill(os.getpid(), signal.SIGKILL)",
        "import ctypes\nctypes.string_at(0)",
    ],
    ids=["os._exit", "SIGKILL", "segfault"],
)
def test_a_dead_kernel_costs_only_its_cell_and_the_state_before_it_is_rebuilt(stop):
    setup, before, dying, after = run(SETUP, SHOW_STATE, stop, SHOW_STATE)
    assert printed(before) == "kept\n"
    assert enames(dying) == [KERNEL_DIED]
    assert enames(after) == [] and printed(after) == "kept\n"


def test_a_cell_that_ignores_the_interrupt_times_out_and_the_notebook_goes_on():
    stubborn = "while True:\n    try:\n        time.sleep(0.05)\n    except KeyboardInterrupt:\n        pass"
    setup, hung, after = run(SETUP, stubborn, SHOW_STATE)
    assert enames(hung) == [TIMEOUT]
    assert printed(after) == "kept\n"


def test_an_interruptible_loop_keeps_nbgraders_timeout_and_its_kernel():
    setup, looping, after = run(SETUP + "\ncounter = 0", "while True:\n    counter += 1", "print(counter > 0)")
    assert enames(looping) == ["KeyboardInterrupt", TIMEOUT]
    assert printed(after) == "True\n", "the kernel was kept, so the loop's effect on its state is still there"


def test_a_replay_leaves_the_earlier_cells_outputs_as_they_first_were():
    count_runs = (
        "with open('runs.txt', 'a+') as runs:\n    runs.write('.')\n    runs.seek(0)\n    print(len(runs.read()))"
    )
    setup, first, dying, after = run(SETUP, count_runs, "os._exit(0)", SHOW_STATE + "\nprint(open('runs.txt').read())")
    assert enames(dying) == [KERNEL_DIED]
    assert printed(after) == "kept\n..\n", "the cell ran twice: once, then replayed"
    assert printed(first) == "1\n", "its outputs are those of its first run; the replay's are thrown away"


def test_cells_that_stopped_the_kernel_are_not_replayed():
    setup, first, second, after = run(SETUP + "\ncount = 0", "count += 1\nos._exit(0)", "os._exit(1)", "print(count)")
    assert enames(first) == [KERNEL_DIED] and enames(second) == [KERNEL_DIED]
    assert printed(after) == "0\n"


def test_past_the_restart_budget_the_remaining_cells_are_not_run():
    setup, first, second, after, last = run(SETUP, "os._exit(0)", "os._exit(0)", SHOW_STATE, "1", max_restarts=1)
    assert enames(first) == [KERNEL_DIED] and enames(second) == [KERNEL_DIED]
    assert enames(after) == [NOT_RUN] and enames(last) == [NOT_RUN]
    assert "2 times" in after.outputs[0].evalue


def test_past_the_notebooks_time_limit_the_remaining_cells_are_not_run():
    setup, first, second, third = run(SETUP, "time.sleep(1.5)", "time.sleep(1.5)", SHOW_STATE, notebook_timeout=2)
    assert enames(first) == []
    assert enames(second) == ["KeyboardInterrupt", TIMEOUT], "it gets only the half second left"
    assert enames(third) == [NOT_RUN] and "2 s limit" in third.outputs[0].evalue


FIGURE = "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()"


def data_types(cell) -> list[list[str]]:
    return [sorted(output.get("data", {})) for output in cell.outputs]


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "own sandbox"])
def test_figures_are_not_drawn_while_grading_also_after_a_restart_unless_asked_for(fork):
    # 60 s a cell, not 2: a kernel of its own imports matplotlib first (about 1.3 CPU s), which took over 2 s on CI's
    # two busy cores (the cell then timed out, so it had no outputs to compare)
    setup, before, dying, after = run(SETUP, FIGURE, "os._exit(0)", FIGURE, fork=fork, timeout=60)
    assert enames(dying) == [KERNEL_DIED]
    assert data_types(before) == data_types(after) == [["text/plain"]]
    assert before.outputs[0].data["text/plain"].startswith("<Figure size")
    setup, drawn = run(SETUP, FIGURE, fork=fork, draw_figures=True, timeout=60)
    assert data_types(drawn) == [["image/png", "text/plain"]]


LATE_OUTPUTS = (
    "from IPython import get_ipython\n"
    "kernel = get_ipython().kernel\n"
    "reply = {'status': 'ok', 'execution_count': 1, 'user_expressions': {}, 'payload': []}\n"
    "kernel.session.send(kernel.shell_stream, 'execute_reply', reply, kernel.get_parent('shell'),\n"
    "                    ident=kernel._shell_parent_ident.get())\n"
    "time.sleep(6)\n"
    "print('arrived late')"
)
"""A cell whose reply reaches the grader 6 s before the rest of its outputs: what a busy grading machine does to a
cell with many outputs (the grader reads the reply, then has to wait for the rest)."""


def test_outputs_that_arrive_seconds_after_the_cells_reply_are_kept():
    # nbclient's default wait after the reply was 4 s: correct cells then failed with CellTimeoutError under load
    _, late, after = run(SETUP, LATE_OUTPUTS, SHOW_STATE, timeout=20)
    assert enames(late) == [] and printed(late) == "arrived late\n"
    assert printed(after) == "kept\n"
