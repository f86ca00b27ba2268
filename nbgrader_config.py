"""nbgrader configuration of the PyTorch Tensors course.

This folder is the nbgrader course directory: nbgrader's commands run here
(``python -m autograder`` runs them for you) and keep their state here:
submitted/, autograded/, feedback/ and gradebook.db (all git-ignored).
"""

import os
import sys

# The course's own nbgrader preprocessors live in autograder/ beside this file
# (`python -m autograder` also puts that folder on PYTHONPATH for scratch course copies).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# nbgrader runs `alembic` by name when it creates a gradebook (nbgrader.api.get_alembic_version): find this
# environment's, also where it was not activated (`.venv/bin/jupyter lab` starting formgrader, `.venv/bin/nbgrader`).
_bin = os.path.dirname(sys.executable)
if _bin not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = os.pathsep.join(filter(None, [_bin, os.environ.get("PATH")]))

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "pytorch-tensors"

# Notebooks and helpers of an assignment; editor droppings never travel.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".DS_Store"]

# Grading: a cell may run for at most a minute; kernels are killed at once
# when a notebook is done (a graceful shutdown after `import torch` costs
# about 0.6 s per notebook and changes nothing in the results).
c.Execute.timeout = 60
c.Execute.shutdown_kernel = "immediate"

# Students' kernels run in a bubblewrap sandbox (autograder/kernel/sandbox.py, used by
# autograder/pipeline/execute.py): a scratch copy of their folder, no course directory, no
# network, their own user, limits. `grade --no-sandbox` is the explicit opt-out.

# Release notebooks: what replaces a solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Autograde: nbgrader's steps, with Execute extended (autograder/pipeline/execute.py: the
# sandbox, and a kernel that dies or hangs costs only its cell) and the verdict
# outside the kernel right after execution (autograder/pipeline/verdict.py): a test cell whose recorded check values do
# not pass against the reference solution's run gets an error, so it scores 0. SaveAutoGrades is extended
# (autograder/pipeline/handgrades.py) so that re-grading keeps a hand grade of an unchanged answer final. Both passes'
# CheckCellMetadata checks nbgrader's schema once, not for every cell, and the exporter writes each notebook
# without copying it once more (autograder/pipeline/autograde.py). The sanitising steps are nbgrader's defaults
# otherwise; the batch sanitises with the same list before it executes (autograder/pipeline/batch.py).
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    "autograder.pipeline.autograde.CheckCellMetadata",
]
c.Autograde.autograde_preprocessors = [
    "autograder.pipeline.execute.Execute",
    "autograder.pipeline.verdict.CompareRecords",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "autograder.pipeline.handgrades.KeepHandGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "autograder.pipeline.autograde.CheckCellMetadata",
]
c.Autograde.exporter_class = "autograder.pipeline.autograde.AutogradedNotebookExporter"
# Autograde clears notebook metadata but the language's name (nbconvert's ClearMetadataPreprocessor); it also keeps
# why intake could not read a student's file (autograder.pipeline.structure.UNREADABLE), which their feedback page
# says. Named here, not imported: nbgrader reads this file where the package may not be importable.
c.ClearMetadataPreprocessor.preserve_nb_metadata_mask = {("language_info", "name"), ("autograder", "unreadable")}

# Whatever students wrote (markdown answers and attachments, outputs of every MIME type and their metadata) is
# sanitised by nbconvert's SanitizeHTML extended to all a template reads (autograder/results/safehtml.py: bleach escapes
# unsafe tags and attributes, outputs keep only the MIME types a page shows safely, image metadata only whole
# widths and heights) and JavaScript outputs are not emitted (sanitize_html), wherever nbconvert's HTMLExporter
# renders a notebook with this configuration: feedback pages, and formgrader, which builds its exporter from this
# config. Feedback pages also sanitise rendered markdown and carry a Content-Security-Policy
# (autograder/results/feedback.py).
c.HTMLExporter.preprocessors = ["autograder.results.safehtml.SafeNotebook"]
c.HTMLExporter.sanitize_html = True

# nbconvert validates a notebook once, after all of an export's preprocessors, not after each of them (for
# autograde, 0.1 s of CPU a notebook: a quarter of its time with every output stored); an invalid one still fails.
c.Exporter.optimistic_validation = True

# Feedback: hidden tests' code and expected values never reach a student, and the page of a file that could not be
# read begins by saying why (autograder/results/feedback.py); the rest is nbgrader's default, rendered by nbconvert's
# HTMLExporter with its templates compiled once per process (autograder.results.feedback.FeedbackExporter).
c.GenerateFeedback.exporter_class = "autograder.results.feedback.FeedbackExporter"
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "autograder.results.feedback.UnreadableNote",
    "autograder.results.feedback.HideHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]

# Export: nbgrader's grades.csv columns, written with CSV quoting (autograder/results/report.py),
# so a student id or name with a comma or a quote keeps its row's columns.
c.ExportApp.plugin_class = "autograder.results.report.QuotedCsvExport"
