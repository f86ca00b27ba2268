"""``python -m autograder``: parses the command line and calls the stage."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .course import ROOT, Course, CourseError
from .pipeline.intake.shapes import FORMATS
from .results.lms import PLATFORMS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m autograder", description="Build, check and grade the PyTorch Tensors course."
    )
    parser.add_argument("--course", type=Path, default=ROOT, help="course directory (default: this repository)")
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser("build", help="regenerate release/ and notebooks/ from source/")
    build_parser.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    check_parser = commands.add_parser("check", help="list what is stale or inconsistent; exit 1 if anything is")
    check_parser.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    validate_parser = commands.add_parser(
        "validate", help="run a notebook's tests as nbgrader will; list the test cells that pass and fail; exit 1 if any fails"
    )
    validate_parser.add_argument("notebook", type=Path, help="the notebook, e.g. release/01_tensors/01_tensors.ipynb")
    release_parser = commands.add_parser(
        "release",
        help="write each assignment's bundle for students, dist/<id>.zip (release notebook, checks.py, README.md, "
        "requirements.txt), each checked to hold no solution, hidden test or output; exit 1 if one is refused",
    )
    release_parser.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    release_parser.add_argument(
        "--output", type=Path, metavar="DIR", help="where the zips go (default: dist/ in the course directory)"
    )
    release_parser.add_argument(
        "--layout",
        type=Path,
        metavar="DIR",
        help="also write a student repository there: <id>/<id>.ipynb, <id>/checks.py, README.md, requirements.txt "
        "(what an nbgitpuller link pulls); only when every bundle passed",
    )
    grade_parser = commands.add_parser("grade", help="grade a download of submissions with nbgrader")
    grade_parser.add_argument(
        "submissions",
        type=Path,
        help="folder or zip as downloaded: Canvas, Moodle, Blackboard, Gradescope, nbgrader "
        "(<student_id>/<assignment_id>/<notebook>.ipynb) or zip_collect's downloaded/<assignment_id>/archive/",
    )
    grade_parser.add_argument(
        "--format",
        choices=FORMATS,
        help="the download's shape (default: detected from its file names, and said)",
    )
    grade_parser.add_argument(
        "--roster",
        type=Path,
        help="CSV with student_id and platform_id, name or email (and first_name, last_name): maps the "
        "platform's students to course ids (default: ids derived from the platform's, in student_ids.csv)",
    )
    grade_parser.add_argument(
        "--assignment",
        metavar="ID",
        help="the whole download is this assignment, whatever its notebooks are named "
        "(default: read from each notebook's name, or nbgrader's folder)",
    )
    grade_parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print what becomes of every file of the download (student, assignment, or why not taken); grade nothing",
    )
    commands.add_parser(
        "report",
        help="the class's results over the whole gradebook: per-task pass rates, score and pass-rate charts, "
        "the answers still to grade by hand; grades.csv exported again (hand grades included)",
    )
    export_parser = commands.add_parser(
        "export",
        help="one assignment's grades as the learning platform's own grade-import file (Canvas Gradebook CSV, "
        "Moodle offline grading worksheet, Blackboard Work Offline upload), keyed by the platform ids intake recorded",
    )
    export_parser.add_argument("--lms", required=True, choices=PLATFORMS, help="the platform the file is for")
    export_parser.add_argument("assignment", metavar="ASSIGNMENT", help="the assignment id, e.g. 01_tensors")
    export_parser.add_argument(
        "--output",
        type=Path,
        help="where to write it (default: lms_<platform>_<assignment>.csv in the course directory)",
    )
    export_parser.add_argument(
        "--title", help="the assignment's name on the platform (default: the assignment id)"
    )
    export_parser.add_argument(
        "--lms-assignment-id",
        metavar="ID",
        help="the platform's id of the assignment: Canvas's assignment id (header 'TITLE (ID)'), Blackboard's grade "
        "column id (header '... |ID'); without it Canvas matches by exact title and Blackboard makes a new column",
    )
    export_parser.add_argument(
        "--feedback-zip",
        type=Path,
        metavar="FILE",
        help=(
            "Moodle only: also write each student's feedback page in a zip for "
            "'Upload multiple feedback files in a zip'"
        ),
    )
    demo_parser = commands.add_parser("demo", help="grade the bundled sample submissions in a scratch course directory")
    demo_parser.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    demo_parser.add_argument(
        "--all",
        dest="every",
        action="store_true",
        help="grade every sample submission and list each (default: a representative set, a summary)",
    )
    bench_parser = commands.add_parser(
        "benchmark",
        help="time stock nbgrader autograde and feedback against ours on a generated batch; compare every grade",
    )
    bench_parser.add_argument("--students", type=int, default=4, help="generated students (default 4)")
    bench_parser.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    mutants_parser = commands.add_parser(
        "mutants",
        help="mutation testing: run mutants of every reference solution against its task's tests, print the table; "
        "exit 1 if a mutant not listed as equivalent survives",
    )
    mutants_parser.add_argument(
        "selection",
        nargs="*",
        metavar="ASSIGNMENT|GRADE_ID",
        help="assignment ids, or grade_ids of solutions or of their test cells (default: all)",
    )
    hub_parser = commands.add_parser("hub", help="the course on a multi-user JupyterHub on this machine (as root)")
    hub_parser.add_argument("action", choices=["start", "stop", "status", "collect", "feedback"])
    hub_parser.add_argument(
        "assignment", nargs="?", help="collect, feedback: the assignment id (run them as the instructor, in the course)"
    )
    hub_parser.add_argument(
        "--demo",
        action="store_true",
        help="start: create the accounts instructor1, grader1, student1..3 (passwords in docs/hub.md)",
    )
    hub_parser.add_argument(
        "--postgres",
        action="store_true",
        help="start: keep the gradebook in a PostgreSQL server of the hub's own (several graders at once)",
    )
    hub_parser.add_argument("--ip", default="127.0.0.1", help="start: the address the hub listens on")
    hub_parser.add_argument(
        "--port", type=int, default=8000, help="start: the hub's port (it also uses the next two and port + 81)"
    )
    hub_parser.add_argument("--instructors", nargs="*", default=[], metavar="USER", help="start: instructors' accounts")
    hub_parser.add_argument("--graders", nargs="*", default=[], metavar="USER", help="start: graders' accounts")
    hub_parser.add_argument("--students", nargs="*", default=[], metavar="USER", help="start: students' accounts")
    for graders in (grade_parser, demo_parser, bench_parser):
        graders.add_argument(
            "--no-sandbox",
            dest="isolated",
            action="store_false",
            help="run students' kernels without the bubblewrap sandbox (results say so); only where none can be had",
        )
        graders.add_argument(
            "--workers",
            type=int,
            default=None,
            help="notebooks executed at once on this machine (default: one per CPU, fewer if memory is short, "
            "one more at a time while CPUs stay idle beside them)",
        )
    grade_parser.add_argument(
        "--no-cache",
        action="store_true",
        help="execute every notebook again, ignoring the executions stored in executed/ by earlier runs",
    )
    grade_parser.add_argument(
        "--scheduler",
        metavar="tcp://HOST:PORT",
        help="execute the notebooks on this Dask distributed cluster (its workers need this repository's environment)",
    )
    args = parser.parse_args(argv)
    course = Course(args.course.resolve())
    try:
        return COMMANDS[args.command](course, args)
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "\ninterrupted: the notebooks executed so far are kept in executed/; "
            "run the same command again to go on from there",
            file=sys.stderr,
        )
        return 130


def _build(course: Course, args: argparse.Namespace) -> int:
    from .authoring.build import build

    for path in build(course, assignment_ids=args.assignments or None):
        print(f"wrote {path.relative_to(course.root)}")
    return 0


def _check(course: Course, args: argparse.Namespace) -> int:
    from .authoring.check import check

    findings = check(course, assignment_ids=args.assignments or None)
    for finding in findings:
        print(finding)
    passed = "check passed: release/ and notebooks/ match source/; the students' bundles hold nothing secret"
    print(f"{len(findings)} finding(s)" if findings else passed)
    return 1 if findings else 0


def _validate(course: Course, args: argparse.Namespace) -> int:
    from .authoring.validate import validate

    validation = validate(args.notebook)
    print(validation.report())
    return 0 if validation.ok else 1


def _release(course: Course, args: argparse.Namespace) -> int:
    from .authoring.bundle import release

    bundles = release(
        course, assignment_ids=args.assignments or None, output=args.output or course.root / "dist", layout=args.layout
    )
    for bundle in bundles:
        if bundle.path is not None:
            print(f"wrote {bundle.path}")
        else:
            print(f"refused {bundle.assignment_id}.zip (not written):")
            print("\n".join(f"  {finding}" for finding in bundle.findings))
    refused = [bundle for bundle in bundles if bundle.path is None]
    if args.layout is not None:
        written = f"student repository written in {args.layout}"
        print(f"student repository: not written, {len(refused)} bundle(s) refused" if refused else written)
    return 1 if refused else 0


def _grade(course: Course, args: argparse.Namespace) -> int:
    from .results.classreport import class_report, write_class_report
    from .grading.grade import grade, survey
    from .pipeline.intake.roster import Roster
    from .pipeline.intake.submissions import manifest_summary, manifest_table
    from .results.report import table

    roster = Roster.read(args.roster) if args.roster else None
    if args.dry_run:
        found = survey(course, args.submissions, format=args.format, roster=roster, assignment=args.assignment)
        print(found.detected)
        print(manifest_table(found.manifest))
        print(f"\n{manifest_summary(found.manifest, limit=0)}\ndry run: nothing graded")
        return 0
    grading = grade(
        course,
        args.submissions,
        isolated=args.isolated,
        workers=args.workers,
        scheduler=args.scheduler,
        format=args.format,
        roster=roster,
        assignment=args.assignment,
        no_cache=args.no_cache,
        progress=_progress,
    )
    print(grading.intake.detected)
    print(manifest_summary(grading.intake.manifest))
    print()
    print(table(grading.results))
    not_graded = [r.student_id for r in grading.results if r.status == "not graded"]
    if not_graded:
        print(
            f"\n{len(not_graded)} submission(s) not graded ({', '.join(not_graded)}): grades.csv shows them as 0; "
            "task_results.csv says why"
        )
    print(
        f"\ngrades: {grading.grades_csv}\nper task: {grading.task_results_csv}\nfeedback: {grading.feedback}/"
        f"\nmanifest (every file of the download): {grading.manifest_csv}\nstudent ids: {grading.student_ids_csv}"
    )
    results = class_report(course)
    files = write_class_report(course, results)
    print(f"class results over every batch graded ({len(results.pending())} answer(s) to grade by hand):")
    print("\n".join(f"  {path}" for path in files))
    return 0


def _report(course: Course, args: argparse.Namespace) -> int:
    from .results.classreport import class_report, write_class_report

    from .grading.grade import write_grades_csv

    results = class_report(course)
    write_class_report(course, results)
    print(results.summary())
    print(f"grades: {write_grades_csv(course)}")
    return 0


def _export(course: Course, args: argparse.Namespace) -> int:
    from .results.lms import export

    done = export(
        course,
        platform=args.lms,
        assignment_id=args.assignment,
        output=args.output,
        title=args.title,
        lms_assignment_id=args.lms_assignment_id,
        feedback_zip=args.feedback_zip,
    )
    for warning in done.warnings:
        print(f"warning: {warning}")
    print(f"{done.platform}: {done.rows} student(s) in {done.path}")
    if done.feedback_zip:
        print(f"feedback pages: {done.pages} in {done.feedback_zip}")
    return 0


def _demo(course: Course, args: argparse.Namespace) -> int:
    from .harness.demo import demo

    result = demo(
        course,
        assignment_ids=args.assignments or None,
        every=args.every,
        isolated=args.isolated,
        workers=args.workers,
        progress=_progress,
    )
    if args.every:
        print(result.table)
        print()
    print(result.summary)
    for mismatch in result.mismatches:
        print(f"MISMATCH {mismatch}")
    grading = result.grading
    print(
        f"\n{len(grading.results)} sample submissions graded in a scratch course: grades {grading.grades_csv}, "
        f"per task {grading.task_results_csv}, feedback {grading.feedback}/"
    )
    print(
        "all sample submissions got their expected grades"
        if not result.mismatches
        else f"{len(result.mismatches)} mismatch(es)"
    )
    return 1 if result.mismatches else 0


def _benchmark(course: Course, args: argparse.Namespace) -> int:
    from .harness.benchmark import benchmark

    result = benchmark(
        course,
        students=args.students,
        assignment_ids=args.assignments,
        workers=args.workers,
        isolated=args.isolated,
        progress=_progress,
    )
    print(result.report())
    return 1 if result.differences else 0


def _mutants(course: Course, args: argparse.Namespace) -> int:
    from .authoring.mutants import run, table

    results = run(course, selection=args.selection or None)
    print(table(results))
    return 1 if any(result.survivors or result.stale for result in results) else 0


def _hub(course: Course, args: argparse.Namespace) -> int:
    from .deploy import hub

    if args.action == "start":
        accounts = hub.DEMO_ACCOUNTS if args.demo else vars(args)
        settings = hub.Settings(
            instructors=accounts["instructors"],
            graders=accounts["graders"],
            students=accounts["students"],
            ip=args.ip,
            port=args.port,
            postgres=args.postgres,
        )
        print(hub.start(course, settings, demo=args.demo))
    elif args.action == "stop":
        print(f"stopped {len(hub.stop())} process(es)")
    elif args.action == "collect":
        print(f"collected into {hub.collect(course, args.assignment)}")
    elif args.action == "feedback":
        print(f"feedback released to: {', '.join(hub.release_feedback(course, args.assignment))}")
    else:
        print(hub.status())
    return 0


def _progress(line: str) -> None:
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)  # above the batch's progress bar, if one is shown


COMMANDS = {
    "build": _build,
    "check": _check,
    "validate": _validate,
    "release": _release,
    "grade": _grade,
    "report": _report,
    "export": _export,
    "demo": _demo,
    "benchmark": _benchmark,
    "mutants": _mutants,
    "hub": _hub,
}
