"""Stage ``feedback``: what ``nbgrader generate_feedback`` may show a student.

nbgrader's feedback page is the autograded notebook rendered as HTML, and
autograde has put the instructor's test cells back in it, hidden tests
included. :class:`HideHiddenTests` (registered in ``nbgrader_config.py``)
runs before the page is rendered and, in every autograder-tests cell:

- replaces the lines between ``### BEGIN HIDDEN TESTS`` and
  ``### END HIDDEN TESTS`` with one comment saying how many are hidden;
- turns an error raised on a hidden line into "A hidden test failed: <label>"
  (the check's label names what was checked, e.g. ``one_hot(empty labels,
  4).shape``; the expected value on the message's next line is dropped), as
  the verdict's error for a failed hidden check (given no expected value, it
  asserts nothing in the kernel) already reads, or,
  when the student's own code raised, the exception's type and message;
- keeps a visible test's traceback, minus frames outside the notebook's cells
  (they show the grader's file paths) and minus the hidden lines IPython
  quotes as context around the failing line;
- drops the check records (values checked, kept for the grader);
- shows the score the verdict gives a test cell with groups of checks as a line, above the failed groups' names;
- explains a cell that lost its points only by writing to stderr (a warning).

The student still sees which tasks passed and failed, and why the visible
tests failed.

What a cell prints is the student's to choose, and the kernel holds the
hidden tests' text (IPython's input history ``In``/``_ih``, ``%history``, the
check helpers' ``records``, an exception quoting the current cell, the
variables a hidden test left). So, whatever output carries it, every output of
every code cell is also checked by content (:class:`Secrets`): one that
quotes a hidden test's line (as written, or escaped as ``repr`` and JSON
escape it) or holds a hidden check's expected values (its strings, or its
numbers in order, as any printing of the tensor shows them) is replaced by a
note saying it was removed. A print split into several outputs (each flush
of the kernel's stdout is one) is checked whole: a cell's consecutive outputs
of one stream are first merged (nbconvert's ``CoalesceStreamsPreprocessor``),
and when its outputs, read one after another, carry a secret that none
carries alone (numbers or a line spread over stdout and displays), all of
them are replaced (by one note, and its errors' names). Short lines and
values (under :data:`MIN_SECRET_CHARS` characters, :data:`MIN_SECRET_NUMBERS` numbers) and
arrays of whole numbers are not secrets (an answer ``"a"`` of four choices, or
``arange(12)``, cannot be hidden by content: the course shows such values
itself); an encoding the student makes up (base64 of ``In``) and a secret
spread over the outputs of several cells are not recognised.

Pages are rendered by :class:`FeedbackExporter` (nbconvert's ``HTMLExporter``, its compiled templates, and
the markdown and code that every page of an assignment repeats, kept for the next page), which runs nothing a
student wrote and fetches nothing (:mod:`autograder.results.safehtml`: markdown sanitised after it is rendered, a
Content-Security-Policy with no script and no request, math drawn as images instead of by MathJax), its summary
names each grade cell by its task, and a re-run keeps the pages of an earlier
one made from the same inputs (:mod:`autograder.pipeline.feedbackstore`).
"""

from __future__ import annotations

import functools
import html
import json
import math
import re
from dataclasses import dataclass
from typing import Any

import jinja2
import nbformat
from bs4 import BeautifulSoup
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.markdown_mistune import MarkdownWithMath
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbconvert.preprocessors import CoalesceStreamsPreprocessor
from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import default

from ..course import HIDDEN_TEST_MARKERS, cell_labels, grade_id, is_autograder_tests
from .safehtml import MathImages, clean, with_policy
from ..pipeline.autograde import CopiedOnceExporter
from ..pipeline.structure import UNREADABLE
from ..pipeline.verdict import GROUP_LOST, HIDDEN_FAILED, MISMATCH, RECORD_MIME_TYPE, reference_of

