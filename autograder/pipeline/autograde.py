"""Stage ``autograde``: three of nbgrader autograde's steps without the work they repeat for every notebook.

The course's one nbgrader process autogrades every notebook of a run, one at a time (it is the gradebook's one
writer, :mod:`autograder.grading.session`), so what it spends per notebook is serial. Measured over 27 stored executions
(4 generated students of the seven assignments; ``api.autograde`` in one process, outputs stored), nbgrader
0.9.6 spent about 0.16 s of CPU per notebook, and two parts of it were repeated work with nothing to show:

- ``CheckCellMetadata`` (run twice per notebook, in the sanitising pass and the autograding one) validates each
  cell's nbgrader metadata with ``jsonschema.validate``, which first checks nbgrader's *schema* against the JSON
  Schema meta-schema, for every cell: 90 % of the step. :class:`CheckCellMetadata` checks the schema once per
  process and validates each cell with the resulting validator; a cell that fails, or has another schema
  version, goes through nbgrader's own ``validate_cell``, so its error and message are nbgrader's.
- nbconvert's ``NotebookExporter`` writes each pass's notebook with ``nbformat.writes``, which deep-copies the
  whole notebook again (it may not change the caller's) and validates it once more. The exporter's notebook is
  its own copy, already validated after its preprocessors (``Exporter.optimistic_validation``), and dropped
  once written. :class:`AutogradedNotebookExporter` writes that copy in place, to the same bytes.
- nbconvert copies the notebook three times in each conversion before its preprocessors run, where one copy
  leaves the caller's notebook as it was (:class:`CopiedOnceExporter`, the feedback page's exporter's too).

Together: 0.16 to 0.127 s of CPU per notebook in that process. The sanitising the batch does before executing
(:func:`autograder.pipeline.batch.jobs_of`, serial in the ``grade`` command) uses the same ``CheckCellMetadata``.
The classes are named in ``nbgrader_config.py`` (``Autograde.sanitize_preprocessors``,
``Autograde.autograde_preprocessors`` and ``Autograde.exporter_class``).
"""

from __future__ import annotations

import copy
import json
import traceback
from typing import Any, ClassVar

import jsonschema
from nbconvert.exporters import Exporter, NotebookExporter
from nbformat import validator
from nbformat.notebooknode import NotebookNode
from nbformat.v4.nbjson import BytesEncoder
from nbformat.v4.rwbase import split_lines, strip_transient
from nbgrader import preprocessors
from nbgrader.nbgraderformat import MetadataValidator as StockMetadataValidator
from nbgrader.nbgraderformat import ValidationError
from nbgrader.nbgraderformat.common import BaseMetadataValidator


class _SchemaCheckedOnce(BaseMetadataValidator):
    """``validate_cell`` of nbgrader's base validator, its schema checked once per process."""

    _validators: ClassVar[dict[int, jsonschema.protocols.Validator]] = {}

    def validate_cell(self, cell: NotebookNode) -> None:
        """Return if the cell has no nbgrader metadata, or metadata of this schema version that the schema
        accepts; otherwise nbgrader's own check, which raises its ``SchemaTooOldError``, ``SchemaTooNewError``
        or jsonschema's ``ValidationError`` (the error jsonschema's ``best_match`` picks)."""
        metadata = cell.metadata.get("nbgrader")
        if metadata is None:
            return
        if metadata.get("schema_version", 0) == self.schema_version and self._validator().is_valid(metadata):
            return
        super().validate_cell(cell)

    def _validator(self) -> jsonschema.protocols.Validator:
        found = self._validators.get(self.schema_version)
        if found is None:  # what jsonschema.validate does each call: the schema's draft, the schema checked
            kind = jsonschema.validators.validator_for(self.schema)
            kind.check_schema(self.schema)
            found = self._validators[self.schema_version] = kind(self.schema)
        return found


