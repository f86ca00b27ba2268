"""pytest plugin for nbval on notebooks/: check records are compared by the grader, not by nbval.

Records (``autograder.kernel.checks.RECORD_MIME_TYPE``) hold full-precision values
whose last bits may differ between machines; the grader compares them with
the tolerance each check states. Everything else, stderr included, is compared.
"""

from autograder.kernel.checks import RECORD_MIME_TYPE


def pytest_collectstart(collector):
    if hasattr(collector, "skip_compare"):  # nbval's IPyNbFile
        collector.skip_compare = (*collector.skip_compare, RECORD_MIME_TYPE)
