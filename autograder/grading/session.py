"""Stage ``session``: nbgrader's autograde, generate_feedback and export in long-lived nbgrader processes.

``nbgrader autograde "*"``, ``generate_feedback "*"`` and ``export`` as three
commands pay nbgrader's start-up (about 2 s of imports and configuration) three
times, and can only start once every notebook of the batch is executed. A
:class:`Session` starts one process that loads nbgrader and the course's
``nbgrader_config.py`` once, as the ``nbgrader`` command does, and then runs
nbgrader's own converters through its Python API
(:class:`nbgrader.apps.NbGraderAPI`: ``autograde`` and ``generate_feedback``
of one student's assignment, the configured preprocessors unchanged) and its
export plugin, one request at a time, in the order asked.

:class:`Passes` runs a grading run's passes: one session autogrades (the
gradebook's one writer: its requests never run concurrently) each submission
as soon as the batch has executed its notebooks, while others still execute;
other sessions, which only read the gradebook, generate its feedback.

Requests and replies are JSON lines on the process's stdin and a file
descriptor of its own (nbgrader and the kernels it may start keep stdout and
stderr, which go to a log file).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import nbformat

from . import batch, sandbox
from .releases import update_gradebook
from .course import Course, CourseError, die_with_parent, nbgrader_environment
from .intake import Submission

PER_SUBMISSION_ERROR = "There was an error processing assignment"
"""How nbgrader's log starts the report of a submission it skipped (it goes on with the others)."""


@dataclass(frozen=True)
class Outcome:
    """What nbgrader did for one request."""

    success: bool
    log: str
    """nbgrader's log of this request (``[LEVEL] message`` lines)."""
    error: str = ""
    """The traceback when ``success`` is False."""

    def tail(self) -> str:
        """The last 15 lines of the log and traceback."""
        return "\n".join((self.log + self.error).strip().splitlines()[-15:])


