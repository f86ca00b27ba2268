"""The PyTorch Tensors course's autograder: build, check and grade with nbgrader (see README)."""

import sys

# jsonschema (imported by nbformat, nbclient and nbgrader) imports rfc3987_syntax, when installed, to check the
# "iri" string format, and that builds its parsers at import: 0.7 s to 1.1 s of every grading process's start
# (jsonschema issue 1428; the processes of a run: the CLI, the batch's workers, the nbgrader sessions). No schema
# those libraries validate (notebooks, nbgrader's cell metadata) uses that format, and none is validated with a
# format checker, so it is not imported in this package's processes.
sys.modules.setdefault("rfc3987_syntax", None)
