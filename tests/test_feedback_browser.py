"""Feedback pages of hostile students, opened in a real browser (Debian's Chromium driven by Playwright): nothing a
student wrote runs or fetches anything, and honest pages still show their pictures.

The HTML injectors of 01_tensors (``[[injects_html]]`` in tests/hostile/01_tensors.toml: handlers in image
metadata, links and images in the written answer, markup in outputs of every type and in tracebacks), a student
whose written answer's attachments carry markup, and an honest student who shows a picture with a width and
writes math with an attached image are graded once, with the reference, through the real pipeline (nbgrader,
the sandbox). Each page is served to Chromium from one URL; every other request is recorded and refused.
A page passes when its title is the notebook's, no console message and no dialog says ``html_injected``, nothing
but the page was requested, no element carries an event handler attribute, no link goes anywhere but http,
https, mailto or the page itself, and no script, frame, object, form, ``<base>`` or refresh is in it.
"""

import base64
import copy
from pathlib import Path

import pytest

from autograder.course import ROOT, Course, copy_course, grade_id
from autograder.harness.demo import mismatches_of
from autograder.grading.grade import grade
from autograder.results.safehtml import CONTENT_SECURITY_POLICY
from autograder.authoring.samples import Sample, samples, write_download
import test_browser

ASSIGNMENT = "01_tensors"
ALL = samples(Course(ROOT), ASSIGNMENT)
REFERENCE = next(s for s in ALL if s.student_id == "reference")
INJECTORS = [s for s in ALL if s.student_id.startswith("html_")]
MARKER = "html_injected"
PAGE_URL = "http://feedback.test/page.html"
DOT_PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c63f8cfc0f01f0005050201a5f6e7a90000000049454e44ae426082"
    )
).decode()
"""A valid 1x1 PNG."""
PICTURE_WIDTH = 123


def with_written_answer(sample: Sample, student_id: str, source: str, attachments: dict, status: str) -> Sample:
    """``sample`` as student ``student_id``, its written answer ``source`` with ``attachments``."""
    notebook = copy.deepcopy(sample.notebook)
    answer = next(cell for cell in notebook.cells if grade_id(cell) == "written_numpy_bridge")
    answer.source, answer.attachments = source, attachments
    return Sample(student_id, ASSIGNMENT, notebook, sample.expected, status)


def honest_pictures() -> Sample:
    """The reference, its first solution cell also showing a PNG ``PICTURE_WIDTH`` wide, its written answer math
    and an attached PNG."""
    sample = with_written_answer(
        REFERENCE,
        "honest_pictures",
        "Math: $x^2 + y_i$, and a picture: ![a dot](attachment:dot.png)",
        {"dot.png": {"image/png": DOT_PNG}},
        "review",  # it uses IPython.display: autograder.kernel.machinery flags that for a person to look at
    )
    cell = next(c for c in sample.notebook.cells if grade_id(c) == "task_1_1_one_hot_solution")
    cell.source += (
        f"\n\nimport base64\nimport IPython.display\n\nIPython.display.display(IPython.display.Image("
        f'data=base64.b64decode("{DOT_PNG}"), format="png", width={PICTURE_WIDTH}))\n'
    )
    return sample


SVG = "http://www.w3.org/2000/svg"
_RUN = f"document.title='{MARKER}';alert('{MARKER}')"
HOSTILE_ATTACHMENTS = with_written_answer(
    REFERENCE,
    "html_in_attachments",
    f"{MARKER}: ![a](attachment:a.png) ![b](attachment:b.svg) ![c](attachment:c.html)",
    {
        "a.png": {"image/png": f'AAAA" onerror="{_RUN}'},
        "b.svg": {"image/svg+xml": base64.b64encode(f'<svg xmlns="{SVG}" onload="{_RUN}"/>'.encode()).decode()},
        "c.html": {"text/html": base64.b64encode(f"<script>{_RUN}</script>".encode()).decode()},
    },
    "ok",
)
HONEST = honest_pictures()
GRADED = [REFERENCE, HONEST, HOSTILE_ATTACHMENTS, *INJECTORS]


@pytest.fixture(scope="module")
def feedback(tmp_path_factory) -> dict[str, Path]:
    """The feedback page of each of GRADED by student id, all graded in one run (exact grades checked)."""
    scratch = tmp_path_factory.mktemp("feedback-browser")
    course = copy_course(Course(ROOT), scratch / "course")
    grading = grade(course, write_download(GRADED, scratch / "download"))
    results = {result.student_id: result for result in grading.results}
    assert [line for sample in GRADED for line in mismatches_of(results[sample.student_id], sample)] == []
    return {s.student_id: course.root / "feedback" / s.student_id / ASSIGNMENT / f"{ASSIGNMENT}.html" for s in GRADED}