STDERR_NOTE = (
    "\nThis test cell wrote to the error stream (above: usually a warning from your code), "
    "and nbgrader gives such a cell no points. Make your function run without warnings.\n"
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CELL_FRAME = re.compile(r"Cell In\s*\[\d*\],\s*line (\d+)")
"""How IPython names a frame in a notebook cell: ``Cell In[7], line 4``."""
SOURCE_LINE = re.compile(r"^\s*(?:-*>)?\s*(\d+) ")
"""A source line IPython quotes in a frame: ``      4 code`` or ``----> 4 code``."""


MIN_SECRET_CHARS = 10
"""A hidden line or expected string of fewer characters (spaces at its ends not counted) is not looked for."""
MIN_SECRET_NUMBERS = 6
"""A hidden expected array of fewer numbers, or of whole numbers only (counts, indices, one-hot rows, ranges:
what the course's own examples print too), is not looked for."""
SCORE_LINE = "Points from the groups of checks that passed:"
"""How the feedback page shows the score of a test cell with groups (the failed groups are named below it)."""

REDACTED = "[output removed from the feedback: it showed text or values of a hidden test]"
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Secrets:
    """What of an assignment's hidden tests no feedback output may carry."""

    texts: frozenset[str] = frozenset()
    """Hidden lines and expected strings, each as written and as ``repr`` and JSON escape it."""
    numbers: tuple[tuple[float, ...], ...] = ()
    """The numbers of each hidden expected array, flattened in order."""

    def found_in(self, *outputs: NotebookNode) -> bool:
        """Whether the text of ``outputs`` (any MIME type but images, tracebacks without colours), read one after
        another, carries a secret: a text or a run of numbers split between two outputs included."""
        texts = [_text(output) for output in outputs]
        joined = "".join(texts)
        if any(secret in joined for secret in self.texts):
            return True
        found = [float(match) for match in NUMBER.findall("\n".join(texts))] if self.numbers else []
        return any(_contains(found, numbers) for numbers in self.numbers)


def secrets(notebook: NotebookNode, reference: dict[str, list[Any]]) -> Secrets:
    """The :class:`Secrets` of an autograded notebook: its test cells' hidden lines, and the expected values of
    the reference's records (``{grade_id: records}``, see :mod:`autograder.pipeline.verdict`; the reference's value
    for a check given none) whose label its cell's visible part does not name; minus anything the notebook shows
    anyway (visible lines, the student's code)."""
    visible = "\n".join(
        visible_source(cell.source) if is_autograder_tests(cell) else cell.source for cell in notebook.cells
    )
    texts: set[str] = set()
    numbers: list[tuple[float, ...]] = []
    for cell in notebook.cells:
        if not is_autograder_tests(cell):
            continue
        hidden = hidden_lines(cell.source)
        lines = [line for number, line in enumerate(cell.source.splitlines(), 1) if number in hidden]
        shown_here = visible_source(cell.source)
        records = reference.get(grade_id(cell), [])
        expected = [  # a check given no expected value expects what the reference gives
            record["expected"] if "expected" in record else record.get("value")
            for record in records
            if str(record.get("label")) not in shown_here
        ]
        strings, arrays = _leaves(expected)
        texts.update(text for text in [*lines, *strings] if len(text.strip()) >= MIN_SECRET_CHARS)
        numbers.extend(a for a in arrays if len(a) >= MIN_SECRET_NUMBERS and any(not x.is_integer() for x in a))
    texts = {text.strip() for text in texts if text.strip() not in visible and text.strip() not in HIDDEN_TEST_MARKERS}
    quoted = {form for text in texts for form in (text, json.dumps(text)[1:-1], repr(text)[1:-1], _escaped(text))}
    return Secrets(frozenset(quoted), tuple(numbers))


def _escaped(text: str) -> str:
    """``text`` as ``repr`` writes it inside a string quoted with ``'`` (``repr(text)`` may choose ``"``)."""
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _leaves(value: Any) -> tuple[list[str], list[tuple[float, ...]]]:
    """The strings in an encoded value, and its lists of numbers flattened (one per outermost list)."""
    strings: list[str] = []
    arrays: list[tuple[float, ...]] = []

    def walk(item: Any) -> None:
        if isinstance(item, str):
            strings.append(item)
        elif isinstance(item, dict):
            for child in item.values():
                walk(child)
        elif isinstance(item, list):
            flat = _flat_numbers(item)
            if flat is not None:
                arrays.append(flat)
            else:
                for child in item:
                    walk(child)

    walk(value)
    return strings, arrays


def _flat_numbers(item: Any) -> tuple[float, ...] | None:
    """A nested list of numbers (booleans as 0 and 1) flattened, or None if it holds anything else."""
    if isinstance(item, list):
        flat: list[float] = []
        for child in item:
            inner = _flat_numbers(child)
            if inner is None:
                return None
            flat.extend(inner)
        return tuple(flat)
    if isinstance(item, (bool, int, float)) and math.isfinite(item):
        return (float(item),)
    return None


def _contains(found: list[float], numbers: tuple[float, ...]) -> bool:
    """Whether ``numbers`` appear in ``found`` one after another, each as printed at 4 decimals or better."""

    def same(a: float, b: float) -> bool:
        return abs(a - b) <= 1e-4 * max(1.0, abs(b))

    last = len(found) - len(numbers)
    return any(
        all(same(found[start + k], numbers[k]) for k in range(len(numbers)))
        for start in range(last + 1)
        if same(found[start], numbers[0])
    )


def _text(output: NotebookNode) -> str:
    """An output's text, its parts (stream text, error name, message and traceback, each MIME type's data but
    images) one per line, empty ones left out, without ANSI colours."""
    parts: list[Any] = [output.get("text", ""), output.get("ename", ""), output.get("evalue", "")]
    parts += output.get("traceback", [])
    parts += [value for mime, value in output.get("data", {}).items() if not mime.startswith("image/")]
    return ANSI.sub("", "\n".join(p if isinstance(p, str) else json.dumps(p) for p in parts if p))


def redacted(output: NotebookNode) -> NotebookNode:
    """What the feedback shows in place of an output that carries a secret (an error stays an error)."""
    if output.get("output_type") == "error":
        return nbformat.v4.new_output("error", ename=output.get("ename", ""), evalue=REDACTED, traceback=[REDACTED])
    return nbformat.v4.new_output("stream", name="stdout", text=REDACTED + "\n")


class HideHiddenTests(NbGraderPreprocessor):
    """nbgrader preprocessor for generate_feedback: hidden tests and their expected values never reach a student."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.secrets = Secrets()
        """What this notebook's outputs may not carry (set per notebook by :meth:`preprocess`)."""
        self.coalesce_streams = CoalesceStreamsPreprocessor()
        """Merges a cell's consecutive outputs of one stream (a print split by a flush) before they are checked."""

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        self.secrets = secrets(nb, reference_of(self, resources["nbgrader"]["assignment"]))
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell: NotebookNode, resources: dict, index: int) -> tuple[NotebookNode, dict]:
        if cell.cell_type != "code":
            return cell, resources
        only_stderr = (  # decided before a removal turns a stderr output into a note
            is_autograder_tests(cell)
            and any(o.get("name") == "stderr" for o in cell.outputs)
            and not any(o.get("output_type") == "error" for o in cell.outputs)
        )
        if is_autograder_tests(cell):
            hidden = hidden_lines(cell.source)
            cell.source = visible_source(cell.source)
            cell.outputs = [shown(output, hidden) for output in cell.outputs if not is_record(output)]
        cell, resources = self.coalesce_streams.preprocess_cell(cell, resources, index)
        if self.secrets.found_in(*cell.outputs):  # read together (what one output carries, they carry too)
            cell.outputs = [redacted(output) if self.secrets.found_in(output) else output for output in cell.outputs]
            if self.secrets.found_in(*cell.outputs):  # spread over outputs that each look harmless: each note once
                notes = [redacted(output) for output in cell.outputs]
                cell.outputs = list({json.dumps(note, sort_keys=True): note for note in notes}.values())
        if only_stderr:
            cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=STDERR_NOTE))
        return cell, resources