class Session:
    """One nbgrader process for a grading run (a context manager; leaving it ends the process).

    Each method queues a request and returns at once with a future of its :class:`Outcome`; requests run
    one at a time, in the order made.

    Raises:
        CourseError: (from the futures) the nbgrader process ended before replying; its log is quoted.
    """

    def __init__(self, course: Course, *, env: dict[str, str] | None = None) -> None:
        self._log = tempfile.TemporaryFile(mode="w+", prefix="nbgrader-session-")
        read_replies, write_replies = os.pipe()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "autograder.session", str(course.root), str(write_replies)],
            cwd=course.root,
            env=nbgrader_environment(env),
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            text=True,
            pass_fds=(write_replies,),
            preexec_fn=functools.partial(die_with_parent, os.getpid()),
        )
        os.close(write_replies)
        self._replies = os.fdopen(read_replies, encoding="utf-8")
        self._pending: list[concurrent.futures.Future[Outcome]] = []
        self._ended: CourseError | None = None
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def generate_assignment(
        self, assignment_id: str, *, release_dir: Path, db_url: str
    ) -> concurrent.futures.Future[Outcome]:
        """``nbgrader generate_assignment ASSIGNMENT --force`` into ``release_dir/<id>/``, recorded in ``db_url`` (for
        this request only: the others keep the course's folders and gradebook)."""
        request = {"op": "generate_assignment", "assignment": assignment_id, "release_dir": str(release_dir)}
        return self._request(request | {"db_url": db_url})

    def autograde(self, assignment_id: str, student_id: str) -> concurrent.futures.Future[Outcome]:
        """``nbgrader autograde ASSIGNMENT --student STUDENT --force`` (submitted/ -> autograded/, gradebook)."""
        return self._request({"op": "autograde", "assignment": assignment_id, "student": student_id})

    def generate_feedback(
        self, assignment_id: str, student_id: str, *, reuse: bool = True
    ) -> concurrent.futures.Future[Outcome]:
        """``nbgrader generate_feedback ASSIGNMENT --student STUDENT --force`` (autograded/ -> feedback/); with
        ``reuse``, not asked of nbgrader when an earlier run made the pages from exactly what they would be made
        from now: those are put back (:func:`autograder.feedbackstore.restore_feedback`)."""
        request = {"op": "generate_feedback", "assignment": assignment_id, "student": student_id}
        return self._request(request | {"reuse": reuse})

    def export(self, to: Path) -> concurrent.futures.Future[Outcome]:
        """``nbgrader export --to=TO`` with the configured export plugin (``c.ExportApp.plugin_class``)."""
        return self._request({"op": "export", "to": str(to)})

    def _request(self, request: dict[str, str | bool]) -> concurrent.futures.Future[Outcome]:
        future: concurrent.futures.Future[Outcome] = concurrent.futures.Future()
        with self._lock:
            if self._ended is not None:
                future.set_exception(self._ended)
                return future
            self._pending.append(future)
            try:
                self._process.stdin.write(json.dumps(request) + "\n")
                self._process.stdin.flush()
            except (BrokenPipeError, ValueError):  # the process is gone: the reader fails every pending future
                pass
        return future

    def _read(self) -> None:
        for line in self._replies:
            reply = json.loads(line)
            with self._lock:
                future = self._pending.pop(0)
            future.set_result(Outcome(**reply))
        self._process.wait()
        self._log.seek(0)
        tail = "\n".join(self._log.read().strip().splitlines()[-15:])
        with self._lock:
            self._ended = CourseError(f"nbgrader ended (exit {self._process.returncode}):\n{tail}")
            pending, self._pending = self._pending, []
        for future in pending:
            future.set_exception(self._ended)

    def close(self) -> None:
        """Let the process finish what was asked, then end it."""
        with self._lock, contextlib.suppress(BrokenPipeError):  # a process already gone has nothing left to do
            pending = list(self._pending)
            self._process.stdin.close()
        concurrent.futures.wait(pending)
        self._process.kill()  # every request is answered: only the interpreter's teardown is left (0.5 s and more)
        self._reader.join()
        self._replies.close()
        self._log.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if error is not None:
            self._process.kill()
        self.close()


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
    workers (:class:`autograder.batch.Batch`), so that their start-up, and the reference runs of the assignments
    :meth:`release` is asked for, overlap whatever the run does before :meth:`run`; leaving ends them.
    ``isolated``, ``workers``, ``no_cache``: see :func:`autograder.batch.execute` (with ``no_cache``, feedback
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
        (:func:`autograder.releases.update_gradebook`, by the autograding session), its reference run started in
        the batch (:meth:`autograder.batch.Batch.reference`); only while entered.

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
        """Execute the placed ``submissions`` (:meth:`autograder.batch.Batch.execute`) and autograde each as soon
        as its notebooks are executed, while the rest execute; generate its feedback right after (with
        ``feedback``; pages an earlier run made from the same inputs are kept, unless ``no_cache``); then, with
        ``export_to``, export the grades there. Returns once all of it is done.

        ``scheduler``, ``progress``: see :meth:`autograder.batch.Batch.execute`. A submission nbgrader
        cannot grade is left out of autograded/ and said in the log (:data:`PER_SUBMISSION_ERROR`).

        Raises:
            CourseError: nbgrader fails other than on single submissions, cannot export, or ends.
            OSError, ValueError: see :meth:`autograder.batch.Batch.execute`.
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
            export = self._nbgrader.export(export_to).result()
            if not export.success:
                raise CourseError(f"nbgrader export failed:\n{export.tail()}")
        outcomes += [future.result() for future in generated]
        return PassesRun(batch=executed, log="\n".join(outcome.log for outcome in outcomes))


def feedback_processes(workers: int | None) -> int:
    """nbgrader processes that generate feedback beside the autograding one: one per two workers of the batch
    (:func:`autograder.batch.default_workers` by default), at least one. A page costs 0.27 to 0.34 s of CPU
    (``demo --all``, sampled from /proc), a notebook's execution about 1 s in its kernel and 0.25 s in its
    worker, so one process keeps up with two workers; each process more costs 1.0 to 1.3 s of CPU to start."""
    return max(1, ((workers or batch.default_workers()) + 1) // 2)


def serve(root: str, replies: int) -> None:
    """The nbgrader process: load nbgrader and the course's configuration once, then answer each request line
    of stdin with a reply line on file descriptor ``replies``, until stdin ends."""
    from nbgrader.api import Gradebook
    from nbgrader.apps import ExportApp, NbGraderAPI, NbGraderApp
    from nbgrader.utils import temp_attrs

    from .feedbackstore import feedback_key, keep_feedback, restore_feedback

    app = NbGraderApp()
    app.initialize([f"--CourseDirectory.root={root}"])  # config files as the nbgrader command loads them
    api = NbGraderAPI(coursedir=app.coursedir, parent=app)
    course = Course(Path(root))

    def export(to: str) -> None:
        exporter = ExportApp(parent=app)
        exporter.coursedir = app.coursedir
        plugin = exporter.plugin_class(parent=exporter)
        plugin.to = to
        with Gradebook(app.coursedir.db_url, app.coursedir.course_id) as gradebook:
            plugin.export(gradebook)

    with os.fdopen(replies, "w", encoding="utf-8") as out:
        for line in sys.stdin:
            request = json.loads(line)
            operation = request.pop("op")
            if operation == "generate_assignment":
                folders = {"release_directory": request["release_dir"], "db_url": request["db_url"]}
                with temp_attrs(app.coursedir, **folders):
                    reply = api.generate_assignment(request["assignment"], force=True, create=True)
            elif operation == "autograde":
                reply = api.autograde(request["assignment"], request["student"], force=True, create=True)
            elif operation == "generate_feedback":
                ids = request["assignment"], request["student"]
                key = feedback_key(course, *ids)
                if request["reuse"] and restore_feedback(course, *ids, key):
                    reply = {"success": True, "log": f"[INFO] feedback/{ids[1]}/{ids[0]}: kept pages, same inputs"}
                else:
                    reply = api.generate_feedback(*ids, force=True)
                    keep_feedback(course, *ids, key if reply["success"] else None)
            else:
                try:
                    export(request["to"])
                    reply = {"success": True}
                except Exception as error:  # said in the reply, like the API's own failures
                    reply = {"success": False, "error": f"{type(error).__name__}: {error}"}
            reply = {"success": bool(reply["success"]), "log": reply.get("log", ""), "error": reply.get("error", "")}
            out.write(json.dumps(reply) + "\n")
            out.flush()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
