"""Stage ``feedback``: a page made from a student's notebook carries no markup that runs or fetches anything.

Everything of a notebook that reaches a page is the student's to write: markdown answers and their attachments,
every output's data of any MIME type and its metadata (``display(..., metadata=...)``, ``publish_display_data``),
error tracebacks, cell metadata. nbconvert's templates put some of it in unquoted attributes (an image's
``width``/``height`` from its output's metadata: ``"1 onerror=..."`` is a live handler) or render it without
sanitising (nbgrader's feedback template renders markdown cells with ``markdown2html`` alone, so a markdown
link ``[t](javascript:...)`` is a live link). Three layers close that:

- :class:`SafeNotebook` (``HTMLExporter.preprocessors`` in nbgrader_config.py: feedback pages and formgrader)
  extends nbconvert's ``SanitizeHTML``: a code output keeps only the MIME types a page shows safely
  (:data:`OUTPUT_TYPES`; HTML and markdown sanitised by bleach, images only as valid base64) and, of its
  metadata, only an image's ``width`` and ``height`` as whole numbers, ``unconfined`` and ``alt``; a markdown
  cell's attachments keep only images in valid base64, an empty PNG where none is left (cell tags, ids and
  ``alt`` reach a page only escaped, in quoted attributes; a grade id is one of the gradebook's, or nbgrader's
  ``GetGrades`` fails the page); a markdown cell's source is sanitised only where it holds raw HTML (markdown
  escapes the rest itself, code spans included: sanitised too, they showed ``&gt;`` for ``>``);
- :func:`clean` sanitises the HTML rendered from markdown (``FeedbackExporter.markdown2html``): only the tags and
  attributes of :data:`TAGS`, links only to ``http``, ``https``, ``mailto`` or a place in the page, images only
  from ``data:image/...;base64`` (what nbconvert makes of an attachment);
- :func:`with_policy` puts :data:`CONTENT_SECURITY_POLICY` first in the page's ``<head>``: no script at all, no
  request anywhere (images and fonts only from ``data:``), no ``<base>``, no form submission; so whatever a
  sanitiser misses still runs and fetches nothing. The feedback template's only scripts are MathJax's (from a
  CDN, and a configuration block it evaluates), which the page therefore does not load
  (``FeedbackExporter`` leaves them out): math is drawn as images instead (:class:`MathImages`). Its styles are
  inline ``<style>`` blocks (Bootstrap's and nbconvert's CSS, inlined), and nbconvert's ANSI colours and the
  math images' baselines are ``style`` attributes, hence ``style-src 'unsafe-inline'``; CSS can neither run
  script nor, with this policy, fetch anything.

What HTML a policy in a ``<meta http-equiv>`` element may say, and that it applies to what follows it in the
document: the CSP Level 3 specification, section "Delivering a policy via the meta element" (``frame-ancestors``,
``report-uri`` and ``sandbox`` are ignored there, so they are not used).
"""

from __future__ import annotations

import base64
import binascii
import functools
import html
import io
import json
import re
import urllib.parse
from typing import Any

import bleach
from bleach.css_sanitizer import CSSSanitizer
from matplotlib import mathtext
from nbconvert.filters.markdown_mistune import InvalidNotebook, IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors.sanitize import SanitizeHTML
from nbformat import NotebookNode

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'none'; object-src 'none'; frame-src 'none'; child-src 'none'; "
    "worker-src 'none'; connect-src 'none'; manifest-src 'none'; media-src 'none'; img-src data:; font-src data:; "
    "style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
)
"""The policy of every page: nothing runs, nothing is requested (images and fonts only inline)."""
POLICY_META = f'<meta content="{CONTENT_SECURITY_POLICY}" http-equiv="Content-Security-Policy"/>'
"""The policy's element, written as BeautifulSoup writes it (``HTMLExporter``'s last pass: attributes sorted)."""

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif")
"""Raster images a page shows (as ``<img src="data:...">``)."""
OUTPUT_TYPES = frozenset({"text/plain", "text/html", "text/markdown", "text/latex", *IMAGE_TYPES})
"""The MIME types of a code output that reach a page; the others (JavaScript, SVG, widgets, ...) are dropped.
Of these, only ``text/html`` and ``text/markdown`` hold markup (sanitised); the templates escape the text
types, and images are checked to be base64."""
IMAGE_METADATA = {"width": int, "height": int, "unconfined": bool, "alt": str}
"""The metadata keys of an image output the templates read, and the type each must have to be kept."""

