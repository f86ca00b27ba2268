"""Feedback pages: hidden tests' code and expected values never reach a student; visible failures keep their message."""

import copy

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbconvert.exporters import HTMLExporter

from autograder.kernel.checks import RECORD_MIME_TYPE
from autograder.results.feedback import (
    NO_MATHJAX,
    REDACTED,
    CompiledTemplates,
    FeedbackExporter,
    HideHiddenTests,
    UnreadableNote,
    rendered_markdown,
    secrets,
    shown,
    visible_source,
)
from autograder.results.safehtml import with_policy
from autograder.pipeline.verdict import MISMATCH

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


def test_one_hidden_line_is_counted_in_the_singular():
    one_line = SOURCE.replace("secret = 41\n", "")
    assert visible_source(one_line).endswith("\n# (1 line of hidden tests, not shown)")


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


HIDDEN_RECORD = {"label": "f(a hidden case)", "expected": {"tensor": {"data": [[0.25, -1.5, 3.125], [2.0, 0.5, 7.75]]}}}


def redacting(outputs, in_the_test_cell=False):
    """A feedback preprocessor whose secrets come from a notebook with the test cell (reference: HIDDEN_RECORD),
    applied to a student's solution cell holding ``outputs`` (or to the test cell holding them)."""
    tests = nbformat.v4.new_code_cell(SOURCE, metadata=TESTS_METADATA, id="task-tests")
    solution = nbformat.v4.new_code_cell("print(stuff)", metadata={"nbgrader": {"solution": True, "grade": False}})
    (tests if in_the_test_cell else solution).outputs = outputs
    preprocessor = HideHiddenTests()
    preprocessor.secrets = secrets(nbformat.v4.new_notebook(cells=[solution, tests]), {"task": [HIDDEN_RECORD]})
    return preprocessor.preprocess_cell(tests if in_the_test_cell else solution, {}, 0)[0].outputs


@pytest.mark.parametrize(
    "printed",
    [
        "check_equal(f(secret), 42, label=\"f(a hidden case)\")\n",  # a hidden line as written (print(In[-1]))
        repr(["x = 1\ncheck_equal(f(secret), 42, label=\"f(a hidden case)\")"]) + "\n",  # escaped in a list's repr
        "tensor([[ 0.2500, -1.5000,  3.1250],\n        [ 2.0000,  0.5000,  7.7500]])\n",  # the values, as torch prints
    ],
    ids=["line_as_written", "line_in_a_repr", "expected_values_printed"],
)
def test_any_output_carrying_a_hidden_line_or_expected_values_is_removed(printed):
    stream = nbformat.v4.new_output("stream", name="stdout", text=printed)
    error = nbformat.v4.new_output("error", ename="ValueError", evalue=printed, traceback=[printed])
    shown_outputs = redacting([stream, error])
    assert [o.get("text", o.get("evalue")) for o in shown_outputs] == [REDACTED + "\n", REDACTED]
    assert shown_outputs[1].ename == "ValueError"


def test_the_reference_value_of_a_hidden_check_given_no_expected_value_is_a_secret_too():
    """A hidden check records no expected value; what it expects is the reference's value, and a student's
    print of it (computed, or left by the tests) is removed as a hidden expected value was."""
    tests = nbformat.v4.new_code_cell(SOURCE, metadata=TESTS_METADATA, id="task-tests")
    record = {"label": HIDDEN_RECORD["label"], "value": HIDDEN_RECORD["expected"]}
    found = secrets(nbformat.v4.new_notebook(cells=[tests]), {"task": [record]})
    assert found.numbers == secrets(nbformat.v4.new_notebook(cells=[tests]), {"task": [HIDDEN_RECORD]}).numbers != ()


def test_a_hidden_check_failed_outside_the_kernel_reads_as_a_failed_hidden_test():
    """A hidden check asserts nothing in the kernel; the verdict's error for it reads as a failed hidden assertion."""
    hidden = "A hidden test failed: f(a hidden case) (check 2 of 2, judged outside the kernel)"
    extra = "1 check record(s) more than the tests make"
    for problem, message in [(hidden, hidden), (extra, f"Judged outside the kernel: {extra}")]:
        output = nbformat.v4.new_output("error", ename=MISMATCH, evalue=problem, traceback=[problem])
        assert shown(output, set()).traceback == [message]


def stdout(text):
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def displayed(text):
    return nbformat.v4.new_output("display_data", data={"text/plain": text})


