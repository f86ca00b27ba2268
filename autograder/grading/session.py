"""Stage ``session``: a grading run's passes, in nbgrader processes (:mod:`autograder.pipeline.nbgrader_process`).

:class:`Passes` runs a grading run's passes: one session autogrades (the
gradebook's one writer: its requests never run concurrently) each submission
as soon as the batch has executed its notebooks, while others still execute;
other sessions, which only read the gradebook, generate its feedback.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import nbformat

from ..course import Course, CourseError
from ..kernel import sandbox
from ..pipeline import batch
from ..pipeline.intake.submissions import Submission
from ..pipeline.nbgrader_process import PER_SUBMISSION_ERROR, Outcome, Session, export_grades
from ..pipeline.releases import update_gradebook

@dataclass
class PassesRun:
    """What :meth:`Passes.run` did."""

    batch: batch.BatchRun
    log: str
    """nbgrader's log of every autograde and feedback request, in order."""


class Passes:
    """nbgrader's passes of one grading run over the batch (a context manager).

    Entering starts the nbgrader processes (one :class:`Session` that autogrades and, with ``feedback``,
    :func:`feedback_processes` more that generate feedback: feedback only reads the gradebook) and the batch's
    workers (:class:`autograder.pipeline.batch.Batch`), so that their start-up, and the reference runs of the
    assignments :meth:`release` is asked for, overlap whatever the run does before :meth:`run`; leaving ends them.
    ``isolated``, ``workers``, ``no_cache``: see :func:`autograder.pipeline.batch.execute` (with ``no_cache``, feedback
    pages are generated again too).
    """

    def __init__(
        self, course: Course, *, isolated: bool, workers: int | None = None, feedback: bool, no_cache: bool = False
    ) -> None:
        self.course, self.isolated, self.workers, self.no_cache = course, isolated, workers, no_cache
        self._feeders = feedback_processes(workers) if feedback else 0
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Passes:
        # A notebook the batch could not execute is executed by nbgrader, its kernel threaded as the batch's.
        env = {name: value for name, value in batch.KERNEL_THREADS.items() if name not in os.environ}
        if not self.isolated:
            env[sandbox.DISABLED_ENV] = "1"
        with self._stack as stack:
            self._nbgrader = stack.enter_context(Session(self.course, env=env))
            self._feedback = [stack.enter_context(Session(self.course, env=env)) for _ in range(self._feeders)]
            options = {"isolated": self.isolated, "workers": self.workers, "no_cache": self.no_cache}
            self._batch = stack.enter_context(batch.Batch(self.course, **options))
            self._stack = stack.pop_all()
        return self

    def release(self, assignment_id: str) -> nbformat.NotebookNode:
        """The assignment's grade cells recorded in the gradebook and its release notebook
        (:func:`autograder.pipeline.releases.update_gradebook`, by the autograding session), its reference run started
        in the batch (:meth:`autograder.pipeline.batch.Batch.reference`); only while entered.

        Raises:
            CourseError: nbgrader refused (its log is quoted).
        """
        self._batch.reference(assignment_id)
        return update_gradebook(self.course, assignment_id, nbgrader=self._nbgrader)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._stack.__exit__(kind, error, traceback)

    def run(
        self,
        submissions: list[Submission],
        *,
        scheduler: str | None = None,
        progress: Callable[[str], None] = lambda line: None,
        export_to: Path | None = None,
    ) -> PassesRun:
        """Execute the placed ``submissions`` (:meth:`autograder.pipeline.batch.Batch.execute`) and autograde each as
        soon as its notebooks are executed, while the rest execute; generate its feedback right after (with
        ``feedback``; pages an earlier run made from the same inputs are kept, unless ``no_cache``); then, with
        ``export_to``, export the grades there. Returns once all of it is done.

        ``scheduler``, ``progress``: see :meth:`autograder.pipeline.batch.Batch.execute`. A submission nbgrader
        cannot grade is left out of autograded/ and said in the log (:data:`PER_SUBMISSION_ERROR`).

        Raises:
            CourseError: nbgrader fails other than on single submissions, cannot export, or ends.
            OSError, ValueError: see :meth:`autograder.pipeline.batch.Batch.execute`.
        """
        autograded: list[concurrent.futures.Future[Outcome]] = []
        generated: list[concurrent.futures.Future[Outcome]] = []
        followed = threading.Semaphore(0)  # released once each autograde's feedback is asked for (or not needed)

        def autograde(submission: Submission) -> None:
            feeder = self._feedback[len(autograded) % len(self._feedback)] if self._feedback else None
            ids = submission.assignment_id, submission.student_id

            def then_feedback(done: concurrent.futures.Future[Outcome]) -> None:  # run by the session's reader
                try:
                    if feeder and done.exception() is None and done.result().success:
                        generated.append(feeder.generate_feedback(*ids, reuse=not self.no_cache))
                finally:
                    followed.release()

            autograded.append(self._nbgrader.autograde(*ids))
            autograded[-1].add_done_callback(then_feedback)

        executed = self._batch.execute(submissions, scheduler=scheduler, progress=progress, ready=autograde)
        progress("nbgrader autograde" + (", generate_feedback" if self._feedback else ""))
        outcomes = [future.result() for future in autograded]
        for _ in autograded:
            followed.acquire()
        if failure := next((o for o in outcomes if not o.success and PER_SUBMISSION_ERROR not in o.log), None):
            raise CourseError(f"nbgrader autograde failed:\n{failure.tail()}")
        if export_to is not None:
            export_grades(self._nbgrader, export_to)
        outcomes += [future.result() for future in generated]
        return PassesRun(batch=executed, log="\n".join(outcome.log for outcome in outcomes))


def feedback_processes(workers: int | None) -> int:
    """nbgrader processes that generate feedback beside the autograding one: one per two workers of the batch
    (:func:`autograder.pipeline.batch.default_workers` by default), at least one. A page costs 0.27 to 0.34 s of CPU
    (``demo --all``, sampled from /proc), a notebook's execution about 1 s in its kernel and 0.25 s in its
    worker, so one process keeps up with two workers; each process more costs 1.0 to 1.3 s of CPU to start."""
    return max(1, ((workers or batch.default_workers()) + 1) // 2)
