"""The verdict outside the kernel: it judges recorded values as the check helpers do, and fails forged cells."""

import json
import subprocess
import sys

import nbformat
import numpy as np
import pytest
import torch

from autograder.kernel import checks
from autograder.course import ROOT
from autograder.kernel.checks import (
    check_close,
    check_device,
    check_dtype,
    check_equal,
    check_raises,
    check_shape,
    check_shares_memory,
)
from autograder.pipeline.verdict import RECORD_MIME_TYPE, cell_records, first_mismatch, passes

x = torch.arange(6.0).reshape(2, 3)


def raise_value_error():
    raise ValueError("label 5 is outside [0, 3)")


def raise_key_error():
    raise KeyError("k")


def nothing():
    return None


CASES = {
    "shape_same": lambda: check_shape(x, (2, 3), label="l"),
    "shape_other": lambda: check_shape(x, (3, 2), label="l"),
    "shape_of_a_list": lambda: check_shape([1, 2], (2,), label="l"),
    "dtype_same": lambda: check_dtype(x, torch.float32, label="l"),
    "dtype_other": lambda: check_dtype(x, torch.float64, label="l"),
    "dtype_numpy_same": lambda: check_dtype(np.zeros(2, np.float32), np.float32, label="l"),
    "dtype_numpy_vs_torch": lambda: check_dtype(np.zeros(2, np.float32), torch.float32, label="l"),
    "device_same": lambda: check_device(x, "cpu", label="l"),
    "device_other": lambda: check_device(x, "meta", label="l"),
    "equal_tensor": lambda: check_equal(x, torch.arange(6.0).reshape(2, 3), label="l"),
    "equal_tensor_value": lambda: check_equal(x, x + 1, label="l"),
    "equal_tensor_dtype": lambda: check_equal(x, x.double(), label="l"),
    "equal_int": lambda: check_equal(3, 3, label="l"),
    "equal_bool_for_int": lambda: check_equal(True, 1, label="l"),
    "equal_str": lambda: check_equal("a", "b", label="l"),
    "equal_tuple": lambda: check_equal((1, 2), (1, 2), label="l"),
    "equal_list_for_tuple": lambda: check_equal([1, 2], (1, 2), label="l"),
    "equal_numpy_scalar_for_float": lambda: check_equal(np.float64(0.5), 0.5, label="l"),
    "equal_ndarray": lambda: check_equal(np.arange(3), np.arange(3), label="l"),
    "equal_object": lambda: check_equal(object(), 3, label="l"),
    "close_within": lambda: check_close(x, x + 1e-7, label="l"),
    "close_outside": lambda: check_close(x, x + 1e-3, label="l"),
    "close_custom_tolerance": lambda: check_close(x, x + 1e-3, label="l", atol=1e-2, rtol=0),
    "close_dtype": lambda: check_close(x.double(), x, label="l"),
    "close_dtype_ignored": lambda: check_close(x.double(), x, label="l", check_dtype=False),
    "close_shape": lambda: check_close(x, x.t(), label="l"),
    "close_nan": lambda: check_close(torch.tensor([float("nan")]), torch.tensor([0.0]), label="l"),
    "close_inf": lambda: check_close(torch.tensor([float("inf")]), torch.tensor([float("inf")]), label="l"),
    "close_python_float": lambda: check_close(0.5, 0.5, label="l"),
    "close_list_expected": lambda: check_close(torch.tensor([1.0, 2.0]), [1.0, 2.0], label="l"),
    "close_not_a_tensor": lambda: check_close("x", 1.0, label="l"),
    "raises_right": lambda: _raises(ValueError, raise_value_error),
    "raises_subclass": lambda: _raises(LookupError, raise_key_error),
    "raises_wrong": lambda: _raises(ValueError, raise_key_error),
    "raises_nothing": lambda: _raises(ValueError, nothing),
    "raises_match": lambda: _raises(ValueError, raise_value_error, match="outside"),
    "raises_no_match": lambda: _raises(ValueError, raise_value_error, match="inside"),
    "shares_view": lambda: check_shares_memory(x[0], x, label="l"),
    "shares_copy": lambda: check_shares_memory(x.clone(), x, label="l"),
    "shares_copy_expected": lambda: check_shares_memory(x.clone(), x, label="l", expected=False),
}


