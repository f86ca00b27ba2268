"""Feedback pages: hidden tests' code and expected values never reach a student; visible failures keep their message."""

import nbformat

from autograder.checks import RECORD_MIME_TYPE
from autograder.feedback import HideHiddenTests, visible_source

SOURCE = """check_equal(f(1), 2, label="f(1)")

### BEGIN HIDDEN TESTS
secret = 41
check_equal(f(secret), 42, label="f(a hidden case)")
### END HIDDEN TESTS"""
TESTS_METADATA = {"nbgrader": {"grade": True, "solution": False, "grade_id": "task", "points": 2, "locked": True}}


def error(line, ename, evalue, context):
    frame = f"\x1b[36mCell In[5], line {line}\x1b[39m\n" + "\n".join(context)
    return nbformat.v4.new_output(
        "error",
        ename=ename,
        evalue=evalue,
        traceback=[
            "----",
            frame,
            "\x1b[36mFile /srv/course/checks.py:219\x1b[39m, in check_equal",
            f"{ename}: {evalue}",
        ],
    )


def feedback_cell(outputs):
    # A fixed id: a random one can contain the digits the tests look for.
    cell = nbformat.v4.new_code_cell(SOURCE, metadata=TESTS_METADATA, id="task-tests")
    cell.outputs = outputs
    return HideHiddenTests().preprocess_cell(cell, {}, 0)[0]


def test_the_hidden_block_is_replaced_by_one_line():
    assert visible_source(SOURCE) == 'check_equal(f(1), 2, label="f(1)")\n\n# (2 lines of hidden tests, not shown)'


def test_a_hidden_failure_shows_its_label_but_not_the_expected_value():
    cell = feedback_cell([error(5, "AssertionError", "f(a hidden case)\nexpected 42, got 0", ["----> 5 check_equal"])])
    assert cell.outputs[0].traceback == ["A hidden test failed: f(a hidden case)"]
    assert "42" not in str(cell) and "41" not in str(cell)


def test_an_exception_from_the_students_code_in_a_hidden_test_shows_its_type_and_message():
    cell = feedback_cell([error(5, "IndexError", "index 41 is out of bounds", ["----> 5 check_equal"])])
    assert cell.outputs[0].traceback == ["A hidden test raised IndexError: index 41 is out of bounds"]


def test_a_visible_failure_keeps_its_traceback_without_hidden_context_lines_or_server_paths():
    context = ["----> 1 check_equal(f(1), 2)", "      2 ", "      3 ### BEGIN HIDDEN TESTS", "      4 secret = 41"]
    cell = feedback_cell([error(1, "AssertionError", "f(1)\nexpected 2, got 0", context)])
    traceback = cell.outputs[0].traceback
    assert traceback[-1] == "AssertionError: f(1)\nexpected 2, got 0"
    assert "----> 1 check_equal(f(1), 2)" in traceback[1]
    assert "secret" not in str(traceback) and "HIDDEN" not in str(traceback) and "/srv/course" not in str(traceback)


def test_check_records_are_dropped_and_other_cells_are_untouched():
    record = nbformat.v4.new_output("display_data", data={"text/plain": "", RECORD_MIME_TYPE: {"value": 42}})
    printed = nbformat.v4.new_output("stream", name="stdout", text="hello\n")
    assert feedback_cell([record, printed]).outputs == [printed]
    solution = nbformat.v4.new_code_cell(SOURCE, metadata={"nbgrader": {"solution": True, "grade": False}})
    assert HideHiddenTests().preprocess_cell(solution, {}, 0)[0].source == SOURCE


def test_a_cell_that_only_wrote_to_stderr_says_why_it_earned_nothing():
    warning = nbformat.v4.new_output("stream", name="stderr", text="UserWarning: something\n")
    outputs = feedback_cell([warning]).outputs
    assert outputs[0] == warning and "wrote to the error stream" in outputs[1].text
    assert len(feedback_cell([nbformat.v4.new_output("stream", name="stdout", text="hi\n")]).outputs) == 1