@pytest.mark.parametrize(
    "pieces",
    [
        [stdout("tensor([[ 0.2500, -1.5000,  3.1250],\n"), stdout("        [ 2.0000,  0.5000,  7.7500]])\n")],
        [stdout("0.2500\n"), displayed("-1.5"), stdout("3.1250\n"), displayed("2.0"), stdout("0.5\n"), displayed("7.75")],
        [stdout('check_equal(f(secr'), displayed('et), 42, label="f(a hidden case)")')],
    ],
    ids=["print_split_by_a_flush", "values_alternating_with_displays", "line_split_between_stdout_and_a_display"],
)
def test_a_secret_spread_over_several_outputs_removes_them_all_for_one_note(pieces):
    assert [o.get("text") for o in redacting(pieces)] == [REDACTED + "\n"]


def test_a_test_cell_whose_stderr_output_is_removed_still_says_why_it_earned_nothing():
    leak = nbformat.v4.new_output("stream", name="stderr", text='check_equal(f(secret), 42, label="f(a hidden case)")\n')
    outputs = redacting([leak], in_the_test_cell=True)
    assert [o.text for o in outputs[:1]] == [REDACTED + "\n"] and "wrote to the error stream" in outputs[-1].text


def test_an_output_without_secrets_is_kept():
    kept = [nbformat.v4.new_output("stream", name="stdout", text="41, and the first three values: 0.25 -1.5 3.125\n")]
    assert redacting(copy.deepcopy(kept)) == kept
    assert redacting([stdout("hel"), stdout("lo\n"), displayed("0.25")]) == [stdout("hello\n"), displayed("0.25")]


class CountedTemplates(CompiledTemplates):
    """The cache, counting the templates stored in it: Jinja stores one only after compiling it."""

    def __init__(self) -> None:
        super().__init__()
        self.stored: list[str] = []

    def dump_bytecode(self, bucket) -> None:
        self.stored.append(bucket.key)
        super().dump_bytecode(bucket)


def test_feedback_pages_reuse_compiled_templates_and_stay_the_same(monkeypatch):
    """A second exporter (nbgrader makes one per submission) compiles no template the first compiled; its page is
    the one a plain HTMLExporter renders (:func:`stock`)."""
    compiled = CountedTemplates()
    monkeypatch.setattr("autograder.results.feedback.COMPILED_TEMPLATES", compiled)
    page = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# page"), nbformat.v4.new_code_cell("1 + 1")])
    first, _ = FeedbackExporter(template_name="lab").from_notebook_node(page)
    compiled_first = len(compiled.stored)
    second, _ = FeedbackExporter(template_name="lab").from_notebook_node(page)
    plain = stock("lab", page)
    assert compiled_first > 1 and len(compiled.stored) == compiled_first
    assert first == second == plain


def test_pages_rendered_one_after_another_are_the_pages_each_renders_alone():
    """Markdown and code are rendered once per process and kept (every page of an assignment repeats them): a page
    rendered after others that share its texts is the page rendered first, and two cells of one text whose
    attachments differ keep their own images."""
    image = "iVBORw0KGgo="

    def page(attachment: str, code: str) -> nbformat.NotebookNode:
        text = nbformat.v4.new_markdown_cell("# page $x^2$\n\n![figure](attachment:figure.png)", id="text")
        text.attachments = {"figure.png": {"image/png": attachment}}
        return nbformat.v4.new_notebook(cells=[text, nbformat.v4.new_code_cell(code, id="code")])

    rendered_markdown.cache_clear()
    alone = {name: FeedbackExporter(template_name="classic").from_notebook_node(page(name, "x = 1"))[0]
             for name in (image, image + "AA")}
    rendered_markdown.cache_clear()
    after = {name: FeedbackExporter(template_name="classic").from_notebook_node(page(name, "x = 1"))[0]
             for name in (image, image + "AA")}
    assert after == alone and alone[image] != alone[image + "AA"]
    assert f"data:image/png;base64,{image}AA" in after[image + "AA"]
    assert rendered_markdown.cache_info().hits == 0 and rendered_markdown.cache_info().misses == 2
    again, _ = FeedbackExporter(template_name="classic").from_notebook_node(page(image, "x = 1"))
    assert again == alone[image] and rendered_markdown.cache_info().hits == 1


def stock(template: str, notebook) -> str:
    """The page nbconvert's HTMLExporter renders of ``notebook`` with ``template``, without MathJax and with the
    feedback's policy (what FeedbackExporter adds; the markdown of these pages is left as it is by its cleaning)."""
    page, _ = HTMLExporter(template_name=template, extra_loaders=[NO_MATHJAX]).from_notebook_node(notebook)
    return with_policy(page)