class MetadataValidator(StockMetadataValidator, _SchemaCheckedOnce):
    """nbgrader's current metadata validator (its ``MetadataValidator``, schema version 3): its checks of a cell
    (a markdown grade cell must be a solution...) call the base ``validate_cell`` through ``super()``, which is
    :class:`_SchemaCheckedOnce`'s here."""


class CheckCellMetadata(preprocessors.CheckCellMetadata):
    """nbgrader's ``CheckCellMetadata`` (ids unique, metadata valid) with :class:`MetadataValidator`.

    Raises:
        nbgrader.nbgraderformat.ValidationError: as nbgrader's, with its message and log lines.
        nbgrader.nbgraderformat.SchemaTooOldError, SchemaTooNewError: a cell's schema version is not nbgrader's
            (nbgrader's step lets these through as well).
    """

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]) -> tuple[NotebookNode, dict[str, Any]]:
        try:
            MetadataValidator().validate_nb(nb)
        except ValidationError:
            self.log.error(traceback.format_exc())
            message = "Notebook failed to validate; the nbgrader metadata may be corrupted."
            self.log.error(message)
            raise ValidationError(message)
        return nb, resources


class CopiedOnceExporter(Exporter):
    """An nbconvert exporter that copies the notebook it converts once, not three times.

    nbconvert 7.17's ``from_notebook_node`` deep-copies the notebook, then ``_preprocess`` copies that copy, and
    nbformat's ``normalize`` copies it once more (about 12 ms of CPU each for a graded notebook of this course,
    three conversions a submission: nbgrader autograde's two passes and its feedback page). Here ``_preprocess``
    works on the copy ``from_notebook_node`` made, which no one else holds; the caller's notebook is still left
    as it was.
    """

    def _preprocess(self, nb: NotebookNode, resources: dict[str, Any]) -> tuple[NotebookNode, dict[str, Any]]:
        """nbconvert 7.17's ``Exporter._preprocess`` on ``nb`` itself: normalised in place (nbformat's
        ``_normalize``, which its ``normalize`` runs on a copy), each preprocessor run, validated as configured.

        Raises:
            nbformat.ValidationError: the notebook is invalid after a preprocessor (nbconvert's validation).
        """
        resources = copy.deepcopy(resources)
        major, minor = validator.get_version(nb)
        _, nb = validator._normalize(nb, major, minor, True, relax_add_props=False, strip_invalid_metadata=False)
        for preprocessor in self._preprocessors:
            nb, resources = preprocessor(nb, resources)
            if not self.optimistic_validation:
                self._validate_preprocessor(nb, preprocessor)
        if self.optimistic_validation and self._preprocessors:
            self._validate_preprocessor(nb, preprocessor)
        return nb, resources


class AutogradedNotebookExporter(CopiedOnceExporter, NotebookExporter):
    """nbconvert's ``NotebookExporter`` that writes its own (already validated) copy of the notebook without
    copying it once more: the same JSON as ``nbformat.writes`` (nbformat's v4 writer: one space of indent,
    sorted keys, text split into lines, transient metadata left out)."""

    def from_notebook_node(
        self, nb: NotebookNode, resources: dict[str, Any] | None = None, **kw: Any
    ) -> tuple[str, dict[str, Any]]:
        """The notebook after the exporter's preprocessors, as nbformat JSON text ending in a newline.

        Raises:
            nbformat.ValidationError: the preprocessed notebook is invalid (nbconvert's validation).
        """
        if nb.nbformat != self.nbformat_version:  # a conversion: nbconvert's own way
            return super().from_notebook_node(nb, resources, **kw)
        copied, resources = Exporter.from_notebook_node(self, nb, resources, **kw)
        resources["output_suffix"] = ".nbconvert"
        written = json.dumps(
            strip_transient(split_lines(copied)),
            cls=BytesEncoder, indent=1, sort_keys=True, separators=(",", ": "), ensure_ascii=False,
        )
        return written + "\n", resources
