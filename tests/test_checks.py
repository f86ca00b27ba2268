"""The check helpers: what they accept, what they refuse, what they record, and that they stay off stderr."""

import json

import numpy as np
import pytest
import torch

from autograder.kernel import checks
from autograder.kernel.checks import (
    check_close,
    check_device,
    check_dtype,
    check_equal,
    check_raises,
    check_shape,
    check_shares_memory,
    default_device,
    encode_value,
    shares_memory,
)


@pytest.fixture(autouse=True)
def fresh_records():
    checks.records.clear()
    yield
    checks.records.clear()


def test_passing_checks_record_their_values_in_order():
    x = torch.arange(6.0).reshape(2, 3)
    check_shape(x, (2, 3), label="shape of x")
    check_dtype(x, torch.float32, label="dtype of x")
    check_close(x, x + 1e-7, label="x close", rtol=0, atol=1e-6)
    assert [r["check"] for r in checks.records] == ["shape", "dtype", "close"]
    assert checks.records[0] == {
        "version": checks.RECORD_VERSION,
        "check": "shape",
        "label": "shape of x",
        "type": "torch.Tensor",
        "value": {"tuple": [2, 3]},
        "expected": {"tuple": [2, 3]},
        "rule": {"kind": "exact"},
    }
    assert checks.records[1]["expected"] == "torch.float32"
    assert checks.records[2]["rule"] == {"kind": "close", "rtol": 0, "atol": 1e-6, "check_dtype": True}
    assert checks.records[2]["value"]["tensor"]["data"] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert checks.records[2]["expected"]["tensor"]["data"][0][1] == pytest.approx(1.0000001)
    json.dumps(checks.records, allow_nan=False)  # records are strict JSON


def test_a_check_given_no_expected_value_records_value_and_rule_but_no_expected_and_asserts_nothing():
    """Hidden tests give no expected value: the grader judges the value against the reference run's, so the kernel
    has nothing to assert (a wrong-looking value passes here) and its record holds no ``expected``."""
    x = torch.arange(6.0).reshape(2, 3)
    check_equal(x + 1, label="equal")
    check_close(x.double(), label="close, float64 defaults")
    check_close(7, label="close, int", atol=0.5)
    check_shape([1, 2], label="shape of a list")
    check_dtype(np.zeros(2, np.float32), label="dtype")
    check_device(x, label="device")
    assert all("expected" not in record for record in checks.records)
    assert [record["value"] for record in checks.records[3:]] == [None, "float32", "cpu"]
    assert checks.records[1]["rule"] == {"kind": "close", "rtol": 1e-7, "atol": 1e-7, "check_dtype": True}
    assert checks.records[2]["rule"] == {"kind": "close", "rtol": 0.0, "atol": 0.5, "check_dtype": True}
    assert checks.records[0]["value"] == encode_value(x + 1)


def test_a_check_given_no_expected_value_still_refuses_a_tensor_subclass():
    zeros = torch.zeros(2).as_subclass(ReportsOnes)
    for check in (check_equal, check_close, check_shape, check_dtype, check_device):
        with pytest.raises(AssertionError, match="a torch.Tensor subclass"):
            check(zeros, label="l")
        assert checks.records[-1]["value"] == {"refused": checks.refusal(zeros)}


def test_failures_name_the_label_and_what_differs():
    x = torch.zeros(2, 3, dtype=torch.int64)
    with pytest.raises(AssertionError, match=r"^one_hot\(\.\.\.\)\nexpected dtype torch.float32, got torch.int64$"):
        check_dtype(x, torch.float32, label="one_hot(...)")
    with pytest.raises(AssertionError, match=r"expected shape \(3, 2\), got \(2, 3\)"):
        check_shape(x, (3, 2), label="s")
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 2"):
        check_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]), label="v")
    # the failing value is recorded too, so a later stage sees what the student produced
    assert checks.records[-1]["value"]["tensor"]["data"] == [1.0, 2.0]