def _raises(expected, body, match=None):
    with check_raises(expected, label="l", match=match):
        body()


@pytest.mark.parametrize("name", CASES)
def test_the_verdict_outside_agrees_with_the_check_inside(name):
    checks.records.clear()
    try:
        CASES[name]()
        inside = True
    except AssertionError:
        inside = False
    record = checks.records[-1]
    assert passes(record["check"], record["value"], record["expected"], record["rule"]) is inside


HIDDEN_CASES = {
    "shape": (check_shape, x, x.t(), (3, 2), {}),
    "shape_of_a_list": (check_shape, [1, 2], torch.zeros(2), (2,), {}),
    "dtype": (check_dtype, x, x.double(), torch.float64, {}),
    "dtype_numpy": (check_dtype, np.zeros(2, np.float32), np.zeros(2, np.float32), np.float32, {}),
    "dtype_numpy_for_torch": (check_dtype, np.zeros(2, np.float32), x, torch.float32, {}),
    "device": (check_device, x, x, "cpu", {}),
    "device_of_a_list": (check_device, [1.0], x, "cpu", {}),
    "equal_tensor": (check_equal, x, x + 1, x + 1, {}),
    "equal_tensor_dtype": (check_equal, x, x.double(), x.double(), {}),
    "equal_bool_for_int": (check_equal, True, 1, 1, {}),
    "equal_list_for_tuple": (check_equal, [1, 2], (1, 2), (1, 2), {}),
    "equal_tuple": (check_equal, (1, 2), (1, 2), (1, 2), {}),
    "close_within": (check_close, x, x + 1e-7, x + 1e-7, {}),
    "close_outside": (check_close, x, x + 1e-3, x + 1e-3, {}),
    "close_custom_tolerance": (check_close, x, x + 1e-3, x + 1e-3, {"atol": 1e-2, "rtol": 0}),
    "close_dtype": (check_close, x.double(), x, x, {}),
    "close_dtype_ignored": (check_close, x.double(), x, x, {"check_dtype": False}),
    "close_python_float": (check_close, 0.5, 0.5 + 1e-9, 0.5 + 1e-9, {}),
    "close_python_float_outside": (check_close, 0.5, 0.5001, 0.5001, {}),
}
"""``(check, actual, right, expected, options)``: what a student's function gave, what the reference solution
gives, and the expected value a test would state for it (``right`` itself, or its shape, dtype or device)."""


@pytest.mark.parametrize("name", HIDDEN_CASES)
def test_a_check_given_no_expected_value_is_judged_against_the_references_value_as_the_kernel_would(name):
    """The reference run checks its own value given no expected value; the student's record of ``actual`` passes
    against it exactly when the kernel's check of ``actual`` against the stated ``expected`` passes."""
    check, actual, right, expected, options = HIDDEN_CASES[name]
    reference = record_of(lambda: check(right, label="l", **options))
    student = record_of(lambda: check(actual, label="l", **options))
    assert "expected" not in reference and "expected" not in student
    try:
        check(actual, expected, label="l", **options)
        inside = True
    except AssertionError:
        inside = False
    assert (first_mismatch([student], [reference]) is None) is inside


def test_an_expected_value_in_the_students_record_is_never_read():
    """A kernel that replaced the checks can put anything in its records: a forged ``expected`` (the reference's
    value) beside a wrong value still fails, the verdict reading the reference's record only."""
    reference = record_of(lambda: check_equal(x, label="l"))
    forged = {**record_of(lambda: check_equal(x + 1, label="l")), "expected": reference["value"]}
    failed = "A hidden test failed: l (check 1 of 1, judged outside the kernel)"
    assert first_mismatch([forged], [reference]) == failed
    assert first_mismatch([record_of(lambda: check_equal(x.clone(), label="l"))], [reference]) is None


def test_a_check_given_no_expected_value_and_too_large_to_judge_outside_fails():
    """No kernel judges a check given no expected value, so one the verdict cannot judge does not pass."""
    big = torch.zeros(checks.MAX_RECORDED_ELEMENTS + 1)
    reference = record_of(lambda: check_close(big, label="l"))
    failed = "A hidden test failed: l (check 1 of 1, judged outside the kernel)"
    assert first_mismatch([reference], [reference]) == failed


