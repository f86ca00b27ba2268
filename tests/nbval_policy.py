"""pytest plugin for nbval on notebooks/.

- Check records are compared by the grader, not by nbval. Records (``autograder.kernel.checks.RECORD_MIME_TYPE``)
  hold full-precision values whose last bits may differ between machines; the grader compares them with the
  tolerance each check states. Everything else, stderr included, is compared.
- nbval's kernels start with :data:`autograder.pipeline.reference.REPRODUCIBLE_CPU_ENV` added to the environment, as
  the kernels that wrote notebooks/ did: an output printed to a few decimals (``torch.linalg.lstsq``'s coefficients
  in 06) would otherwise change with the threads MKL picks.
"""

import os

from autograder.kernel.checks import RECORD_MIME_TYPE
from autograder.pipeline.reference import REPRODUCIBLE_CPU_ENV


def pytest_collectstart(collector):
    if hasattr(collector, "skip_compare"):  # nbval's IPyNbFile
        collector.skip_compare = (*collector.skip_compare, RECORD_MIME_TYPE)
        collector.setup = _in_reproducible_env(collector.setup)


def _in_reproducible_env(setup):
    """``setup`` (which starts the notebook's kernel; nbval gives it no environment of its own) run with
    :data:`REPRODUCIBLE_CPU_ENV` in ``os.environ``, which is restored after."""

    def reproducible_setup():
        saved = dict(os.environ)
        os.environ.update(REPRODUCIBLE_CPU_ENV)
        try:
            setup()
        finally:
            os.environ.clear()
            os.environ.update(saved)

    return reproducible_setup