TAGS = frozenset(
    {
        *bleach.ALLOWED_TAGS,
        *(f"h{level}" for level in range(1, 7)),
        *("p", "div", "span", "pre", "br", "hr", "img", "del", "s", "sub", "sup", "dl", "dt", "dd", "input"),
        *("table", "thead", "tbody", "tr", "th", "td"),
    }
)
"""What markdown renders to (CommonMark, mistune's tables, task lists, definition lists), and bleach's own tags."""
ATTRIBUTES = {
    "*": {"class", "id", "title"},
    "a": {"href"},
    "img": {"src", "alt", "width", "height", "style"},
    "th": {"style", "align"},
    "td": {"style", "align"},
    "input": {"type", "checked", "disabled"},
}
LINK_SCHEMES = frozenset({"http", "https", "mailto"})
DATA_IMAGE = re.compile(r"data:image/(?:png|jpeg|gif|webp|svg\+xml);base64,[a-z0-9+/=]*", re.IGNORECASE)
"""An image a page may show from markdown: inline, in base64 (an SVG shown by ``<img>`` runs no script)."""
_IGNORED_IN_URLS = re.compile(r"[`\x00-\x20\x7f-\xa0\s]+|[^\x00-\x7f]")
"""What a browser skips in a URL's scheme (whitespace and controls) and what bleach drops too."""


def _allowed(tag: str, name: str, value: str) -> bool:
    """Whether bleach may keep attribute ``name="value"`` of ``tag`` (see :data:`ATTRIBUTES`)."""
    if name not in ATTRIBUTES.get(tag, ()) and name not in ATTRIBUTES["*"]:
        return False
    if name == "href":
        return _safe_link(value)
    if name == "src":
        return DATA_IMAGE.fullmatch(_IGNORED_IN_URLS.sub("", value)) is not None
    if tag == "input" and name == "type":
        return value == "checkbox"
    return True


def _safe_link(value: str) -> bool:
    """Whether a link goes to ``http``, ``https`` or ``mailto``, or to a place in the page (``#...``)."""
    url = _IGNORED_IN_URLS.sub("", value).lower()
    if url.startswith("#"):
        return True
    scheme = urllib.parse.urlsplit(url).scheme if ":" in url else ""
    return scheme in LINK_SCHEMES


CLEANER = bleach.Cleaner(
    tags=TAGS,
    attributes=_allowed,
    protocols={*LINK_SCHEMES, "data"},
    strip=False,
    strip_comments=True,
    css_sanitizer=CSSSanitizer(allowed_css_properties={"text-align", "vertical-align"}),
)


def clean(html: str) -> str:
    """``html`` with only the tags and attributes of :data:`TAGS` and :data:`ATTRIBUTES` left as markup (the rest
    escaped, so it shows as text), links only to :data:`LINK_SCHEMES` or ``#...``, images only from
    :data:`DATA_IMAGE`."""
    return CLEANER.clean(html)


MAX_MATH_CHARS = 2000
"""Longer TeX is left as text (matplotlib's parser is recursive, and its time grows with the formula)."""


class MathImages(IPythonRenderer):
    """nbconvert's markdown renderer, its math (``$...$``, ``$$...$$``) drawn as PNG images by matplotlib's
    mathtext (the TeX as the image's ``alt`` text, its baseline aligned with the text's), for a page that runs no
    MathJax; TeX that mathtext cannot draw (a subset of TeX: no ``\\lVert``, ``\\tfrac``, environments) stays
    text, as nbconvert writes it."""

    def inline_math(self, body: str) -> str:
        return math_image(html.unescape(body), display=False) or super().inline_math(body)

    def block_math(self, body: str) -> str:
        return math_image(html.unescape(body), display=True) or super().block_math(body)