def test_check_close_uses_pytorch_default_tolerances_per_dtype():
    check_close(torch.tensor([1.0]), torch.tensor([1.0 + 1e-6]), label="within float32 rtol")
    with pytest.raises(AssertionError):
        check_close(
            torch.tensor([1.0], dtype=torch.float64), torch.tensor([1.0 + 1e-6], dtype=torch.float64), label="f64"
        )
    with pytest.raises(AssertionError, match="dtype"):
        check_close(torch.tensor([1.0]), torch.tensor([1.0], dtype=torch.float64), label="dtypes differ")
    check_close(torch.tensor([1.0]), np.array([1.0], dtype=np.float32), label="numpy expected")
    with pytest.raises(AssertionError, match="got a str"):
        check_close("1.0", 1.0, label="not a number")


def test_check_close_keeps_a_python_floats_precision():
    # a float32 tensor would round 1 + 1e-8 to 1.0, so no rtol below ~1e-7 could fail
    with pytest.raises(AssertionError, match="Mismatched elements"):
        check_close(1.0, 1.0 + 1e-8, label="explicit tight rtol", rtol=1e-10, atol=0.0)
    with pytest.raises(AssertionError):  # float64's default tolerances, as assert_close uses for Python floats
        check_close(1.0, 1.0 + 5e-7, label="default tolerances")
    check_close(1.0, 1.0 + 5e-8, label="within float64's defaults")
    assert checks.records[-1]["value"]["tensor"]["dtype"] == "torch.float64"
    check_close(torch.tensor([0.5]), [0.5], label="a list is PyTorch's default dtype")


def test_check_equal_is_strict_about_types():
    check_equal((2, 3), (2, 3), label="tuple")
    with pytest.raises(AssertionError, match="expected a tuple, got a list"):
        check_equal([2, 3], (2, 3), label="list for tuple")
    with pytest.raises(AssertionError, match="expected a int, got a bool"):
        check_equal(True, 1, label="bool for int")
    with pytest.raises(AssertionError, match="expected a torch.float32 tensor of shape"):
        check_equal(torch.tensor([1, 2]), torch.tensor([1.0, 2.0]), label="int tensor")
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 2"):
        check_equal(torch.tensor([1, 2]), torch.tensor([1, 3]), label="values")


@pytest.mark.parametrize(
    ("check", "found", "expected"),
    [
        (check_equal, torch.tensor([[1.5, 2.0], [0.5, 3.0]]), torch.tensor([[0.0, 2.0], [0.5, 0.0]])),
        (check_equal, np.array([[1.5, 2.0], [0.5, 3.0]]), np.array([[0.0, 2.0], [0.5, 0.0]])),
        (check_close, torch.tensor([[1.5, 2.0], [0.5, 3.0]]), torch.tensor([[0.0, 2.0], [0.5, 0.0]])),
    ],
    ids=["equal_tensor", "equal_ndarray", "close_tensor"],
)
def test_a_failed_value_check_says_where_what_was_found_and_what_was_expected(check, found, expected):
    with pytest.raises(AssertionError) as failure:
        check(found, expected, label="x after zero_negatives_(x)")
    lines = str(failure.value).splitlines()
    assert lines[:3] == [
        "x after zero_negatives_(x)",
        "Mismatched elements: 2 / 4 (50.0%)",
        "First at index (0, 0): found 1.5, expected 0.0",
    ]
    assert lines[3].startswith("Greatest absolute difference: 3 at index (1, 1)")


def test_a_failed_boolean_check_has_no_greatest_difference():
    with pytest.raises(AssertionError) as failure:
        check_equal(torch.tensor([True, False, True]), torch.tensor([True, True, True]), label="mask")
    assert str(failure.value).splitlines()[1:] == [
        "Mismatched elements: 1 / 3 (33.3%)",
        "First at index (1,): found False, expected True",
    ]


def test_check_device_matches_type_and_optional_index():
    check_device(torch.zeros(1), "cpu", label="cpu")
    with pytest.raises(AssertionError, match="expected a tensor on cuda, got one on cpu"):
        check_device(torch.zeros(1), "cuda", label="moved?")
    with pytest.raises(AssertionError, match="got a list"):
        check_device([0.0], "cpu", label="not a tensor")