def record_of(call):
    checks.records.clear()
    try:
        call()
    except AssertionError:
        pass
    return checks.records[-1]


def test_a_cell_fails_on_missing_extra_reordered_or_forged_records():
    right = [record_of(CASES["close_within"]), record_of(CASES["shape_same"])]
    assert first_mismatch(right, right) is None
    assert first_mismatch(right[:1], right) == "check 2 of 2 (l) did not run"
    assert first_mismatch([], right) == "check 1 of 2 (l) did not run"
    assert first_mismatch(right + right[:1], right) == "1 check record(s) more than the tests make"
    assert first_mismatch(right[::-1], right) == "check 1 of 2 (l): a different check ran in its place"
    off = record_of(lambda: check_close(x + 1e-3, x, label="l"))["value"]
    forged = [{**right[0], "value": off}, right[1]]
    assert first_mismatch(forged, right) == "check 1 of 2 (l) failed when judged outside the kernel"
    assert first_mismatch(["not a record", right[1]], right) == "check 1 of 2 (l): a different check ran in its place"


def test_a_cells_records_are_read_from_its_arrays_in_order_and_anything_else_counts_as_one_record():
    """checks.py publishes a cell's records as one array; a kernel may also send outputs of its own under the type."""
    first, second = record_of(CASES["close_within"]), record_of(CASES["shape_same"])

    def record_output(payload):
        return nbformat.v4.new_output("display_data", data={"text/plain": "", RECORD_MIME_TYPE: payload})

    cell = nbformat.v4.new_code_cell(outputs=[record_output([first, second])])
    assert cell_records(cell) == [first, second]
    cell.outputs = [record_output([first]), nbformat.v4.new_output("stream", text="x"), record_output(second)]
    assert cell_records(cell) == [first, second]
    cell.outputs = [record_output("forged")]
    assert first_mismatch(cell_records(cell), [first]) == "check 1 of 1 (l): a different check ran in its place"


def test_large_arrays_recorded_without_values_are_left_to_the_kernel():
    big = torch.zeros(checks.MAX_RECORDED_ELEMENTS + 1)
    record = record_of(lambda: check_close(big, big, label="l"))
    assert passes(record["check"], record["value"], record["expected"], record["rule"]) is None


def test_records_judge_alike_from_memory_from_a_notebook_and_from_stored_json():
    """The batch stores the reference's records as JSON and the student's in a notebook (nbformat's dict subclass)."""
    record = record_of(lambda: check_equal({"device": "cpu"}, {"device": "cpu"}, label="l"))
    from_notebook = nbformat.from_dict(json.loads(json.dumps(record)))
    from_json = json.loads(json.dumps(record))
    assert type(from_notebook["value"]) is not type(from_json["expected"])
    assert first_mismatch([from_notebook], [from_json]) is None
    assert passes("equal", nbformat.from_dict({"n": True}), {"n": 1}, {"kind": "exact"}) is False


def test_a_different_type_than_the_references_fails_even_where_the_kernel_accepts_it():
    """A 0-d tensor where the reference returns a Python float passes check_close in the kernel (both are float32
    tensors there); the record's exact type tells them apart outside."""
    reference = [record_of(lambda: check_close(0.5, 0.5, label="l"))]
    tensor = [record_of(lambda: check_close(torch.tensor(0.5), 0.5, label="l"))]
    assert first_mismatch(reference, reference) is None
    problem = first_mismatch(tensor, reference)
    assert problem == "check 1 of 1 (l): got a torch.Tensor where the reference solution gives a float"


def test_a_list_where_a_tuple_is_expected_fails_outside_whatever_the_kernel_says():
    reference = record_of(lambda: check_equal((2, 3), (2, 3), label="l"))
    forged_list = {**reference, "type": "tuple", "value": checks.encode_value([2, 3])}
    assert passes("equal", forged_list["value"], reference["expected"], reference["rule"]) is False
    assert first_mismatch([forged_list], [reference]) == "check 1 of 1 (l) failed when judged outside the kernel"


