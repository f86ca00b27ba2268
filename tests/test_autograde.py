"""nbgrader autograde's steps without their repeated work (autograder/pipeline/autograde.py): the same results as
nbgrader's.

The course's seven reference notebooks (nbgrader metadata in every graded cell, outputs of a real run) are the
valid inputs; the invalid ones are each kind of metadata nbgrader's checks reject.
"""

import copy

import jsonschema
import nbformat
import pytest
from nbconvert.exporters import Exporter, NotebookExporter
from nbformat import validator
from nbgrader import preprocessors
from nbgrader.nbgraderformat import MetadataValidator as StockMetadataValidator
from nbgrader.nbgraderformat import SchemaTooNewError, SchemaTooOldError, ValidationError
from traitlets.config import Config

from autograder.pipeline import batch
from autograder.pipeline.autograde import (
    AutogradedNotebookExporter,
    CheckCellMetadata,
    CopiedOnceExporter,
    MetadataValidator,
)
from autograder.results.feedback import FeedbackExporter
from autograder.course import ROOT, Course, is_grade, is_solution, read_notebook

COURSE = Course(ROOT)
ASSIGNMENTS = COURSE.chosen(None)


def reference(assignment_id: str) -> nbformat.NotebookNode:
    return read_notebook(COURSE.reference_notebook(assignment_id))


def broken(change: str) -> nbformat.NotebookNode:
    """01's reference notebook with one kind of metadata that nbgrader rejects."""
    notebook = reference("01_tensors")
    graded = [cell for cell in notebook.cells if is_grade(cell)]
    written = next(cell for cell in graded if is_solution(cell) and cell.cell_type == "markdown")
    if change == "old schema":
        graded[0].metadata.nbgrader.schema_version = 2
    elif change == "new schema":
        graded[0].metadata.nbgrader.schema_version = 4
    elif change == "points not a number":
        graded[0].metadata.nbgrader.points = "two"
    elif change == "unknown key":
        graded[0].metadata.nbgrader.weight = 1
    elif change == "markdown grade cell not a solution":
        written.metadata.nbgrader.solution = False
    elif change == "grade id twice":
        graded[1].metadata.nbgrader.grade_id = graded[0].metadata.nbgrader.grade_id
    return notebook


@pytest.mark.parametrize("assignment_id", ASSIGNMENTS)
def test_valid_metadata_passes_both_checks(assignment_id):
    notebook = reference(assignment_id)
    StockMetadataValidator().validate_nb(notebook)
    assert CheckCellMetadata().preprocess(notebook, {})[0] is notebook


@pytest.mark.parametrize(
    "change",
    [
        "old schema",
        "new schema",
        "points not a number",
        "unknown key",
        "markdown grade cell not a solution",
        "grade id twice",
    ],
)
def test_invalid_metadata_fails_with_nbgraders_error(change):
    with pytest.raises((ValidationError, SchemaTooOldError, SchemaTooNewError)) as stock:
        StockMetadataValidator().validate_nb(broken(change))
    with pytest.raises(type(stock.value)) as ours:
        MetadataValidator().validate_nb(broken(change))
    assert str(ours.value) == str(stock.value)
    raised = []
    for check in (preprocessors.CheckCellMetadata(), CheckCellMetadata()):  # the step's own message, if any
        with pytest.raises(type(stock.value)) as error:
            check.preprocess(broken(change), {})
        raised.append(str(error.value))
    assert raised[1] == raised[0]


def test_the_schema_is_checked_once_per_process(monkeypatch):
    checked = []
    kind = jsonschema.validators.validator_for(StockMetadataValidator().schema)
    original = kind.check_schema.__func__

    def counted(cls, schema):
        checked.append(schema)
        return original(cls, schema)

    monkeypatch.setattr(kind, "check_schema", classmethod(counted))
    monkeypatch.setattr(MetadataValidator, "_validators", {})
    for assignment_id in ASSIGNMENTS:
        CheckCellMetadata().preprocess(reference(assignment_id), {})
    assert len(checked) == 1  # nbgrader's: once per cell with nbgrader metadata (over 300 here)


@pytest.mark.parametrize("assignment_id", ASSIGNMENTS)
def test_the_exporter_writes_nbformats_bytes_and_leaves_its_input(assignment_id, monkeypatch):
    notebook = reference(assignment_id)
    notebook.metadata.signature = "transient: never written"
    before = copy.deepcopy(notebook)
    config = Config({"Exporter": {"optimistic_validation": True}})
    stock, _ = NotebookExporter(config=config).from_notebook_node(notebook)

    def copies_again(*args, **kwargs):
        raise AssertionError("nbformat.writes copies the notebook once more")

    monkeypatch.setattr(nbformat, "writes", copies_again)
    ours, resources = AutogradedNotebookExporter(config=config).from_notebook_node(notebook)
    assert ours == stock
    assert resources["output_suffix"] == ".nbconvert"
    assert notebook == before


@pytest.mark.parametrize("exporter", [AutogradedNotebookExporter, FeedbackExporter])
def test_an_exporter_copies_the_notebook_once_and_converts_it_as_with_nbconverts_copies(exporter, monkeypatch):
    """nbconvert copied the notebook three times per conversion; the course's exporters copy it once (still leaving
    the caller's notebook as it was), and make the same output as with nbconvert's own ``_preprocess``."""
    notebook = reference("05_broadcasting_amp")
    before = copy.deepcopy(notebook)
    config = Config({"Exporter": {"optimistic_validation": True}})
    copied: list[int] = []

    def converted() -> str:
        copied.clear()
        for module in (copy, validator):
            real = module.deepcopy
            notebook_copy = lambda x, *a, real=real: copied.append(isinstance(x, dict) and "cells" in x) or real(x, *a)
            monkeypatch.setattr(module, "deepcopy", notebook_copy)
        output, _ = exporter(config=config).from_notebook_node(notebook)
        monkeypatch.undo()
        return output

    ours, ours_copies = converted(), copied.count(True)
    monkeypatch.setattr(CopiedOnceExporter, "_preprocess", Exporter._preprocess)
    with_nbconverts = converted()
    assert (ours_copies, copied.count(True)) == (1, 3)
    assert ours == with_nbconverts and notebook == before


def test_the_batch_sanitises_with_the_configured_steps():
    assert batch.sanitize_preprocessors(COURSE) == [
        preprocessors.ClearOutput,
        preprocessors.DeduplicateIds,
        preprocessors.OverwriteKernelspec,
        preprocessors.OverwriteCells,
        CheckCellMetadata,
    ]
