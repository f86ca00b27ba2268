"""The student's path in JupyterLab, in a real browser (Debian's Chromium driven by Playwright).

JupyterLab runs from this environment on 127.0.0.1 with a token, in a scratch course folder as
docs/students.md sets it up (nbgrader_config.py, release/ with the reference solutions
filled in). For each notebook: *Kernel > Restart Kernel and Run All Cells* through the menu runs
every code cell, only the cells tagged ``raises-exception`` show an error, every figure renders,
and nbgrader's Validate button reports success. Screenshots of each final state are written to
tests/browser-screenshots/ (git-ignored).
"""

import copy
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import sync_playwright

from autograder.course import ROOT, Course, grade_id, is_autograder_tests, raises_on_purpose, read_notebook
from test_validate import UNANSWERED, WRONG, reference_submission, solved_with_mistakes

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = ROOT / "tests" / "browser-screenshots"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "course-browser-test"
VIEWPORT = {"width": 1400, "height": 1000}
RUN_ALL_TIMEOUT_S = 240
STABLE_S = 8
VALIDATE_TIMEOUT_MS = 240_000


def untagged(notebook: nbformat.NotebookNode) -> tuple[nbformat.NotebookNode, int]:
    """A copy of ``notebook`` whose first ``raises-exception`` cell lost its tag, and that cell's code-cell index."""
    notebook = copy.deepcopy(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    index = next(i for i, c in enumerate(code) if raises_on_purpose(c))
    code[index].metadata["tags"].remove("raises-exception")
    return notebook, index


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def course_folder(tmp_path_factory):
    """A student's course folder: nbgrader_config.py and release/<id>/ with solved notebooks, plus two broken copies."""
    root = tmp_path_factory.mktemp("student-course")
    shutil.copy(ROOT / "nbgrader_config.py", root)
    for assignment_id in Course(ROOT).assignment_ids():
        folder = root / "release" / assignment_id
        shutil.copytree(ROOT / "release" / assignment_id, folder)  # checks.py copied, not linked
        nbformat.write(reference_submission(assignment_id), folder / f"{assignment_id}.ipynb")
    for name, notebook in (("mistakes", solved_with_mistakes(warning=False)), ("untagged", untagged(reference_submission("01_tensors"))[0])):
        folder = root / name
        shutil.copytree(ROOT / "release" / "01_tensors", folder)
        nbformat.write(notebook, folder / "01_tensors.ipynb")
    settings = root / ".settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))  # every cell in the DOM
    return root


@pytest.fixture(scope="module")
def lab(course_folder):
    """JupyterLab started as docs/students.md says, from the course folder; yields its base URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.update(JUPYTER_RUNTIME_DIR=str(course_folder / ".runtime"), COURSE_DEVICE="cpu")
    command = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        f"--IdentityProvider.token={TOKEN}", f"--LabApp.user_settings_dir={course_folder / '.settings'}",
        f"--LabApp.workspaces_dir={course_folder / '.workspaces'}", "--LabApp.news_url=",
    ]
    with started_lab(command, cwd=course_folder, env=env, port=port, token=TOKEN) as base:
        yield base


@contextmanager
def started_lab(command: list[str], *, cwd: Path, env: dict[str, str], port: int, token: str) -> Iterator[str]:
    """JupyterLab started by ``command`` (which must listen on 127.0.0.1:``port`` with ``token``) in ``cwd``,
    its log in ``cwd/jupyterlab.log``; yields its base URL once it answers, and stops it after."""
    if os.geteuid() == 0:
        command = [*command, "--allow-root"]
    log_path = cwd / "jupyterlab.log"
    log = log_path.open("w")
    server = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, log_path.read_text()
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "JupyterLab did not start in 120 s"
                time.sleep(0.5)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@contextmanager
def chromium():
    """Headless Chromium (the system's, never a downloaded one); yields the browser. Each context of it
    (``browser.new_context(viewport=VIEWPORT)``) is a fresh profile: its own cookies and storage."""
    assert CHROMIUM.exists(), "no /usr/bin/chromium: apt-get install chromium chromium-driver (tests/run_tests.sh does)"
    SCREENSHOTS.mkdir(exist_ok=True)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def browser(lab):
    """A context of :func:`chromium` for the course's JupyterLab."""
    with chromium() as chrome:
        yield chrome.new_context(viewport=VIEWPORT)


def open_notebook(browser, lab, path: str):
    """A new tab showing only the notebook at ``path`` (its own workspace, reset), its kernel idle."""
    page = browser.new_page()
    workspace = path.replace("/", "-").removesuffix(".ipynb")
    page.goto(f"{lab}/lab/workspaces/{workspace}/tree/{path}?reset&token={TOKEN}")
    page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=120_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
    # Seen once: a restart 1.3 s after the kernel started left 04_autograd's cells queued for ever
    # (jupyter_server failed to read a client message); so wait until the status bar says "Idle".
    page.wait_for_function("() => /\\| Idle/.test(document.querySelector('#jp-main-statusbar')?.innerText ?? '')", timeout=120_000)
    page.wait_for_timeout(2000)
    return page


def shut_down_kernels(lab) -> None:
    """Shut down every kernel (a closed tab leaves its kernel running), so the next notebook has the CPUs."""
    with urllib.request.urlopen(f"{lab}/api/kernels?token={TOKEN}") as response:
        kernels = json.load(response)
    for kernel in kernels:
        request = urllib.request.Request(f"{lab}/api/kernels/{kernel['id']}?token={TOKEN}", method="DELETE")
        urllib.request.urlopen(request).close()


def restart_and_run_all(page) -> dict:
    """Kernel > Restart Kernel and Run All Cells through the menu; waits until nothing is queued.

    Returns, in code-cell order, each cell's prompt text, whether it shows an error or stderr, and
    the images it shows with whether each has loaded.
    """
    page.click(".lm-MenuBar-itemLabel:text-is('Kernel')")
    page.click(".lm-Menu-itemLabel:text-is('Restart Kernel and Run All Cells…')")
    page.click(".jp-Dialog .jp-mod-accept")
    wait_until_run_ends(page)
    return page.evaluate(
        """() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')].map(cell => ({
            prompt: cell.querySelector('.jp-InputPrompt').textContent.trim(),
            error: cell.querySelector('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]') !== null,
            images: [...cell.querySelectorAll('.jp-OutputArea-output img')].map(img => img.complete && img.naturalWidth > 0),
        }))"""
    )


def wait_until_run_ends(page) -> None:
    """Wait until every code cell shows an execution count, or (Run All stopped at an error) until
    the kernel is idle, no cell is running and the prompts stay as they are for STABLE_S seconds."""
    page.wait_for_function(  # the run has started (the restart comes first)
        """() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]
            .some(p => p.textContent.trim() !== '[ ]:')""",
        timeout=120_000,
    )
    deadline = time.monotonic() + RUN_ALL_TIMEOUT_S
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        state = page.evaluate(
            """() => ({
                prompts: [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]
                    .map(p => p.textContent.trim()),
                idle: document.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']") !== null,
            })"""
        )
        prompts = state["prompts"]
        if prompts and all(re.fullmatch(r"\[\d+\]:", p) for p in prompts):
            return
        if prompts != last:
            last, since = prompts, time.monotonic()
        elif state["idle"] and "[*]:" not in prompts and time.monotonic() - since > STABLE_S:
            return
        time.sleep(1)
    raise AssertionError(f"Run All did not end in {RUN_ALL_TIMEOUT_S} s: prompts {last}")


def run_all_problems(cells: list[dict], notebook: nbformat.NotebookNode, reference: nbformat.NotebookNode) -> list[str]:
    """What is wrong with a Run All: cells not run, errors outside tagged cells, figures missing or not shown."""
    code = [c for c in notebook.cells if c.cell_type == "code"]
    problems = []
    ran = sum(1 for cell in cells if cell["prompt"] not in ("[ ]:", "[*]:"))
    if len(cells) != len(code) or ran != len(code):
        problems.append(f"ran {ran} of {len(code)} code cells")
    tagged = {i for i, c in enumerate(code) if raises_on_purpose(c)}
    shown = {i for i, cell in enumerate(cells) if cell["error"]}
    if shown != tagged:
        problems.append(f"errors shown in code cells {sorted(shown)}, tagged raises-exception: {sorted(tagged)}")
    figures = sum(1 for c in reference.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
    images = [loaded for cell in cells for loaded in cell["images"]]
    if len(images) != figures or not all(images):
        problems.append(f"{sum(images)} figures shown of {figures}")
    return problems


def press_validate(page) -> tuple[str, str]:
    """Press nbgrader's Validate button; returns the result's class (validation-success/-failed) and text."""
    page.click(".validate-button")
    message = page.wait_for_selector("#validation-message", timeout=VALIDATE_TIMEOUT_MS)
    return message.get_attribute("class"), message.inner_text()


@pytest.mark.parametrize("assignment_id", Course(ROOT).assignment_ids())
def test_run_all_reaches_the_end_and_validate_passes(browser, lab, course_folder, assignment_id):
    page = open_notebook(browser, lab, f"release/{assignment_id}/{assignment_id}.ipynb")
    cells = restart_and_run_all(page)
    notebook = read_notebook(course_folder / "release" / assignment_id / f"{assignment_id}.ipynb")
    problems = run_all_problems(cells, notebook, read_notebook(ROOT / "notebooks" / f"{assignment_id}.ipynb"))
    outcome, text = press_validate(page)
    page.screenshot(path=str(SCREENSHOTS / f"{assignment_id}.png"))
    page.close()
    shut_down_kernels(lab)
    assert problems == []
    assert "validation-success" in outcome, text
    assert "Success! Your notebook passes all the tests." in text


def test_validate_lists_exactly_the_wrong_and_the_unanswered_test_cells(browser, lab, course_folder):
    page = open_notebook(browser, lab, "mistakes/01_tensors.ipynb")
    outcome, text = press_validate(page)
    page.screenshot(path=str(SCREENSHOTS / "01_tensors-mistakes.png"))
    page.close()
    shut_down_kernels(lab)
    assert "validation-failed" in outcome, text
    notebook = read_notebook(course_folder / "mistakes" / "01_tensors.ipynb")
    listed = [
        grade_id(c)
        for c in notebook.cells
        if is_autograder_tests(c) and all(line.strip() in text for line in c.source.splitlines() if line.strip())
    ]
    assert listed == [WRONG[0], UNANSWERED]
    assert text.count("The following cell failed:") == 2


def test_run_all_stops_at_a_demonstration_cell_without_its_tag(browser, lab, course_folder):
    page = open_notebook(browser, lab, "untagged/01_tensors.ipynb")
    cells = restart_and_run_all(page)
    page.screenshot(path=str(SCREENSHOTS / "01_tensors-untagged.png"))
    page.close()
    shut_down_kernels(lab)
    notebook = read_notebook(course_folder / "untagged" / "01_tensors.ipynb")
    stopped_at = untagged(reference_submission("01_tensors"))[1]
    problems = run_all_problems(cells, notebook, read_notebook(ROOT / "notebooks" / "01_tensors.ipynb"))
    assert problems[0] == f"ran {stopped_at + 1} of {sum(c.cell_type == 'code' for c in notebook.cells)} code cells"
