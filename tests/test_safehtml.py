"""What a feedback page keeps of a student's notebook (autograder/results/safehtml.py), without a kernel: each attack a
notebook can carry, rendered by FeedbackExporter with nbgrader_config.py's HTMLExporter settings; the pages
themselves are opened in Chromium by tests/test_feedback_browser.py."""

import re
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbconvert.filters import markdown2html
from traitlets.config import Config

import nbgrader

from autograder.results.feedback import FeedbackExporter
from autograder.results.safehtml import CONTENT_SECURITY_POLICY, SafeNotebook, clean, math_image, with_policy

FORMGRADER = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
RUN = "alert(1)"
PNG = "iVBORw0KGgo="


def page_of(*cells) -> str:
    """The page FeedbackExporter renders of ``cells`` as ``generate_feedback`` does (nbgrader's feedback template,
    SafeNotebook and sanitize_html as nbgrader_config.py sets them)."""
    config = Config()
    config.HTMLExporter.preprocessors = [SafeNotebook]
    config.HTMLExporter.sanitize_html = True
    config.HTMLExporter.template_name = "feedback"
    config.HTMLExporter.extra_template_basedirs = [str(FORMGRADER / "templates")]
    bootstrap = FORMGRADER.joinpath("static", "node_modules", "bootstrap", "dist", "css")
    config.HTMLExporter.extra_template_paths = [str(bootstrap)]
    resources = {"nbgrader": {"notebook": "<b>name</b>", "score": 0, "max_score": 1, "late_penalty": 0}}
    page, _ = FeedbackExporter(config=config).from_notebook_node(
        nbformat.v4.new_notebook(cells=list(cells)), resources=resources
    )
    return page


def body_of(*cells) -> str:
    """The ``<body>`` of :func:`page_of` (its head holds the template's CSS)."""
    return page_of(*cells).split("<body>", 1)[1]


def rendered(body: str) -> str:
    """The HTML of the first rendered markdown cell of a page's body."""
    return body.split('rendered_html">', 1)[1].split("</div>", 1)[0]


def image(mime: str, metadata: dict) -> nbformat.NotebookNode:
    output = nbformat.v4.new_output("display_data", data={mime: PNG, "text/plain": "picture"})
    output.metadata = metadata
    return nbformat.v4.new_code_cell("show()", outputs=[output])


@pytest.mark.parametrize("mime", ["image/png", "image/jpeg"])
@pytest.mark.parametrize(
    "metadata",
    [
        {"MIME": {"width": f"1 onerror={RUN}"}},
        {"height": f"1 onerror={RUN}"},
        {"MIME": {"width": 2, "height": f"3 onload={RUN}"}},
        {"filenames": {"MIME": "http://elsewhere.test/x.png"}},
    ],
    ids=["width", "top_level_height", "height", "filenames"],
)
def test_image_metadata_sets_no_attribute_but_whole_sizes(mime, metadata):
    metadata = {(mime if key == "MIME" else key): value for key, value in metadata.items()}
    if "filenames" in metadata:
        metadata["filenames"] = {mime: metadata["filenames"]["MIME"]}
    page = body_of(image(mime, metadata))
    assert "onerror" not in page and "onload" not in page and "elsewhere.test" not in page
    assert f'src="data:{mime};base64,{PNG}"' in page


def test_an_honest_image_keeps_its_width_and_height():
    page = body_of(image("image/png", {"image/png": {"width": 123, "height": "45"}}))
    assert re.search(r'<img [^>]*height="45" [^>]*width="123"', page)


UNSAFE_LINKS = [
    "[t](javascript:alert(1))",
    "[t](JaVaScRiPt:alert(1))",
    "[t](java\tscript:alert(1))",
    "[t](&#106;avascript:alert(1))",
    "[t](vbscript:msgbox)",
    "[t](data:text/html;base64,PHNjcmlwdD4=)",
    "[t][r]\n\n[r]: javascript:alert(1)",
    "<javascript:alert(1)>",
    "[t](<javascript:alert(1)> \"title\")",
]
"""Markdown links a student can write that would run script, or load a page of their own, if clicked."""


@pytest.mark.parametrize("link", UNSAFE_LINKS)
def test_a_markdown_link_goes_only_to_http_https_mailto_or_the_page(link):
    page = body_of(nbformat.v4.new_markdown_cell(link))
    assert "href" not in rendered(page)
    kept = body_of(nbformat.v4.new_markdown_cell("[a](https://example.org) [b](mailto:x@example.org) [c](#top)"))
    assert all(f'href="{target}"' in kept for target in ["https://example.org", "mailto:x@example.org", "#top"])


@pytest.mark.parametrize("source", ["http://elsewhere.test/x.png", "x.png", "javascript:alert(1)", "data:text/html,x"])
def test_a_markdown_image_is_shown_only_from_data(source):
    page = body_of(nbformat.v4.new_markdown_cell(f"![i]({source})"))
    assert '<img alt="i">' in rendered(page)