@functools.lru_cache(maxsize=4096)
def math_image(tex: str, *, display: bool) -> str | None:
    """An ``<img>`` of ``tex`` (no ``$``) drawn by matplotlib's mathtext at 100 dpi (display math 20 % larger),
    its baseline on the text's, or None where mathtext cannot parse it or it is longer than :data:`MAX_MATH_CHARS`.
    Kept per process: every page of an assignment shows its instructions' formulas."""
    if len(tex) > MAX_MATH_CHARS or not tex.strip():
        return None
    picture = io.BytesIO()
    try:
        depth = mathtext.math_to_image(f"${tex.strip()}$", picture, format="png", dpi=120 if display else 100)
    except (ValueError, RecursionError):
        return None
    source = "data:image/png;base64," + base64.b64encode(picture.getvalue()).decode()
    return (
        f'<img class="math" src="{source}" alt="{html.escape(tex.strip())}" '
        f'style="vertical-align: -{round(float(depth))}px">'
    )


def with_policy(page: str) -> str:
    """``page`` (an HTML document as nbconvert's templates write it, its ``<head>`` tag first) with
    :data:`POLICY_META` as the first element of its ``<head>``.

    Raises:
        ValueError: ``page`` has no ``<head>`` tag.
    """
    head = re.search(r"<head\s*>", page, flags=re.IGNORECASE)
    if head is None:
        raise ValueError("a page without a <head> cannot carry its policy")
    return f"{page[: head.end()]}\n{POLICY_META}{page[head.end() :]}"


class SafeNotebook(SanitizeHTML):
    """nbconvert's ``SanitizeHTML`` (markdown and raw cells' HTML, code outputs' HTML and markdown sanitised by
    bleach, other MIME types dropped), extended to everything else of a notebook the HTML templates read: each
    code output's data (:data:`OUTPUT_TYPES`, images in valid base64) and metadata (:data:`IMAGE_METADATA` of
    each image type) and a markdown cell's attachments (images in valid base64).

    A markdown cell without raw HTML (:func:`renders_escaped`) keeps its source: bleach escapes ``<``, ``>`` and
    ``&`` in markdown *source*, and markdown then escapes a code span's or code block's text again (`` `x > 8` ``
    showed ``x &gt; 8``); text outside code shows the same either way. A markdown cell with a link to anywhere
    else than a page may go (:func:`unsafe_urls`: a ``javascript:`` link, say) is shown as its source
    in a code block (:func:`as_code_block`), so that no renderer makes it live: formgrader renders markdown with
    this preprocessor and no cleaning after it."""

    def preprocess_cell(self, cell: NotebookNode, resources: dict, cell_index: int) -> tuple[NotebookNode, dict]:
        if "attachments" in cell:
            cell.attachments = {name: _safe_attachment(bundle) for name, bundle in cell.attachments.items()}
        if cell.cell_type == "markdown" and unsafe_urls(cell.source, json.dumps(cell.get("attachments", {}))):
            cell.source = as_code_block(cell.source)
        if cell.cell_type == "markdown" and renders_escaped(cell.source, json.dumps(cell.get("attachments", {}))):
            return cell, resources  # its markdown escapes it all: bleach's escaping would show twice in code
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        for output in cell.get("outputs", []):
            if "data" in output:
                output.data = {
                    mime: value
                    for mime, value in output.data.items()
                    if mime in OUTPUT_TYPES and (mime not in IMAGE_TYPES or _base64(value))
                }
            if "metadata" in output:
                output.metadata = _image_metadata(output)
        return cell, resources


ESCAPING_TOKENS = frozenset(
    {
        *("blank_line", "block_code", "block_math", "block_quote", "block_text", "codespan", "heading", "image"),
        *("inline_math", "latex_environment", "linebreak", "link", "list", "list_item", "paragraph", "softbreak"),
        *("strikethrough", "table", "table_body", "table_cell", "table_head", "table_row", "task_list_item", "text"),
        *("thematic_break", "def_list", "def_list_head", "def_list_item", "emphasis", "strong"),
    }
)
"""The markdown tokens (mistune's, as nbconvert parses markdown) whose text nbconvert's renderer escapes; raw HTML
(``block_html``, ``inline_html``) is written as it is, and so is a ``mermaid`` code block."""