@pytest.fixture(scope="module")
def chromium():
    """:func:`test_browser.chromium`: headless Chromium, the system's."""
    with test_browser.chromium() as browser:
        yield browser


OPENED = """() => ({
    handlers: [...document.querySelectorAll('*')].flatMap(element => [...element.attributes]
        .filter(attribute => attribute.name.toLowerCase().startsWith('on'))
        .map(attribute => `${element.tagName} ${attribute.name}`)),
    links: [...document.querySelectorAll('a[href], area[href]')].map(link => link.href)
        .filter(href => !['http:', 'https:', 'mailto:'].includes(new URL(href).protocol)),
    embedded: [...document.querySelectorAll(
        'script, iframe, frame, object, embed, form, base, link, meta[http-equiv="refresh" i]')]
        .map(element => element.outerHTML.slice(0, 80)),
    policy: [...document.querySelectorAll('meta[http-equiv="Content-Security-Policy" i]')].map(meta => meta.content),
    images: [...document.images].map(image => ({
        width: image.getAttribute('width'), alt: image.getAttribute('alt'),
        loaded: image.complete && image.naturalWidth > 0})),
    text: document.body.innerText,
})"""


def opened(chromium, page_file: Path) -> dict:
    """What Chromium did with ``page_file`` served as PAGE_URL: ``requests`` (any other URL it asked for),
    ``events`` (dialogs, console messages with MARKER), ``title``, and the DOM facts of OPENED."""
    page = chromium.new_page()
    requests: list[str] = []
    events: list[str] = []

    def route(request_route) -> None:
        if request_route.request.url == PAGE_URL:
            request_route.fulfill(body=page_file.read_bytes(), content_type="text/html; charset=utf-8")
        else:
            requests.append(request_route.request.url)
            request_route.abort()

    def dialog(shown) -> None:
        events.append(f"dialog {shown.type}: {shown.message}")
        shown.dismiss()

    page.route("**/*", route)
    page.on("dialog", dialog)
    page.on("console", lambda message: events.append(f"console: {message.text}") if MARKER in message.text else None)
    try:
        page.goto(PAGE_URL, wait_until="load")
        page.wait_for_timeout(1500)  # timers, refreshes, late image errors
        seen = page.evaluate(OPENED)
        return {**seen, "requests": requests, "events": events, "title": page.title(), "url": page.url}
    finally:
        page.close()


HOSTILE = [HOSTILE_ATTACHMENTS, *INJECTORS]


def test_there_are_injectors_of_each_class():
    names = {s.student_id for s in INJECTORS}
    assert {"html_handlers_in_image_metadata", "html_links_and_images_in_the_written_answer"} <= names
    assert len(INJECTORS) >= 5


@pytest.mark.parametrize("sample", HOSTILE, ids=[s.student_id for s in HOSTILE])
def test_a_hostile_page_runs_and_fetches_nothing_in_chromium(feedback, chromium, sample):
    seen = opened(chromium, feedback[sample.student_id])
    assert seen["events"] == [] and seen["requests"] == []
    assert (seen["title"], seen["url"]) == (ASSIGNMENT, PAGE_URL)
    assert seen["handlers"] == [] and seen["links"] == [] and seen["embedded"] == []
    assert seen["policy"] == [CONTENT_SECURITY_POLICY]
    assert MARKER in seen["text"]  # the markup is shown, as text


def test_an_honest_page_shows_its_pictures_and_its_math_drawn_in_chromium(feedback, chromium):
    seen = opened(chromium, feedback[HONEST.student_id])
    assert seen["events"] == [] and seen["requests"] == [] and seen["title"] == ASSIGNMENT
    shown = {(image["alt"], image["width"]) for image in seen["images"] if image["loaded"]}
    assert str(PICTURE_WIDTH) in {width for _, width in shown}  # the solution cell's picture
    assert ("a dot", None) in shown  # the written answer's attachment
    assert ("x^2 + y_i", None) in shown and "$x^2 + y_i$" not in seen["text"]  # its math, drawn
    assert all(image["loaded"] for image in seen["images"]), seen["images"]


def test_the_reference_page_carries_the_policy_once_and_requests_nothing(feedback, chromium):
    seen = opened(chromium, feedback["reference"])
    assert seen["events"] == [] and seen["requests"] == [] and seen["embedded"] == []
    assert seen["policy"] == [CONTENT_SECURITY_POLICY] and seen["title"] == ASSIGNMENT