def test_an_attachment_keeps_only_images_in_base64():
    cell = nbformat.v4.new_markdown_cell("![a](attachment:a.png) ![b](attachment:b.svg)")
    cell.attachments = {"a.png": {"image/png": f'AAAA" onerror="{RUN}'}, "b.svg": {"image/svg+xml": "PHN2Zz4="}}
    page = body_of(cell)
    assert "onerror" not in page and "svg" not in page and page.count('src="data:image/png;base64,"') == 2


def test_outputs_keep_only_the_types_a_page_shows_safely():
    data = {
        "text/plain": "x",
        "application/javascript": RUN,
        "image/svg+xml": f"<svg onload='{RUN}'/>",
        "application/vnd.jupyter.widget-view+json": {"model_id": "1"},
        "text/html": f"<b>bold</b><script>{RUN}</script>",
    }
    output = nbformat.v4.new_output("display_data", data=data)
    output.metadata = {"text/html": {"isolated": True}}
    page = body_of(nbformat.v4.new_code_cell("show()", outputs=[output]))
    assert "<b>bold</b>" in page and "<script>" not in page and "<svg" not in page and "iframe" not in page


def test_math_is_drawn_and_what_mathtext_cannot_parse_stays_text():
    page = rendered(body_of(nbformat.v4.new_markdown_cell("$x^2$ and $\\lVert x \\rVert$ and $<b>x</b>$")))
    drawn = re.findall(r'<img class="math" src="data:image/png;base64,[^"]+" alt="([^"]*)"', page)
    assert drawn == ["x^2", "&lt;b&gt;x&lt;/b&gt;"] and "$\\lVert x \\rVert$" in page
    assert math_image("{" * 1000 + "x" + "}" * 1000, display=False) is None


def test_every_page_carries_the_policy_first_in_its_head():
    page = page_of(nbformat.v4.new_markdown_cell("# page"))
    head = page.index("<head>")
    assert page.index(f'content="{CONTENT_SECURITY_POLICY}"') < page.index("<meta charset") and head < page.index(
        "Content-Security-Policy"
    )
    assert "<script" not in page and "cdnjs" not in page and "<b>name</b>" not in page
    with pytest.raises(ValueError):
        with_policy("<html><body></body></html>")


def test_clean_escapes_unknown_markup_and_keeps_markdowns():
    cleaned = clean('<h2 id="x">T</h2><iframe src="x"></iframe>')
    assert cleaned == '<h2 id="x">T</h2>&lt;iframe src="x"&gt;&lt;/iframe&gt;'


def test_code_in_markdown_shows_its_text_escaped_once_on_a_page_and_in_formgrader():
    """bleach escaped the markdown source and markdown escaped code again: `x > 8` showed as ``x &gt; 8``."""
    source = "**Check** `x > 8` and *then* `a && b`, 3 < 4\n\n```python\nif a < b:\n    pass\n```"
    page = rendered(body_of(nbformat.v4.new_markdown_cell(source)))
    assert "<code>x &gt; 8</code>" in page and "<code>a &amp;&amp; b</code>" in page and "3 &lt; 4" in page
    assert "&amp;gt;" not in page and "&amp;lt;" not in page and "&amp;amp;" not in page
    cell, _ = SafeNotebook().preprocess_cell(nbformat.v4.new_markdown_cell(source), {}, 0)
    assert "<code>x &gt; 8</code>" in markdown2html(cell.source)  # formgrader renders it without cleaning


@pytest.mark.parametrize(
    "source",
    [
        f"`x > 8` <img src=x onerror={RUN}>",
        f"`x > 8`\n\n<div onclick={RUN}>d</div>",
        f"```mermaid\n<img src=x onerror={RUN}>\n```",
    ],
    ids=["inline_html", "block_html", "mermaid"],
)
def test_markdown_with_raw_html_is_still_sanitised_before_formgrader_renders_it(source):
    cell, _ = SafeNotebook().preprocess_cell(nbformat.v4.new_markdown_cell(source), {}, 0)
    for html in (markdown2html(cell.source), rendered(body_of(nbformat.v4.new_markdown_cell(source)))):
        soup = BeautifulSoup(html, features="html.parser")
        assert not [name for tag in soup.find_all(True) for name in tag.attrs if name.startswith("on")], html


@pytest.mark.parametrize("link", UNSAFE_LINKS)
def test_a_link_formgrader_would_make_live_is_shown_as_its_source(link):
    """formgrader renders markdown after SafeNotebook with no cleaning: such a cell reaches it as a code block."""
    source = f"My answer, see ``` {link} and `x > 8`"
    cell, _ = SafeNotebook().preprocess_cell(nbformat.v4.new_markdown_cell(source), {}, 0)
    html = markdown2html(cell.source)
    soup = BeautifulSoup(html, features="html.parser")
    assert soup.find_all("a") == [], html
    if cell.source != source:  # a link markdown makes: the cell is shown as its source, as it is
        assert soup.find("pre").get_text().strip() == source


def test_safe_links_stay_links_for_formgrader():
    source = "[a](https://example.org) [b](mailto:x@example.org) [c](#top) `x > 8`"
    cell, _ = SafeNotebook().preprocess_cell(nbformat.v4.new_markdown_cell(source), {}, 0)
    assert cell.source == source