def test_check_raises_records_the_exception_type():
    with check_raises(ValueError, label="bad label", match="outside"):
        raise ValueError("label 5 is outside [0, 3)")
    assert checks.records[-1]["value"] == {
        "exception": "ValueError",
        "mro": ["ValueError", "Exception", "BaseException", "object"],
        "message": "label 5 is outside [0, 3)",
    }
    assert checks.records[-1]["expected"] == ["ValueError"]
    assert checks.records[-1]["rule"] == {"kind": "raises", "match": "outside"}
    with pytest.raises(AssertionError, match="expected ValueError, but nothing was raised"):
        with check_raises(ValueError, label="nothing"):
            pass
    with pytest.raises(AssertionError, match="expected ValueError, but TypeError was raised"):
        with check_raises(ValueError, label="other"):
            raise TypeError("no")
    with pytest.raises(AssertionError, match="lacks 'outside'"):
        with check_raises(ValueError, label="message", match="outside"):
            raise ValueError("bad")


def test_shares_memory_follows_views_and_copies():
    base = torch.arange(12.0).reshape(3, 4)
    assert shares_memory(base[1:, ::2], base)
    assert shares_memory(base.t(), base)
    assert not shares_memory(base.clone(), base)
    assert not shares_memory(base[0], base[1])  # disjoint rows of one storage
    assert not shares_memory(base[:0], base)  # empty tensors share nothing
    array = np.arange(5.0)
    assert shares_memory(torch.from_numpy(array), array)
    assert shares_memory(array[::-1], array)
    assert not shares_memory(torch.tensor(array), array)
    check_shares_memory(base[1:], base, label="view")
    with pytest.raises(AssertionError, match="must be a view"):
        check_shares_memory(base.clone(), base, label="copy")
    with pytest.raises(AssertionError, match="must be a copy"):
        check_shares_memory(base[1:], base, label="copy wanted", expected=False)
    with pytest.raises(TypeError):
        shares_memory([1.0], base)


def test_encode_value_covers_the_documented_types():
    assert encode_value(float("nan")) == {"float": "nan"}
    assert encode_value(torch.float16) == {"dtype": "torch.float16"}
    assert encode_value(torch.device("cpu")) == {"device": "cpu"}
    assert encode_value(np.int64(3)) == {"numpy": {"dtype": "int64", "value": 3}}
    assert encode_value(np.float64(0.5)) == {"numpy": {"dtype": "float64", "value": 0.5}}
    assert encode_value((1, [2.0, True])) == {"tuple": [1, [2.0, True]]}
    assert encode_value(torch.Size([2, 3])) == {"size": [2, 3]}
    assert encode_value({"device": "cpu"}) == {"dict": {"device": "cpu"}}
    encoded = encode_value(torch.tensor([1.5, float("-inf")], dtype=torch.bfloat16))
    assert encoded == {
        "tensor": {"dtype": "torch.bfloat16", "shape": [2], "device": "cpu", "data": [1.5, {"float": "-inf"}]}
    }
    assert encode_value(torch.tensor([1 + 2j]))["tensor"]["data"] == [[1.0, 2.0]]
    assert encode_value(torch.zeros(checks.MAX_RECORDED_ELEMENTS + 1))["tensor"]["data"] is None
    assert encode_value(object()) == {"type": "object"}


def test_checks_write_nothing_to_stderr(capfd):
    with pytest.raises(AssertionError):
        check_close(torch.ones(2), torch.zeros(2), label="x")
    check_equal(1, 1, label="y")
    assert capfd.readouterr().err == ""