class UnreadableNote(NbGraderPreprocessor):
    """nbgrader preprocessor for generate_feedback: the page of a submission whose file could not be read (graded as
    the blank release, :func:`autograder.pipeline.structure.unreadable`) begins with a note saying so, and why."""

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        section, key = UNREADABLE
        problem = nb.metadata.get(section, {}).get(key)
        if problem:
            nb.cells.insert(0, nbformat.v4.new_markdown_cell(unreadable_note(problem), id="unreadable-file"))
        return nb, resources


MARKDOWN_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
"""ASCII punctuation, which CommonMark lets a backslash make literal."""


def unreadable_note(problem: str) -> str:
    """The markdown of the note at the top of the page of a file that could not be read; ``problem`` (why, quoting
    the file's bytes at times) shown as plain text."""
    shown = MARKDOWN_PUNCTUATION.sub(r"\\\1", " ".join(problem.split()))
    return (
        "> **Your submitted file could not be read.** It was graded as the assignment as released, without your "
        f"answers, so every task scores 0. Why: {shown}. Check the file you submitted (open it in JupyterLab) and "
        "ask your instructor how to submit it again."
    )


def hidden_lines(source: str) -> set[int]:
    """1-based numbers of the lines of ``source`` inside the hidden-test markers (markers included)."""
    begin, end = HIDDEN_TEST_MARKERS
    lines, inside = set(), False
    for number, line in enumerate(source.splitlines(), start=1):
        if line.strip() == begin:
            inside = True
        if inside:
            lines.add(number)
        if line.strip() == end:
            inside = False
    return lines