class _TokenTypes(IPythonRenderer):
    """nbconvert's markdown renderer as ``HTMLExporter.markdown2html`` makes it (formgrader's), noting the type of
    each token it renders (``mermaid`` for a code block it writes unescaped)."""

    def __init__(self, attachments: dict) -> None:
        super().__init__(escape=False, attachments=attachments)
        self.types: set[str] = set()

    def render_token(self, token: dict, state: Any) -> str:
        attrs = token.get("attrs") or {}
        info = attrs.get("info") or ""
        self.types.add("mermaid" if token["type"] == "block_code" and info.startswith("mermaid") else token["type"])
        if token["type"] == "link" and not _safe_link(str(attrs.get("url") or "")):
            self.types.add("unsafe_url")
        return super().render_token(token, state)


def _token_types(source: str, attachments: str) -> set[str] | None:
    """The types of the tokens nbconvert renders markdown ``source`` into (its cell's ``attachments`` as JSON), with
    ``unsafe_url`` for a link whose target :func:`_safe_link` refuses; None where nbconvert cannot
    render it (a missing attachment: nbconvert fails the page anyway)."""
    types = _TokenTypes(json.loads(attachments))
    try:
        MarkdownWithMath(renderer=types).render(source)
    except InvalidNotebook:
        return None
    return types.types


@functools.lru_cache(maxsize=4096)
def renders_escaped(source: str, attachments: str) -> bool:
    """Whether nbconvert renders markdown ``source`` (its cell's ``attachments`` as JSON) with every part of it
    escaped (only :data:`ESCAPING_TOKENS`): no raw HTML, so the page needs no sanitising of the source. Kept per
    process: every page of an assignment shows its instructions."""
    types = _token_types(source, attachments)
    return types is not None and types <= ESCAPING_TOKENS


@functools.lru_cache(maxsize=4096)
def unsafe_urls(source: str, attachments: str) -> bool:
    """Whether markdown ``source`` (its cell's ``attachments`` as JSON) has a link that nbconvert would render
    pointing anywhere but :data:`LINK_SCHEMES` or the page itself (images run nothing: a feedback page keeps only
    inline ones, :func:`clean`)."""
    types = _token_types(source, attachments)
    return types is not None and "unsafe_url" in types


def as_code_block(source: str) -> str:
    """Markdown that shows ``source`` as it is, in a fenced code block whose fence is longer than any run of
    backticks in it (CommonMark: only a fence at least as long closes it), so nothing in it renders."""
    longest = max((len(run) for run in re.findall(r"`+", source)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{source}\n{fence}"


def _safe_attachment(bundle: dict) -> dict:
    """An attachment's images in valid base64 (:data:`IMAGE_TYPES`); one with none becomes an empty PNG, which a
    page shows as a broken image with its alt text (nbconvert fails the whole page on a missing attachment)."""
    return {mime: data for mime, data in bundle.items() if mime in IMAGE_TYPES and _base64(data)} or {"image/png": ""}


def _base64(data: Any) -> bool:
    """Whether ``data`` is a base64 string (how nbformat stores binary data; line breaks allowed)."""
    if not isinstance(data, str):
        return False
    try:
        base64.b64decode(re.sub(r"\s+", "", data), validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _image_metadata(output: NotebookNode) -> NotebookNode:
    """The metadata a page may read of an output: per image type it shows, :data:`IMAGE_METADATA` with the right
    types (``width`` and ``height`` positive), from that type's entry or, as nbconvert reads it, the top level."""
    kept = NotebookNode()
    metadata = output.get("metadata", {})
    for mime in IMAGE_TYPES:
        if mime not in output.get("data", {}):
            continue
        own = metadata.get(mime) if isinstance(metadata.get(mime), dict) else {}
        entry = NotebookNode()
        for key, kind in IMAGE_METADATA.items():
            value = own.get(key, metadata.get(key))
            if kind is int and isinstance(value, str) and re.fullmatch(r"[0-9]{1,5}", value):
                value = int(value)
            elif kind is int and type(value) is float and value.is_integer():
                value = int(value)
            if type(value) is kind and (kind is not int or value > 0):
                entry[key] = value
        if entry:
            kept[mime] = entry
    return kept
