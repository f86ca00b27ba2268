"""The check helpers inside a real IPython kernel: the student's line leads a failure; a passing cell says so;
a cell's records are one output."""

import re
import shutil

import nbformat
import pytest
from nbclient import NotebookClient

from autograder.kernel.checks import GROUPS_FAILED_LINE, JUDGED_LINE, PASSED_LINE, RECORD_MIME_TYPE
from autograder.course import CHECKS_MODULE

CELLS = [
    "import torch\nfrom checks import *",
    "x = torch.tensor([1.0, 2.0])\ncheck_equal(x, torch.tensor([1.0, 3.0]), label='x after f(x)')",
    "with check_raises(ValueError, label='f(-1) raises'):\n    abs(-1)",
    "check_close(x, [1.0, 2.0], label='x close')\ncheck_equal(x.shape, torch.Size([2]), label='shape')",
    "print('no checks here')",
    "def f():\n    assert False, 'my own assert'\nf()",
    "check_equal(x, x, label='visible')\ncheck_equal(x + 1, label='hidden, judged by the grader')",
    "with check_group('edge cases', points=1):\n    check_equal(x, x + 1, label='edge')\n"
    "with check_group('errors', points=2):\n    check_equal(x, x, label='after')",
]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """A small notebook using the checks, executed in a fresh kernel beside a copy of checks.py."""
    folder = tmp_path_factory.mktemp("kernel")
    shutil.copy(CHECKS_MODULE, folder / "checks.py")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    client = NotebookClient(
        notebook,
        kernel_name="python3",
        allow_errors=True,
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
        resources={"metadata": {"path": str(folder)}},
    )
    client.execute()
    return notebook


def traceback_text(cell):
    error = next(o for o in cell.outputs if o.output_type == "error")
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error.traceback))


@pytest.mark.parametrize("index", [1, 2])
def test_a_failed_check_shows_the_students_line_and_the_message_not_the_helpers_frames(executed, index):
    text = traceback_text(executed.cells[index])
    assert "checks.py" not in text and "contextlib" not in text
    frames = [line for line in text.splitlines() if line.startswith(("Cell In", "File "))]
    assert frames == [f"Cell In[{index + 1}], line {2 if index == 1 else 1}"]
    assert text.splitlines()[-1] in ("Greatest absolute difference: 1 at index (1,)", "expected ValueError, but nothing was raised")


def test_the_students_own_frames_stay_in_the_traceback(executed):
    text = traceback_text(executed.cells[5])
    assert [line for line in text.splitlines() if line.startswith(("Cell In", "File "))] == [
        "Cell In[6], line 3",
        "Cell In[6], line 2, in f()",
    ]


def test_only_a_cell_whose_checks_all_pass_says_so(executed):
    """A cell with checks given no expected value (hidden tests) says only that the others passed."""
    said = ["".join(o.text for o in c.outputs if o.output_type == "stream") for c in executed.cells]
    assert said == ["", "", "", PASSED_LINE + "\n", "no checks here\n", "", JUDGED_LINE + "\n", GROUPS_FAILED_LINE + " edge cases\n"]


def test_a_cells_records_are_one_output_in_order_after_the_cells_own_and_kept_when_it_raises(executed):
    """One ``display_data`` per cell that checked, after its other outputs, holding the cell's records in order:
    the raising cell's record of the check that failed is there too (the verdict judges it outside)."""
    published = [[o for o in c.outputs if RECORD_MIME_TYPE in o.get("data", {})] for c in executed.cells]
    assert [len(outputs) for outputs in published] == [0, 1, 1, 1, 0, 0, 1, 1]
    labels = [[r["label"] for r in outputs[0].data[RECORD_MIME_TYPE]] for outputs in published if outputs]
    hidden = ["visible", "hidden, judged by the grader"]
    grouped = ["edge", "edge cases", "after", "errors"]
    assert labels == [["x after f(x)"], ["f(-1) raises"], ["x close", "shape"], hidden, grouped]
    assert all(o.output_type == "display_data" and o.data["text/plain"] == "" for c in published for o in c)
    passed = executed.cells[3].outputs
    assert [o.output_type for o in passed] == ["display_data", "stream"]  # the records, then the passed line


def test_a_group_that_raises_shows_the_students_line_and_the_later_groups_run(executed):
    """The failed check's traceback is an error output as a raising cell's is, but the cell goes on: the next group's
    check is recorded, and each group's record says whether its block raised."""
    cell = executed.cells[7]
    text = traceback_text(cell)
    assert "checks.py" not in text and "contextlib" not in text
    assert [line for line in text.splitlines() if line.startswith(("Cell In", "File "))] == ["Cell In[8], line 2"]
    records = next(o for o in cell.outputs if RECORD_MIME_TYPE in o.get("data", {})).data[RECORD_MIME_TYPE]
    assert [(r["check"], r.get("group")) for r in records] == [
        ("equal", "edge cases"), ("group", None), ("equal", "errors"), ("group", None)
    ]
    assert [r["value"] for r in records if r["check"] == "group"] == [{"raised": {"exception": "AssertionError"}}, {"raised": None}]
    assert [r["rule"]["points"] for r in records if r["check"] == "group"] == [1, 2]