def visible_source(source: str) -> str:
    """``source`` with each hidden-test block (markers included) replaced by one comment line."""
    hidden = hidden_lines(source)
    kept: list[str] = []
    run = 0
    for number, line in enumerate([*source.splitlines(), ""], start=1):
        if number in hidden:
            run += 1
            continue
        if run:
            hidden_count = max(run - 2, 0)  # the two marker lines are not tests
            kept.append(f"# ({hidden_count} line{'' if hidden_count == 1 else 's'} of hidden tests, not shown)")
            run = 0
        kept.append(line)
    return "\n".join(kept[:-1])


def is_record(output: NotebookNode) -> bool:
    return output.get("output_type") == "display_data" and RECORD_MIME_TYPE in output.get("data", {})


def shown(output: NotebookNode, hidden: set[int]) -> NotebookNode:
    """An output as the feedback page may show it (the score the verdict gives a test cell with groups of checks,
    :func:`autograder.pipeline.verdict.score_output`, the only ``execute_result`` a test cell keeps, as a line)."""
    if output.get("output_type") == "execute_result":
        score = output.get("data", {}).get("text/plain", "")
        return nbformat.v4.new_output("stream", name="stdout", text=f"{SCORE_LINE} {score}\n")
    if output.get("output_type") != "error":
        return output
    frames = [ANSI.sub("", frame) for frame in output.get("traceback", [])]
    cell_lines = [int(m.group(1)) for frame in frames if (m := CELL_FRAME.search(frame))]
    if not cell_lines or cell_lines[0] in hidden:
        first_line = str(output.get("evalue", "")).splitlines()[0] if output.get("evalue") else ""
        if output.get("ename") == "AssertionError":
            message = f"A hidden test failed: {first_line}"
        elif output.get("ename") == MISMATCH:
            as_is = first_line.startswith((HIDDEN_FAILED, GROUP_LOST))
            message = first_line if as_is else f"Judged outside the kernel: {first_line}"
        else:
            message = f"A hidden test raised {output.get('ename')}: {first_line}"
        output.traceback = [message]
        output.evalue = first_line
        return output
    kept = output.get("traceback", [])
    cell_frames = [frame for frame in kept[1:-1] if CELL_FRAME.search(ANSI.sub("", frame))]
    cell_frames[0] = _without_lines(cell_frames[0], hidden)
    output.traceback = [kept[0], *cell_frames, kept[-1]]
    return output


def _without_lines(frame: str, hidden: set[int]) -> str:
    """A traceback frame of the test cell without the context lines IPython shows from ``hidden``."""
    kept = []
    for line in frame.split("\n"):
        number = SOURCE_LINE.match(ANSI.sub("", line))
        if number is None or int(number.group(1)) not in hidden:
            kept.append(line)
    return "\n".join(kept)


class CompiledTemplates(jinja2.BytecodeCache):
    """Jinja's compiled templates, kept in memory for the life of the process (Jinja checks each against its
    template's source before using it, so a changed template is compiled again)."""

    def __init__(self) -> None:
        self._compiled: dict[str, tuple[str, bytes]] = {}

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        checksum, code = self._compiled.get(bucket.key, ("", b""))
        if checksum == bucket.checksum:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self._compiled[bucket.key] = (bucket.checksum, bucket.bytecode_to_string())


COMPILED_TEMPLATES = CompiledTemplates()


ACCESSIBILITY_TARGETS = re.compile(
    r"<img\b(?![^>]*\salt=)|jp-Cell-inputWrapper|jp-OutputArea-output", re.IGNORECASE
)
"""What ``HTMLExporter``'s last pass changes in a page: images without an alt text (math drawn as images has its
TeX as one), and the lab template's cell inputs and outputs it makes focusable. A page without any of these it
only parses and writes out again."""
NO_MATHJAX = jinja2.DictLoader({"mathjax.html.j2": "{%- macro mathjax(url=None) -%}{%- endmacro %}"})
"""nbconvert's ``mathjax.html.j2`` (MathJax from a CDN, and a configuration block it evaluates as script) replaced
by a macro that writes nothing: a page loads no script (:data:`autograder.results.safehtml.CONTENT_SECURITY_POLICY`)."""