def test_a_refused_value_passes_nothing():
    refused = {"refused": "got a ReportsOnes, a torch.Tensor subclass: return a plain torch.Tensor"}
    expected = checks.encode_value(torch.ones(2))
    for check, rule in [("equal", {"kind": "exact"}), ("close", {"kind": "close", "rtol": 1.0, "atol": 1.0})]:
        assert passes(check, refused, expected, rule) is False


def test_check_dtype_false_lets_python_and_numpy_real_numbers_stand_for_each_other_but_not_a_tensor():
    """``check_close(..., check_dtype=False)`` is a test's own statement that the kind of number does not matter
    (03's ``matmul_gflops(1000, np.float64(0.25))``: the reference returns a NumPy float64, ``float(...)`` a Python
    float, both what the contract allows); a 0-d tensor is still another type, and without the option the exact
    type still counts."""
    relaxed = [record_of(lambda: check_close(np.float64(8.0), 8.0, check_dtype=False, label="l"))]
    python_float = [record_of(lambda: check_close(8.0, 8.0, check_dtype=False, label="l"))]
    zero_d = torch.tensor(8.0, dtype=torch.float64)
    tensor = [record_of(lambda: check_close(zero_d, 8.0, check_dtype=False, label="l"))]
    assert first_mismatch(python_float, relaxed) is None
    assert first_mismatch(relaxed, python_float) is None
    problem = first_mismatch(tensor, relaxed)
    assert problem == "check 1 of 1 (l): got a torch.Tensor where the reference solution gives a numpy.float64"
    strict = [record_of(lambda: check_close(np.float64(8.0), 8.0, label="l"))]
    assert first_mismatch([record_of(lambda: check_close(8.0, 8.0, label="l"))], strict) is not None


def test_the_grader_reads_the_record_type_of_checks_py_without_importing_torch():
    """The command, the batch's workers and the nbgrader sessions (the course's preprocessors) know checks.py's
    record MIME type, and none of them imports torch for it (about 1.5 s of CPU a process)."""
    modules = (
        "autograder.cli, autograder.grading.grade, autograder.grading.session, autograder.pipeline.batch, "
        "autograder.harness.demo, nbgrader.apps"
    )
    preprocessors = (
        "autograder.pipeline.execute, autograder.pipeline.verdict, autograder.results.feedback, "
        "autograder.pipeline.feedbackstore, autograder.pipeline.handgrades"
    )
    shown_names = "print(autograder.pipeline.verdict.RECORD_MIME_TYPE, 'torch' in sys.modules)"
    code = f"import sys, {modules}, {preprocessors}; {shown_names}"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert shown.split() == [checks.RECORD_MIME_TYPE, "False"]


def grouped_cell(answer):
    """The records of a test cell with a visible check and three groups (2, 1 and 1 points) of hidden checks of
    ``answer(t)``, whose edge case raises for ``answer`` that cannot take an empty tensor."""
    checks.records.clear()
    try:
        check_equal(answer(x), x * 2, label="visible")
    except AssertionError:  # stops the cell, as in a kernel
        made = list(checks.records)
        checks.records.clear()
        return made
    with checks.check_group("main behaviour", points=2):
        check_equal(answer(x), label="main")
    with checks.check_group("edge cases", points=1):
        check_equal(answer(torch.zeros(0)), label="empty")
    with checks.check_group("errors", points=1):
        with check_raises(TypeError, label="a list raises TypeError"):
            answer([1.0])
    made = list(checks.records)
    checks.records.clear()
    return made


def doubled(t):
    if type(t) is not torch.Tensor:
        raise TypeError("a tensor, please")
    return t * 2


def doubled_but_not_empty(t):
    if type(t) is torch.Tensor and t.numel() == 0:
        raise ValueError("empty")
    return doubled(t)


def test_a_group_that_raises_loses_its_points_only_and_the_later_groups_run(capsys):
    from autograder.pipeline.verdict import earned, judge

    reference = grouped_cell(doubled)
    near_miss = grouped_cell(doubled_but_not_empty)
    assert [r["group"] for r in near_miss if r["check"] != "group" and "group" in r] == ["main behaviour", "errors"]
    assert "ValueError: empty" in capsys.readouterr().out  # the traceback is shown, on stdout
    verdicts = judge(near_miss, reference)
    assert [(v.name, v.points, v.problem is None) for v in verdicts] == [
        (None, 0.0, True),
        ("main behaviour", 2.0, True),
        ("edge cases", 1.0, False),
        ("errors", 1.0, True),
    ]
    assert verdicts[2].problem.startswith("Lost the points of the group 'edge cases' (1 of the cell's points)")
    assert earned(verdicts, 4.0) == 3.0
    assert earned(judge(reference, reference), 4.0) == 4.0
    assert first_mismatch(reference, reference) is None