def test_default_device_honours_course_device(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert default_device() == torch.device("cpu")
    monkeypatch.setenv("COURSE_DEVICE", "tpu9")
    with pytest.raises(ValueError, match="not a device"):
        default_device()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("COURSE_DEVICE", "cuda")
    with pytest.raises(RuntimeError, match="no cuda device"):
        default_device()
    monkeypatch.delenv("COURSE_DEVICE")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert default_device() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_device() == torch.device("cuda")


@pytest.mark.parametrize(
    ("actual", "expected", "options"),
    [
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-6]), {}),
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1]), {}),
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1]), {"rtol": 0.1, "atol": 0.0}),
        (torch.tensor([float("nan")]), torch.tensor([float("nan")]), {}),
        (torch.tensor([float("inf"), 1.0]), torch.tensor([float("inf"), 1.0]), {}),
        (torch.tensor([float("-inf")]), torch.tensor([float("inf")]), {}),
        (torch.tensor([1, 2]), torch.tensor([1, 3]), {}),
        (torch.tensor([1.0], dtype=torch.float64), torch.tensor([1.0]), {}),
        (torch.tensor([1.0], dtype=torch.float64), torch.tensor([1.0]), {"check_dtype": False}),
        (torch.tensor([1 + 1j]), torch.tensor([1 + 1.001j]), {}),
        (torch.zeros(2, 3), torch.zeros(3, 2), {}),
        (torch.zeros(0, 3), torch.zeros(0, 3), {}),
        (torch.tensor([True, False]), torch.tensor([True, True]), {}),
        (torch.tensor(1.0, dtype=torch.bfloat16), torch.tensor(1.004, dtype=torch.bfloat16), {}),
    ],
)
def test_check_close_judges_as_torch_testing_assert_close(actual, expected, options):
    rtol, atol = options.get("rtol"), options.get("atol")
    check_dtype = options.get("check_dtype", True)
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, check_dtype=check_dtype)
        torch_passes = True
    except AssertionError:
        torch_passes = False
    try:
        check_close(actual, expected, label="x", rtol=rtol, atol=atol, check_dtype=check_dtype)
        ours_passes = True
    except AssertionError:
        ours_passes = False
    assert ours_passes == torch_passes


class ReportsOnes(torch.Tensor):
    """A tensor subclass that reports ones, whatever it holds, to every method the old encoder called."""

    def tolist(self):
        return torch.ones(self.shape).tolist()

    def detach(self):
        return torch.ones(self.shape)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.equal:
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_tensor_subclass_is_refused_with_the_reason_and_never_asked_for_its_values():
    zeros = torch.zeros(2).as_subclass(ReportsOnes)
    for check in (
        lambda: check_equal(zeros, torch.ones(2), label="l"),
        lambda: check_close(zeros, torch.ones(2), label="l"),
        lambda: check_shape(zeros, (2,), label="l"),
        lambda: check_shares_memory(zeros, zeros, label="l"),
    ):
        with pytest.raises(AssertionError, match="ReportsOnes, a torch.Tensor subclass: return a plain torch.Tensor"):
            check()
        assert checks.records[-1]["value"] == {"refused": checks.refusal(zeros)}
    assert encode_value([zeros]) == [{"refused": checks.refusal(zeros)}]
    assert checks.refusal(torch.nn.Parameter(torch.zeros(2))) is None


def test_methods_set_on_a_plain_tensor_or_replaced_on_its_class_do_not_change_its_record(monkeypatch):
    zeros = torch.zeros(2)
    zeros.detach = lambda: torch.ones(2)
    zeros.tolist = lambda: [1.0, 1.0]
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: [1.0, 1.0])
    monkeypatch.setattr(torch.Tensor, "numpy", lambda self, **kwargs: np.ones(2))
    assert encode_value(zeros)["tensor"]["data"] == [0.0, 0.0]


def test_a_torch_function_mode_does_not_reach_the_encoder():
    class Ones(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            if getattr(func, "__name__", "") == "tolist":
                return [1.0] * len(result)
            return torch.ones_like(result) if type(result) is torch.Tensor else result

    zeros = torch.zeros(2)
    with Ones():
        assert zeros.tolist() == [1.0, 1.0]  # the mode is active
        encoded = encode_value(zeros)
    assert encoded["tensor"]["data"] == [0.0, 0.0]


def test_an_exception_message_is_read_without_the_students_str():
    class Liar(ValueError):
        def __str__(self):
            return "outside"

    with pytest.raises(AssertionError, match="lacks 'outside'"):
        with check_raises(ValueError, label="l", match="outside"):
            raise Liar("inside")
    assert checks.records[-1]["value"]["message"] == "inside"


def test_records_name_the_exact_type_checked():
    check_close(0.5, 0.5, label="float")
    check_close(np.float64(0.5), 0.5, label="numpy", check_dtype=False)
    check_close(torch.tensor(0.5), 0.5, label="tensor")
    check_equal([1, 2], [1, 2], label="list")
    assert [r["type"] for r in checks.records] == ["float", "numpy.float64", "torch.Tensor", "list"]