SUMMARY = re.compile(r'<div id="toc">.*?</div>', re.DOTALL)
"""The summary nbgrader's feedback template writes at the top of a page (its first ``toc``: what students write
comes after it)."""
SUMMARY_ENTRY = re.compile(
    r'(<li><a href="#(?:comment-)?([^"]+)">)(Test cell|Written response|Coding free-response|Task|Comment)</a>'
)
"""An entry of the summary: a link to a grade cell (or to the comment on an answer), named by its kind alone."""


def named_summary(page: str, labels: dict[str, str]) -> str:
    """``page`` with each entry of its summary (:data:`SUMMARY`) named by its grade cell's label in ``labels``
    (grade_id -> label, :func:`autograder.course.cell_labels`: ``Task 2.3 - contiguous strides``): a test cell's by
    the label alone, another kind's with the kind after it (``(written response)``), a comment's as ``Comment on``
    the label; an entry of a grade_id without a label is kept."""

    def named(entry: re.Match[str]) -> str:
        label = labels.get(entry.group(2))
        if label is None:
            return entry.group(0)
        kind = entry.group(3)
        if kind == "Comment":
            return f"{entry.group(1)}Comment on {html.escape(label)}</a>"
        return f"{entry.group(1)}{html.escape(label)}</a>" + ("" if kind == "Test cell" else f" ({kind.lower()})")

    summary = SUMMARY.search(page)
    if summary is None:
        return page
    return page[: summary.start()] + SUMMARY_ENTRY.sub(named, summary.group(0)) + page[summary.end() :]


@dataclass(frozen=True)
class MarkdownOptions:
    """What a markdown text's HTML depends on besides the text (:meth:`FeedbackExporter.markdown2html`): the
    cell's attachments (as sorted JSON), the exporter's ``embed_images``, the notebook's folder (read only when
    images are embedded), its anchor-link settings and its ``lexer_options`` (as sorted JSON)."""

    attachments: str
    embed_images: bool
    path: str
    anchor_link_text: str
    exclude_anchor_links: bool
    lexer_options: str


@functools.lru_cache(maxsize=8192)
def rendered_markdown(source: str, options: MarkdownOptions) -> str:
    """``source`` (markdown) as sanitised HTML, math as images (see :meth:`FeedbackExporter.markdown2html`). Kept
    per process: every page of an assignment shows the same instructions, and rendering them (mistune, then the
    sanitiser) was most of a page's CPU."""
    renderer = MathImages(
        escape=False,
        attachments=json.loads(options.attachments),
        embed_images=options.embed_images,
        path=options.path,
        anchor_link_text=options.anchor_link_text,
        exclude_anchor_links=options.exclude_anchor_links,
        **json.loads(options.lexer_options),
    )
    return clean(MarkdownWithMath(renderer=renderer).render(source))


class CachedHighlight(Highlight2HTML):
    """nbconvert's ``highlight_code`` filter (``Highlight2HTML``), each distinct input highlighted once per process:
    the given code and the visible tests are the same on every page of an assignment."""

    def __call__(self, source: str, language: str | None = None, metadata: dict | None = None) -> str:
        magics = (metadata or {}).get("magics_language")
        options = json.dumps(self.extra_formatter_options, sort_keys=True)
        return _highlighted(source, language or self.pygments_lexer, magics, options)


@functools.lru_cache(maxsize=8192)
def _highlighted(source: str, language: str, magics_language: str | None, formatter_options: str) -> str:
    metadata = {"magics_language": magics_language} if magics_language else None
    highlighter = Highlight2HTML(pygments_lexer=language, extra_formatter_options=json.loads(formatter_options))
    return highlighter(source, language, metadata)


