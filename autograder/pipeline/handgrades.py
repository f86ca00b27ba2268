"""nbgrader autograde, its SaveAutoGrades step: a grade given by hand stays final while the answer it was given for
is the one graded again.

Stock nbgrader (0.9.6, ``SaveAutoGrades._add_score``) flags every grade cell that has a manual score as needing a
manual grade each time the submission is autograded, even when nothing changed: a re-run of ``grade`` then showed
every written answer graded by hand as ``manual grade pending`` again, and formgrader listed it as still to grade.
:class:`KeepHandGrades` keeps nbgrader's rule except for one case: the grader's last word stands (formgrader left
``needs_manual_grade`` false), and the answer is the one the previous autograde saw, so the grader saw it too.
A changed answer is flagged for a new hand grade as before, and its old hand grade no longer counts (nbgrader kept
it in the score, so grades.csv gave points for an answer no one had graded). The grader's comment stays, for the
student to read what was said, but begins with :data:`EARLIER_ANSWER` (on the feedback page and in formgrader,
where the grader replaces it on grading the new answer): it was written about another answer.

The answers' checksums (nbgrader's ``compute_checksum`` of the cell) at the last autograde are kept beside the
gradebook, in :data:`ANSWERS_FILE` of the course directory, git-ignored like the gradebook; without it (a gradebook
older than this step) nbgrader's rule applies once.
"""

from __future__ import annotations

import json
from pathlib import Path

from nbconvert.exporters.exporter import ResourcesDict
from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import SaveAutoGrades

from ..course import write_atomically

ANSWERS_FILE = "gradebook.answers.json"
"""``{"<student>/<assignment>/<notebook>/<grade_id>": checksum}`` of each hand-graded answer at the last autograde."""
EARLIER_ANSWER = "(on an earlier version of this answer) "
"""What a hand-grade comment begins with once the answer it was written about has changed."""


class KeepHandGrades(SaveAutoGrades):
    """nbgrader's ``SaveAutoGrades``, except that a hand grade of an unchanged answer is not flagged again."""

    def preprocess(self, nb: NotebookNode, resources: ResourcesDict) -> tuple[NotebookNode, ResourcesDict]:
        """Save the notebook's grades (nbgrader's step), then record the checksums of its hand-graded answers."""
        self.answers_path = Path(CourseDirectory(config=self.config).root) / ANSWERS_FILE
        self.answers = json.loads(self.answers_path.read_text()) if self.answers_path.exists() else {}
        nb, resources = super().preprocess(nb, resources)
        write_atomically(self.answers_path, json.dumps(self.answers, indent=1, sort_keys=True))
        return nb, resources

    def _add_score(self, cell: NotebookNode, resources: ResourcesDict) -> None:
        grade = self.gradebook.find_grade(
            cell.metadata["nbgrader"]["grade_id"], self.notebook_id, self.assignment_id, self.student_id
        )
        graded_by_hand = grade.manual_score is not None and not grade.needs_manual_grade  # before nbgrader resets it
        super()._add_score(cell, resources)
        if not utils.is_solution(cell):  # autograder tests: a manual override is reviewed again, as nbgrader does
            return
        key = "/".join([self.student_id, self.assignment_id, self.notebook_id, cell.metadata["nbgrader"]["grade_id"]])
        checksum = utils.compute_checksum(cell)
        if graded_by_hand and self.answers.get(key) == checksum:
            grade.needs_manual_grade = False
            self.gradebook.db.commit()
        elif grade.manual_score is not None and self.answers.get(key, checksum) != checksum:
            self.log.warning(
                "%s: %s changed since it was graded by hand (%s points): that grade no longer counts, grade it anew",
                self.student_id, cell.metadata["nbgrader"]["grade_id"], grade.manual_score,
            )
            grade.manual_score = None  # the hand grade was for another answer: it must not count for this one
            comment = self.gradebook.find_comment(
                cell.metadata["nbgrader"]["grade_id"], self.notebook_id, self.assignment_id, self.student_id
            )
            if comment.manual_comment and not comment.manual_comment.startswith(EARLIER_ANSWER):
                comment.manual_comment = EARLIER_ANSWER + comment.manual_comment
            self.gradebook.db.commit()
        self.answers[key] = checksum
