"""nbgrader's autograde, generate_feedback and export in long-lived nbgrader processes.

``nbgrader autograde "*"``, ``generate_feedback "*"`` and ``export`` as three
commands pay nbgrader's start-up (about 2 s of imports and configuration) three
times, and can only start once every notebook of the batch is executed. A
:class:`Session` starts one process that loads nbgrader and the course's
``nbgrader_config.py`` once, as the ``nbgrader`` command does, and then runs
nbgrader's own converters through its Python API
(:class:`nbgrader.apps.NbGraderAPI`: ``autograde`` and ``generate_feedback``
of one student's assignment, the configured preprocessors unchanged) and its
export plugin, one request at a time, in the order asked.

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
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ..course import Course, CourseError, die_with_parent, nbgrader_environment
from .feedbackstore import feedback_key, keep_feedback, restore_feedback

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
            [sys.executable, "-m", "autograder.pipeline.nbgrader_process", str(course.root), str(write_replies)],
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
        from now: those are put back (:func:`autograder.pipeline.feedbackstore.restore_feedback`)."""
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


def export_grades(session: Session, to: Path) -> None:
    """Export the whole gradebook to ``to`` with the configured export plugin (grades.csv: a grading run's last
    step, and ``report``'s), waiting for it.

    Raises:
        CourseError: nbgrader cannot export (its log is quoted).
    """
    outcome = session.export(to).result()
    if not outcome.success:
        raise CourseError(f"nbgrader export failed:\n{outcome.tail()}")


def reuse_engines() -> None:
    """Make nbgrader's ``Gradebook`` open every gradebook of one URL with the same SQLAlchemy engine, in this process.

    nbgrader 0.9.6 creates an engine each time a ``Gradebook`` is opened (about ten times a submission in autograde
    and generate_feedback), and SQLAlchemy caches the statements it compiled per engine (its cache key holds the
    engine's dialect): every query of every submission was compiled again, about half the CPU of reading a
    submission's grades. ``Gradebook.close`` still disposes of the engine's pool, closing its connections; the
    engine opens new ones when it is used again.
    """
    import nbgrader.api

    nbgrader.api.create_engine = functools.cache(nbgrader.api.create_engine)


def serve(root: str, replies: int) -> None:
    """The nbgrader process: load nbgrader and the course's configuration once, then answer each request line
    of stdin with a reply line on file descriptor ``replies``, until stdin ends."""
    from nbgrader.api import Gradebook
    from nbgrader.apps import ExportApp, NbGraderAPI, NbGraderApp
    from nbgrader.utils import temp_attrs

    reuse_engines()
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