class FeedbackExporter(CopiedOnceExporter, HTMLExporter):
    """nbconvert's ``HTMLExporter`` for ``nbgrader generate_feedback`` (``GenerateFeedback.exporter_class`` in
    nbgrader_config.py), for less CPU a page and the same page as a browser reads it:

    - the notebook is copied once, not three times (:class:`autograder.pipeline.autograde.CopiedOnceExporter`);
    - its templates are compiled once per process (:data:`COMPILED_TEMPLATES`): nbgrader makes a new exporter, so
      a new Jinja environment, for every submission, and each compiled the page's nine templates again (about
      0.1 s of CPU a page);
    - ``HTMLExporter``'s last pass (it parses the whole page with BeautifulSoup's ``html.parser`` to add alt texts
      and ``tabindex``, then writes it out again: about 0.4 s of CPU of a page of 01_tensors) runs only on a page
      where it has something to add (:data:`ACCESSIBILITY_TARGETS`). nbgrader's feedback template (classic) has
      none of the lab template's focusable cells, and figures are not drawn while grading, so most pages skip it:
      such a page is the template's HTML as rendered, the same document (BeautifulSoup reads the same tree from
      it) written without the pass's normalisation (``<br>`` for ``<br/>``, entities kept as the template
      escaped them). Any other page is the one ``HTMLExporter`` makes, byte for byte;

    and so that a page runs and fetches nothing a student wrote (:mod:`autograder.results.safehtml`): markdown (cells,
    outputs, comments) is sanitised after it is rendered (nbgrader's template renders markdown cells without
    ``clean_html``) and its math drawn as images, the notebook's name is escaped where the template writes it, the
    page loads no MathJax (:data:`NO_MATHJAX`) and carries :data:`autograder.results.safehtml.CONTENT_SECURITY_POLICY`
    in its ``<head>``.
    """

    @default("extra_loaders")
    def _extra_loaders_default(self) -> list[jinja2.BaseLoader]:
        return [NO_MATHJAX]

    @jinja2.pass_context
    def markdown2html(self, context: jinja2.runtime.Context, source: str) -> str:
        """``HTMLExporter.markdown2html`` of nbconvert 7.17 (attachments as ``data:`` images) with math drawn as
        images (:class:`autograder.results.safehtml.MathImages`), its HTML sanitised by
        :func:`autograder.results.safehtml.clean`; each distinct input rendered once per process
        (:func:`rendered_markdown`)."""
        options = MarkdownOptions(
            attachments=json.dumps(context.get("cell", {}).get("attachments", {}), sort_keys=True),
            embed_images=self.embed_images,
            path=context.get("resources", {}).get("metadata", {}).get("path", "") if self.embed_images else "",
            anchor_link_text=self.anchor_link_text,
            exclude_anchor_links=self.exclude_anchor_links,
            lexer_options=json.dumps(self.lexer_options, sort_keys=True),
        )
        return rendered_markdown(source, options)

    def _create_environment(self) -> jinja2.Environment:
        environment = super()._create_environment()
        environment.bytecode_cache = COMPILED_TEMPLATES
        return environment

    def from_notebook_node(
        self, nb: NotebookNode, resources: dict[str, Any] | None = None, **kw: Any
    ) -> tuple[str, dict[str, Any]]:
        """``HTMLExporter.from_notebook_node`` of nbconvert 7.17 with its last pass run only where it has work
        (the rest of the method as nbconvert writes it: the filters it registers, then the template), the
        notebook's name escaped, the summary's entries named by task (:func:`named_summary`, with the labels of
        the notebook's own headings) and the page's policy added (:func:`autograder.results.safehtml.with_policy`)."""
        language = nb.metadata.get("language_info", {})
        lexer = language.get("pygments_lexer", language.get("name", None))
        highlight_code = self.filters.get("highlight_code", CachedHighlight(pygments_lexer=lexer, parent=self))
        resources = self._init_resources(resources)
        nbgrader = resources.get("nbgrader")
        if nbgrader and "notebook" in nbgrader:  # nbgrader's template writes it unescaped: it sees an escaped copy
            resources["nbgrader"] = {**nbgrader, "notebook": html.escape(nbgrader["notebook"])}
        filter_data_type = WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self, resources=resources)
        self.register_filter("highlight_code", highlight_code)
        self.register_filter("filter_data_type", filter_data_type)
        page, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        if nbgrader is not None:
            resources["nbgrader"] = nbgrader
            page = named_summary(page, cell_labels(nb))
        if ACCESSIBILITY_TARGETS.search(page):
            page = self._accessible(page)
        return with_policy(page), resources

    def _accessible(self, page: str) -> str:
        """nbconvert 7.17's last pass of ``HTMLExporter.from_notebook_node``, as it writes it."""
        soup = BeautifulSoup(page, features="html.parser")
        missing_alt = 0
        for elem in soup.select("img:not([alt])"):
            elem.attrs["alt"] = "No description has been provided for this image"
            missing_alt += 1
        if missing_alt:
            self.log.warning("Alternative text is missing on %s image(s).", missing_alt)
        for elem in soup.select(".jp-Notebook div.jp-Cell-inputWrapper"):
            elem.attrs["tabindex"] = "0"
        for elem in soup.select(".jp-Notebook div.jp-OutputArea-output"):
            elem.attrs["tabindex"] = "0"
        return str(soup)