def test_a_page_with_nothing_to_make_accessible_skips_the_last_pass_and_reads_as_the_same_document():
    """nbgrader's feedback template is nbconvert's classic one: a page without images is written as its template
    rendered it, which BeautifulSoup reads as the page HTMLExporter makes; a page with an image is that page."""
    text = nbformat.v4.new_output("stream", name="stdout", text="x's <values>\n")
    cells = [nbformat.v4.new_markdown_cell("# page<br>it's"), nbformat.v4.new_code_cell("print(1)", outputs=[text])]
    page = nbformat.v4.new_notebook(cells=cells)
    ours, _ = FeedbackExporter(template_name="classic").from_notebook_node(page)
    assert ours != stock("classic", page) and str(BeautifulSoup(ours, features="html.parser")) == stock("classic", page)
    picture = nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})
    page.cells[1].outputs.append(picture)
    ours, _ = FeedbackExporter(template_name="classic").from_notebook_node(page)
    assert ours == stock("classic", page) and 'alt="No description has been provided for this image"' in ours


def test_the_summary_names_each_grade_cell_by_its_task():
    """nbgrader's template lists every test cell as "Test cell"; the page names it by its task's heading."""
    from test_safehtml import page_of

    graded = {"score": 1.0, "points": 2, "locked": True, "schema_version": 3}
    tests = {"nbgrader": {**graded, "grade": True, "solution": False, "grade_id": "task_1_1_tests"}}
    written = {"nbgrader": {**graded, "grade": True, "solution": True, "grade_id": "written_why", "comment": "Good."}}
    page = page_of(
        nbformat.v4.new_markdown_cell("### Task 1.1 - <first> & last"),
        nbformat.v4.new_code_cell("check_equal(f(1), 2, label='f(1)')", metadata=tests),
        nbformat.v4.new_markdown_cell("## 7. Knowledge check"),
        nbformat.v4.new_markdown_cell("Because.", metadata=written),
    )
    summary = BeautifulSoup(page, features="html.parser").find(id="toc")
    entries = [" ".join(item.get_text().split()) for item in summary.find_all("li")]
    assert entries == [
        "Task 1.1 - <first> & last (Score: 1.0 / 2.0)",
        "7. Knowledge check: written_why (written response) (Score: 1.0 / 2.0)",
        "Comment on 7. Knowledge check: written_why",
    ]


def test_the_page_of_a_file_that_could_not_be_read_begins_by_saying_so_and_why():
    """Intake grades an unreadable file as the blank release, its reason in the notebook's metadata; autograde keeps
    it (nbgrader_config.py), and the student's page begins with it, shown as text."""
    from test_safehtml import page_of
    from traitlets.config.loader import PyFileConfigLoader

    from autograder.course import ROOT
    from autograder.pipeline.structure import normalise
    from nbconvert.preprocessors import ClearMetadataPreprocessor

    release = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("### Task 1.1 - first")])
    graded = normalise(b'{"cells": [<b onmouseover=alert(1)>', release=release).notebook
    graded.metadata["kernelspec"] = {"name": "python3"}
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    graded, _ = ClearMetadataPreprocessor(config=config).preprocess(graded, {})
    assert "kernelspec" not in graded.metadata  # autograde clears what it did, and keeps why the file was unread
    graded, _ = UnreadableNote().preprocess(graded, {})
    body = BeautifulSoup(page_of(*graded.cells), features="html.parser").find(id="notebook-container")
    text = " ".join(body.get_text().split())
    assert text.startswith("Your submitted file could not be read. It was graded as the assignment as released")
    assert "Why: not a readable notebook: the file is not valid JSON (Expecting value at line 1, column 12)" in text
    assert text.index("could not be read") < text.index("Task 1.1 - first")
    assert not [name for tag in body.find_all(True) for name in tag.attrs if name.startswith("on")]


def test_a_readable_notebook_gets_no_note():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# page")])
    assert UnreadableNote().preprocess(copy.deepcopy(notebook), {})[0] == notebook


def test_a_cell_with_groups_shows_its_score_and_names_each_failed_group():
    """The verdict's score of a test cell with groups (its only execute_result) reads as a line, and its error for a
    failed group names the group and what failed, as it is."""
    from autograder.pipeline.verdict import score_output

    lost = (
        "Lost the points of the group 'edge cases' (1 of the cell's points): "
        "A hidden test failed: f(a hidden case) (check 1 of 1, judged outside the kernel)"
    )
    cell = feedback_cell(
        [score_output(1), nbformat.v4.new_output("error", ename=MISMATCH, evalue=lost, traceback=[lost])]
    )
    assert [o.output_type for o in cell.outputs] == ["stream", "error"]
    assert cell.outputs[0].text == "Points from the groups of checks that passed: 1\n"
    assert cell.outputs[1].traceback == [lost]