def test_a_forged_group_gains_no_points():
    """Points come from the reference's group records: a kernel that claims more points, renames a group, moves a
    record into another group or says a group ran when it did not gains nothing."""
    from autograder.pipeline.verdict import earned, judge

    reference = grouped_cell(doubled)
    near_miss = grouped_cell(doubled_but_not_empty)
    claims_more = [{**r, "rule": {"kind": "group", "points": 100}} if r["check"] == "group" else r for r in near_miss]
    assert earned(judge(claims_more, reference), 4.0) == 3.0
    without_failure = [{**r, "value": {"raised": None}} if r["check"] == "group" else r for r in near_miss]
    assert earned(judge(without_failure, reference), 4.0) == 3.0  # the edge case's check is still missing
    moved = [{**r, "group": "edge cases"} if r.get("label") == "main" else r for r in near_miss]
    assert earned(judge(moved, reference), 4.0) == 1.0
    stray = near_miss + [{**near_miss[1], "group": "bonus"}]
    assert earned(judge(stray, reference), 4.0) == 0.0
    assert earned(judge(grouped_cell(lambda t: t * 3), reference), 4.0) == 0.0


def test_compare_records_scores_a_cell_with_groups_by_the_groups_that_passed_whatever_the_kernel_showed(
    monkeypatch, tmp_path
):
    """nbgrader reads the verdict's score first: 3 of 4 points for the near miss, though its kernel showed the edge
    case's traceback (an error output) and sent a score of its own (which the verdict makes a display_data)."""
    from nbgrader.utils import determine_grade

    from autograder.pipeline import verdict

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(verdict._REFERENCES, (str(tmp_path), "a"), {"task_1_1_f": grouped_cell(doubled)})
    metadata = {"nbgrader": {"grade": True, "solution": False, "grade_id": "task_1_1_f", "points": 4, "locked": True}}
    cell = nbformat.v4.new_code_cell("", metadata=metadata)
    cell.outputs = [
        nbformat.v4.new_output("execute_result", data={"text/plain": "4"}),
        nbformat.v4.new_output("error", ename="ValueError", evalue="empty", traceback=["ValueError: empty"]),
        nbformat.v4.new_output("display_data", data={RECORD_MIME_TYPE: grouped_cell(doubled_but_not_empty)}),
    ]
    notebook = nbformat.v4.new_notebook(cells=[cell])
    verdict.CompareRecords().preprocess(notebook, {"nbgrader": {"assignment": "a"}})
    assert determine_grade(cell) == (3.0, 4.0)
    assert [o.output_type for o in cell.outputs].count("execute_result") == 1
    assert [o.evalue.split(":")[0] for o in cell.outputs if o.get("ename") == "CheckRecordMismatch"] == [
        "Lost the points of the group 'edge cases' (1 of the cell's points)"
    ]


def test_blank_work_raising_not_implemented_error_passes_no_check_for_a_runtime_error():
    """A released solution cell raises NotImplementedError, a RuntimeError: an errors group expecting PyTorch's
    RuntimeError must not give blank work its points, inside the kernel or outside."""

    def unwritten():
        raise NotImplementedError()

    def broadcast_error():
        torch.ones(3) + torch.ones(4)

    reference = record_of(lambda: _raises(RuntimeError, broadcast_error))
    blank = record_of(lambda: _raises(RuntimeError, unwritten))
    assert blank["value"]["exception"] == "NotImplementedError"
    assert first_mismatch([blank], [reference]) == "check 1 of 1 (l) failed when judged outside the kernel"
    with pytest.raises(AssertionError, match="not written yet"):
        _raises(RuntimeError, unwritten)
    assert first_mismatch([record_of(lambda: _raises(NotImplementedError, unwritten))], [reference]) is not None
