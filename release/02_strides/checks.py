"""Check helpers for the PyTorch Tensors course: the only assertions test cells use.

Every check does two things:

1. It asserts, and on failure raises ``AssertionError`` with a message a
   student can act on: the check's label on the first line, then what was
   wrong and what to look at.
   Nothing is ever written to stderr.
2. It records the value it checked, the value it expected and its rule as a
   cell output, so that the grader can judge again outside the kernel (see
   ``autograder/pipeline/verdict.py``: a student's values are judged against the
   expected values and rules recorded by the reference solution's run). Inside IPython the records of a
   cell are published when the cell ends (IPython's ``post_run_cell`` event, which also follows a cell that
   raised) as one ``display_data`` output whose data holds an empty ``text/plain`` (so JupyterLab and
   feedback pages show nothing) and the JSON array of the cell's records, in order, under
   :data:`RECORD_MIME_TYPE`: one message per cell, not one per check (a test cell makes up to hundreds of
   checks; each output costs the kernel and the grader a message, a schema check and a copy). All records
   are also kept in :data:`records` (outside IPython only there).

Hidden tests pass no expected value. ``check_equal``, ``check_close``,
``check_shape``, ``check_dtype`` and ``check_device`` take ``expected`` as an
optional argument whose default, :data:`REFERENCE`, means "whatever the
reference solution gives for this same check": such a check asserts nothing
in the kernel and records the value checked and its rule but no expected
value, and the grader judges the student's value against the value the
reference run recorded, under the reference run's rule. The kernel then
never holds what a hidden check expects, so code that replaces the checks
(a module of its own under this module's name, a wrapper around these
functions) can only report the student's own values. ``check_raises`` keeps
its exception types and ``check_shares_memory`` its boolean: they are the
contract a task's statement gives (which error to raise, view or copy), no
secret. A hidden check's value must have at most :data:`MAX_RECORDED_ELEMENTS`
elements, or nothing outside the kernel can judge it (and the verdict fails it).

Record format (JSON object, one per check, in the order the checks ran)::

    {
      "version": 4,
      "check": "close" | "equal" | "shape" | "dtype" | "device" | "raises" | "shares_memory" | "group",
      "label": "<what the test checked, as written in the test>",
      "group": "<the name of the group (see check_group()) the check was made in; absent outside one>",
      "type": "<exact type of the object checked: float, tuple, torch.Tensor, numpy.float64, ...>",
      "value": <the checked value, encoded as below>,
      "expected": <what the check expected, encoded as below; absent when the check was given none>,
      "rule": {"kind": "exact"} | {"kind": "close", "rtol": float, "atol": float, "check_dtype": bool}
              | {"kind": "device"} | {"kind": "raises", "match": str | null}
    }

The grader judges a student's value against the *reference run's* expected
value (or, for a check given none, the reference run's value), so that must
be the same in every run of the reference solution: never an ``id()``, a
``data_ptr()``, a time, or anything computed from the student's result. Compare such things in the test and check the
boolean (``check_equal(x.data_ptr() == pointer, True, label=...)``). The
grader also requires ``type`` to be the reference's (a list where the
reference returns a tuple fails, as does a 0-d tensor for a Python float).

Per check: ``shape`` records shapes as tuples; ``dtype`` dtypes as strings
(``"torch.float32"``, or NumPy's ``"float32"``); ``device`` device strings
(an expected ``"cuda"`` matches any index); ``close`` both sides as tensors
(as :func:`check_close` converts them; ``type`` keeps what the value was);
``group`` (one record when a :func:`check_group` block ends, after its checks' records: its label is the group's
name, its value ``{"raised": {"exception": name} | None}``, its rule ``{"kind": "group", "points": float}``);
``raises`` the exception raised as ``{"exception": name, "mro": [names of its
classes], "message": text | None}`` (or ``None``) against a list of accepted
exception names; ``shares_memory`` booleans.

Value encoding (:func:`encode_value`), by exact type only, so a subclass is
never taken for its base: ``None``, bools, ints, strings and finite floats as
themselves; non-finite floats as ``{"float": "nan" | "inf" | "-inf"}``; lists
as lists; tuples and ``torch.Size`` as ``{"tuple": [...]}`` and ``{"size":
[...]}``; dicts with string keys as ``{"dict": {...}}``; NumPy scalars as
``{"numpy": {"dtype": "float64", "value": 0.5}}``; ``torch.dtype`` and
``torch.device`` as ``{"dtype": "torch.float32"}`` and ``{"device": "cpu"}``;
tensors (``torch.Tensor`` and ``torch.nn.Parameter``) and NumPy arrays as
``{"tensor" | "ndarray": {"dtype", "shape", "device", "data"}}`` where
``data`` is the nested list of values (complex numbers as ``[real, imag]``)
when the array has at most :data:`MAX_RECORDED_ELEMENTS` elements and is not
on the ``meta`` device, ``None`` otherwise; exceptions as ``{"exception":
"<type name>"}``; a tensor or array subclass as ``{"refused": "<why>"}`` (its
check fails: its methods could report anything); anything else as ``{"type":
"<type name>"}``. The encoder calls no method a student could define or
replace (see :func:`encode_value`).

What this cannot stop: code in the kernel runs in the same process as the
checks and can always lie about its own values (reach this module, or
IPython's display, and record whatever it likes). For a check given no
expected value that gains nothing: the kernel does not know the value that
passes. For a check given one (visible tests, ``check_raises``,
``check_shares_memory``) it can record the expected value as its own. Doing
either needs code that ``autograder.pipeline.structure`` flags for review.

This file is copied next to every assignment notebook (``checks.py``), so it
depends only on the standard library, NumPy, PyTorch and (optionally) IPython.
"""

from __future__ import annotations

import contextlib
import linecache
import math
import os
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

RECORD_MIME_TYPE = "application/vnd.pytorch-tensors-course.check+json"
"""MIME type of the ``display_data`` outputs that carry check records."""

RECORD_VERSION = 4
"""Version of the record format above (4: ``expected`` is absent from the record of a check given none)."""
MAX_RECORDED_ELEMENTS = 10_000
"""Arrays with more elements are recorded without their values."""


class _Reference:
    """The type of :data:`REFERENCE` (one instance)."""

    def __repr__(self) -> str:
        return "REFERENCE"


REFERENCE = _Reference()
"""The default ``expected`` of the checks that take one: the reference solution's value for the same check,
judged by the grader outside the kernel (see the module docstring)."""

records: list[dict[str, Any]] = []
"""Every record made in this process, in order (also when not in IPython)."""

_COURSE_DEVICE_VARIABLE = "COURSE_DEVICE"


# --------------------------------------------------------------------------- devices


def default_device() -> torch.device:
    """Return the device the course runs on.

    ``COURSE_DEVICE`` (``cpu``, ``cuda``, ``cuda:1``, ``mps``) overrides the
    choice; otherwise CUDA, then Apple MPS, then the CPU.

    Raises:
        ValueError: ``COURSE_DEVICE`` names no device type PyTorch knows.
        RuntimeError: ``COURSE_DEVICE`` names a device this machine lacks.
    """
    requested = os.environ.get(_COURSE_DEVICE_VARIABLE, "").strip()
    if requested:
        try:
            device = torch.device(requested)
        except RuntimeError as error:
            raise ValueError(
                f"{_COURSE_DEVICE_VARIABLE}={requested!r} is not a device; use cpu, cuda, cuda:N or mps"
            ) from error
        available = {
            "cpu": True,
            "cuda": torch.cuda.is_available(),
            "mps": torch.backends.mps.is_available(),
        }.get(device.type, False)
        if not available:
            raise RuntimeError(f"{_COURSE_DEVICE_VARIABLE}={requested!r} but this machine has no {device.type} device")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


# --------------------------------------------------------------------------- records

# Everything the encoder calls on a checked object is taken here, at import (before any student code runs), from
# the C types that define it (``torch._C.TensorBase``, ``numpy.ndarray``, ``numpy.generic``, ``type``: none can be
# patched from Python), and called unbound, so neither an attribute set on an instance (``t.tolist = ...``) nor a
# later ``torch.Tensor.tolist = ...`` changes what is recorded. The encoder runs with torch function modes and
# subclass overrides (``torch._C.DisableTorchFunction``) and dispatch modes off.
_TensorBase = torch._C.TensorBase
_DETACH, _TO, _TOLIST, _NUMEL = _TensorBase.detach, _TensorBase.to, _TensorBase.tolist, _TensorBase.numel
_RESOLVE_CONJ, _RESOLVE_NEG = _TensorBase.resolve_conj, _TensorBase.resolve_neg
_IS_COMPLEX, _IS_FLOATING = _TensorBase.is_complex, _TensorBase.is_floating_point
_SIZE, _STRIDE, _ELEMENT_SIZE = _TensorBase.size, _TensorBase.stride, _TensorBase.element_size
_DATA_PTR = _TensorBase.data_ptr
_DTYPE, _DEVICE = _TensorBase.dtype.__get__, _TensorBase.device.__get__
_ND_TOLIST, _ND_SHAPE, _ND_DTYPE = np.ndarray.tolist, np.ndarray.shape.__get__, np.ndarray.dtype.__get__
_ND_STRIDES, _ND_SIZE, _ND_ITEMSIZE = np.ndarray.strides.__get__, np.ndarray.size.__get__, np.ndarray.itemsize.__get__
_ND_INTERFACE = np.ndarray.__array_interface__.__get__
_ITEM = np.generic.item
_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction
_NO_DISPATCH_MODES = torch.utils._python_dispatch._disable_current_modes
_TYPE_NAME, _TYPE_MODULE, _MRO = (type.__dict__[name].__get__ for name in ("__name__", "__module__", "__mro__"))
_ARGS, _STR = BaseException.args.__get__, str
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
"""The exact tensor types recorded with their values; any other subclass of ``torch._C.TensorBase`` is refused."""
_NUMPY_SCALARS = frozenset(np.sctypeDict.values())
_NUMPY_NUMBERS = frozenset(t for t in _NUMPY_SCALARS if issubclass(t, (np.number, np.bool_)))
_PLAIN_ATOMS = (type(None), bool, int, float, str)


def type_name(value: Any) -> str:
    """The exact type of ``value`` as recorded: ``float``, ``tuple``, ``torch.Tensor``, ``numpy.float64``...

    Read from the type itself (``type``'s own descriptors), so no metaclass of a student's is consulted.
    """
    cls = type(value)
    if cls is torch.Tensor:
        return "torch.Tensor"
    module, name = _TYPE_MODULE(cls), _TYPE_NAME(cls)
    return name if module == "builtins" else f"{module}.{name}"


def refusal(value: Any) -> str | None:
    """Why ``value`` cannot be recorded as plain data (``None`` when it can).

    A subclass of ``torch.Tensor`` (other than ``torch.nn.Parameter``) or of ``numpy.ndarray`` can override what
    its methods report, so it is refused: the check fails and its record says why.
    """
    cls = type(value)
    if issubclass(cls, _TensorBase) and cls not in _PLAIN_TENSORS:
        return f"got a {type_name(value)}, a torch.Tensor subclass: return a plain torch.Tensor"
    if issubclass(cls, np.ndarray) and cls is not np.ndarray:
        return f"got a {type_name(value)}, a numpy.ndarray subclass: return a plain numpy.ndarray"
    return None


def encode_value(value: Any) -> Any:
    """Encode ``value`` as JSON-compatible data in the record format above, from exact types only.

    Tensors are detached and copied to the CPU; float tensors are recorded as float64 values, so no precision is
    lost. No method of ``value`` (or of anything it holds) that Python code could define is called: containers
    are walked only when their type is exactly ``tuple``, ``list``, ``dict`` or ``torch.Size``.
    """
    with _NO_TORCH_FUNCTION(), _NO_DISPATCH_MODES():
        return _encode(value)


def _encode(value: Any) -> Any:
    cls = type(value)
    if cls in (type(None), bool, int, str):
        return value
    if cls is float:
        return _encode_float(value)
    if cls is list:
        return [_encode(item) for item in value]
    if cls in (tuple, torch.Size):
        return {"tuple" if cls is tuple else "size": [_encode(item) for item in value]}
    if cls is dict and all(type(key) is str for key in value):
        return {"dict": {key: _encode(item) for key, item in dict.items(value)}}
    if cls is torch.dtype:
        return {"dtype": str(value)}
    if cls is torch.device:
        return {"device": str(value)}
    if cls in _PLAIN_TENSORS:
        return {"tensor": _encode_tensor(value)}
    if cls is np.ndarray:
        return {"ndarray": _encode_ndarray(value)}
    if cls in _NUMPY_SCALARS:
        return {"numpy": {"dtype": _TYPE_NAME(cls), "value": _encode_nested(_ITEM(value))}}
    if issubclass(cls, BaseException):
        return {"exception": _TYPE_NAME(cls)}
    reason = refusal(value)
    return {"type": type_name(value)} if reason is None else {"refused": reason}


def _encode_tensor(tensor: torch.Tensor) -> dict[str, Any]:
    """Dtype, shape, device and (up to :data:`MAX_RECORDED_ELEMENTS`, not on ``meta``) the values of a plain tensor."""
    plain = _DETACH(tensor)
    dtype, device, shape = str(_DTYPE(plain)), _DEVICE(plain), list(_SIZE(plain))
    data = None
    if _NUMEL(plain) <= MAX_RECORDED_ELEMENTS and device.type != "meta":
        plain = _RESOLVE_NEG(_RESOLVE_CONJ(_TO(plain, "cpu")))
        if _IS_COMPLEX(plain):
            plain = _TO(plain, torch.complex128)
        elif _IS_FLOATING(plain):  # NumPy has no bfloat16; float64 holds every float value exactly
            plain = _TO(plain, torch.float64)
        data = _encode_nested(_TOLIST(plain))
    return {"dtype": dtype, "shape": shape, "device": str(device), "data": data}


def _encode_ndarray(array: np.ndarray) -> dict[str, Any]:
    data = _encode_nested(_ND_TOLIST(array)) if _ND_SIZE(array) <= MAX_RECORDED_ELEMENTS else None
    return {"dtype": str(_ND_DTYPE(array)), "shape": list(_ND_SHAPE(array)), "device": "cpu", "data": data}


def _encode_float(number: float) -> Any:
    if math.isfinite(number):
        return number
    return {"float": "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")}


def _encode_nested(item: Any) -> Any:
    """What ``tolist`` gave: nested lists of numbers (complex as ``[real, imag]``), or an object array's objects."""
    cls = type(item)
    if cls is list:
        return [_encode_nested(element) for element in item]
    if cls is complex:
        return [_encode_float(item.real), _encode_float(item.imag)]
    return _encode(item)


def _record(
    check: str, label: str, checked: Any, value: Any, expected: Any, rule: dict[str, Any], *, encoded: bool = False
) -> str | None:
    """Record one check of ``checked`` (recorded as ``value``, which is already plain record data if ``encoded``)
    against ``expected`` (:data:`REFERENCE`: no expected value is recorded); return why ``checked`` was refused,
    if it was (the check then fails with that reason)."""
    reason = refusal(checked)
    record = {
        "version": RECORD_VERSION,
        "check": check,
        "label": label,
        "type": type_name(checked),
        "value": {"refused": reason} if reason is not None else value if encoded else encode_value(value),
    }
    if _groups:
        record["group"] = _groups[-1]
    if expected is not REFERENCE:
        record["expected"] = encode_value(expected)
    record["rule"] = rule
    records.append(record)
    return reason


_EXACT = {"kind": "exact"}
_DEVICE_RULE = {"kind": "device"}


def _fail(label: str, message: str) -> AssertionError:
    # Label and problem on lines of their own: `nbgrader validate` cuts every line at 90 characters.
    return AssertionError(f"{label}\n{message}")


# --------------------------------------------------------------------------- checks


def check_shape(actual: Any, expected: Sequence[int] | _Reference = REFERENCE, *, label: str) -> None:
    """Check that ``actual`` (a tensor or array) has shape ``expected`` (by default the reference solution's
    shape, judged by the grader: see the module docstring).

    Raises:
        AssertionError: ``actual`` is a refused subclass, or (given ``expected``) has no shape or a different one.
    """
    __tracebackhide__ = True  # IPython then shows the student's line, not this helper's
    shape = _shape(actual)
    wanted = expected if expected is REFERENCE else tuple(expected)
    if (reason := _record("shape", label, actual, shape, wanted, _EXACT)) is not None:
        raise _fail(label, reason)
    if expected is REFERENCE:
        return
    if shape is None:
        raise _fail(label, f"expected a tensor of shape {tuple(expected)}, got a {type(actual).__name__}")
    if tuple(shape) != tuple(expected):
        raise _fail(label, f"expected shape {tuple(expected)}, got {tuple(shape)}")


def check_dtype(actual: Any, expected: torch.dtype | np.dtype | type | _Reference = REFERENCE, *, label: str) -> None:
    """Check that ``actual`` (a tensor or array) has dtype ``expected`` (by default the reference solution's
    dtype, judged by the grader: see the module docstring).

    Raises:
        AssertionError: ``actual`` is a refused subclass, or (given ``expected``) has no dtype or a different one.
    """
    __tracebackhide__ = True  # IPython then shows the student's line, not this helper's
    dtype = _dtype(actual)
    if expected is REFERENCE:
        expected_name = REFERENCE
    else:
        expected_name = str(expected) if isinstance(expected, torch.dtype) else str(np.dtype(expected))
    found = None if dtype is None else str(dtype)
    if (reason := _record("dtype", label, actual, found, expected_name, _EXACT)) is not None:
        raise _fail(label, reason)
    if expected is REFERENCE:
        return
    if dtype is None:
        raise _fail(label, f"expected a tensor of dtype {expected}, got a {type(actual).__name__}")
    if isinstance(actual, np.ndarray):
        matches = not isinstance(expected, torch.dtype) and dtype == np.dtype(expected)
    else:
        matches = dtype == expected
    if not matches:
        raise _fail(label, f"expected dtype {expected}, got {dtype}")


def check_device(actual: Any, expected: torch.device | str | _Reference = REFERENCE, *, label: str) -> None:
    """Check that tensor ``actual`` lives on device ``expected`` (by default the reference solution's device,
    judged by the grader: see the module docstring).

    ``expected`` without an index (``"cuda"``) matches any index of that type.

    Raises:
        AssertionError: ``actual`` is a refused subclass, or (given ``expected``) is not a tensor or lives elsewhere.
    """
    __tracebackhide__ = True  # IPython then shows the student's line, not this helper's
    device = _DEVICE(actual) if type(actual) in _PLAIN_TENSORS else None
    found = None if device is None else str(device)
    wanted = expected if expected is REFERENCE else str(torch.device(expected))
    if (reason := _record("device", label, actual, found, wanted, _DEVICE_RULE)) is not None:
        raise _fail(label, reason)
    if expected is REFERENCE:
        return
    expected = torch.device(expected)
    if device is None:
        raise _fail(label, f"expected a tensor on {expected}, got a {type(actual).__name__}")
    same = device.type == expected.type and (expected.index is None or device.index == expected.index)
    if not same:
        raise _fail(label, f"expected a tensor on {expected}, got one on {device}; move it with .to(device)")


def check_equal(actual: Any, expected: Any = REFERENCE, *, label: str) -> None:
    """Check that ``actual`` equals ``expected`` exactly (by default the reference solution's value, judged by
    the grader: see the module docstring).

    Tensors must match in shape, dtype and every value (``torch.equal``);
    arrays likewise (``numpy.array_equal``); anything else is compared with
    ``==`` after checking the type, so ``True`` does not pass for ``1`` and a
    list does not pass for a tuple.

    Raises:
        AssertionError: ``actual`` is a refused subclass, or (given ``expected``) the values, types, shapes or
            dtypes differ.
    """
    __tracebackhide__ = True  # IPython then shows the student's line, not this helper's
    if (reason := _record("equal", label, actual, actual, expected, _EXACT)) is not None:
        raise _fail(label, reason)
    if expected is REFERENCE:
        return
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise _fail(label, f"expected a tensor, got a {type(actual).__name__}")
        same_kind = (tuple(actual.shape), actual.dtype) == (tuple(expected.shape), expected.dtype)
        if not same_kind:
            raise _fail(
                label,
                f"expected a {expected.dtype} tensor of shape {tuple(expected.shape)}, "
                f"got a {actual.dtype} tensor of shape {tuple(actual.shape)}",
            )
        found, wanted = actual.detach().cpu(), expected.detach().cpu()
        if not torch.equal(found, wanted):
            raise _fail(label, _where_they_differ(found, wanted, found != wanted))
        return
    if isinstance(expected, np.ndarray):
        if not isinstance(actual, np.ndarray):
            raise _fail(label, f"expected a NumPy array, got a {type(actual).__name__}")
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            raise _fail(
                label,
                f"expected a {expected.dtype} array of shape {expected.shape}, "
                f"got a {actual.dtype} array of shape {actual.shape}",
            )
        if not np.array_equal(actual, expected, equal_nan=expected.dtype.kind in "fc"):
            differ = (actual != expected) & ~(_nan(actual) & _nan(expected))
            try:
                found, wanted = (torch.from_numpy(np.ascontiguousarray(a)) for a in (actual, expected))
            except TypeError:  # a dtype PyTorch lacks (strings, objects)
                raise _fail(label, f"{int(differ.sum())} of {expected.size} values differ") from None
            raise _fail(label, _where_they_differ(found, wanted, torch.from_numpy(differ)))
        return
    if type(actual) is not type(expected):
        raise _fail(label, f"expected a {type(expected).__name__}, got a {type(actual).__name__} ({actual!r})")
    if actual != expected:
        raise _fail(label, f"expected {expected!r}, got {actual!r}")


def check_close(
    actual: Any,
    expected: Any = REFERENCE,
    *,
    label: str,
    rtol: float | None = None,
    atol: float | None = None,
    check_dtype: bool = True,
) -> None:
    """Check that ``actual`` is close to ``expected`` element by element (by default to the reference solution's
    value, judged by the grader under this call's rule: see the module docstring).

    Judges as ``torch.testing.assert_close`` does (shapes, dtypes and devices
    must match too; pass ``check_dtype=False`` to compare values only). Without
    ``rtol``/``atol`` PyTorch's defaults for the dtype of ``expected`` (without
    ``expected``: of ``actual``) apply, e.g. float32
    rtol 1.3e-6, atol 1e-5; float64 rtol 1e-7, atol 1e-7 (PyTorch docs,
    ``torch.testing.assert_close``). NumPy arrays and Python numbers are
    accepted on either side, and ``expected`` may be a (nested) list. A Python
    float ``actual`` is compared as float64 (its own precision, and float64's
    default tolerances, as ``assert_close`` does for Python scalars), against a
    float ``expected`` as float64 too; a float or list ``expected`` against a
    tensor is a tensor of PyTorch's default dtype, as ``torch.tensor`` makes it.

    Raises:
        TypeError: ``expected`` is none of these (a mistake in the test).
        AssertionError: ``actual`` is a refused subclass, or (given ``expected``) shapes, dtypes or devices
            differ, or some value is further from the expected one than ``atol + rtol * |expected|``.
    """
    __tracebackhide__ = True  # IPython then shows the student's line, not this helper's
    reason = refusal(actual)
    actual_t = None if reason is not None else _as_tensor(actual)
    if expected is REFERENCE:
        expected_t = REFERENCE
    elif isinstance(expected, (list, tuple)):
        expected_t = torch.tensor(expected)
    else:  # a float literal against a tensor means a tensor of the default dtype, against a float a float
        expected_t = _as_tensor(expected, torch.float64 if type(actual) is float else torch.get_default_dtype())
    if expected_t is None:
        raise TypeError(f"check_close: expected must be a tensor, array, number or list, not {type(expected).__name__}")
    if rtol is None or atol is None:
        default_rtol, default_atol = _default_tolerances(actual_t if expected_t is REFERENCE else expected_t)
        rtol = default_rtol if rtol is None else rtol
        atol = default_atol if atol is None else atol
    rule = {"kind": "close", "rtol": rtol, "atol": atol, "check_dtype": check_dtype}
    _record("close", label, actual, actual if actual_t is None else actual_t, expected_t, rule)
    if reason is not None:
        raise _fail(label, reason)
    if expected_t is REFERENCE:
        return
    if actual_t is None:
        raise _fail(label, f"expected a tensor or number, got a {type(actual).__name__}")
    problem = _not_close(actual_t.detach(), expected_t.detach(), rtol=rtol, atol=atol, check_dtype=check_dtype)
    if problem is not None:
        raise _fail(label, problem)


def _not_close(
    actual: torch.Tensor, expected: torch.Tensor, *, rtol: float, atol: float, check_dtype: bool
) -> str | None:
    """What ``torch.testing.assert_close`` would object to, for dense tensors (None when close).

    Same rule: shapes, devices and (optionally) dtypes equal, then
    ``|actual - expected| <= atol + rtol * |expected|`` element by element, NaN never
    close. Written out because the first ``assert_close`` in a process imports
    ``torch.distributed`` (seconds per graded notebook).
    """
    if actual.shape != expected.shape:
        return f"expected shape {tuple(expected.shape)}, got {tuple(actual.shape)}"
    if actual.device != expected.device:
        return f"expected a tensor on {expected.device}, got one on {actual.device}"
    if check_dtype and actual.dtype != expected.dtype:
        return f"expected dtype {expected.dtype}, got {actual.dtype}"
    common = torch.promote_types(actual.dtype, expected.dtype)
    actual, expected = actual.to(common), expected.to(common)
    if common == torch.bool:
        close = actual == expected
    else:
        close = torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=False)
    if bool(close.all()):
        return None
    return _where_they_differ(actual, expected, ~close, allowed=f" (up to {atol:g} + {rtol:g} * |expected| allowed)")


def _where_they_differ(actual: torch.Tensor, expected: torch.Tensor, differ: torch.Tensor, *, allowed: str = "") -> str:
    """A failure message for two CPU-comparable tensors of one shape that differ where ``differ`` is True.

    Says how many values differ, the first index that does with the value found and the one
    expected there, and for numbers the greatest absolute difference and its index (as
    ``torch.testing.assert_close`` does; ``allowed`` is appended to that line).
    """
    actual, expected, differ = actual.cpu(), expected.cpu(), differ.cpu()
    count, total = int(differ.sum()), differ.numel()
    flat_actual, flat_expected = actual.flatten(), expected.flatten()
    first = int(differ.flatten().int().argmax())
    lines = [
        f"Mismatched elements: {count} / {total} ({100 * count / total:.1f}%)",
        f"First at index {_index(first, actual.shape)}: "
        f"found {_scalar(flat_actual[first])}, expected {_scalar(flat_expected[first])}",
    ]
    if expected.dtype != torch.bool:
        wide = torch.complex128 if expected.is_complex() or actual.is_complex() else torch.float64
        difference = (flat_actual.to(wide) - flat_expected.to(wide)).abs()
        difference[~differ.flatten()] = 0
        nan = difference.isnan()
        worst = int(nan.int().argmax()) if nan.any() else int(difference.argmax())
        lines.append(
            f"Greatest absolute difference: {float(difference[worst]):.3g} at index {_index(worst, actual.shape)}{allowed}"
        )
    return "\n".join(lines)


def _index(flat: int, shape: torch.Size) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape)) if len(shape) else ()


def _scalar(value: torch.Tensor) -> str:
    item = value.item()
    if isinstance(item, float):
        text = f"{item:.6g}"
        return text if any(c in text for c in ".eni") else f"{text}.0"
    if isinstance(item, complex):
        return f"{item.real:.6g}{item.imag:+.6g}j"
    return repr(item)


def _nan(array: np.ndarray) -> np.ndarray:
    return np.isnan(array) if array.dtype.kind in "fc" else np.zeros(array.shape, dtype=bool)


def _as_tensor(value: Any, float_dtype: torch.dtype = torch.float64) -> torch.Tensor | None:
    """``value`` as a tensor when it is a plain tensor, array or number (exact types), else ``None``.

    A Python float becomes a tensor of ``float_dtype``: float64 by default, its own precision (a float32 one
    would round away every digit past the seventh).
    """
    if type(value) in _PLAIN_TENSORS:
        return value
    if type(value) is np.ndarray:
        return torch.from_numpy(np.ascontiguousarray(value))
    if type(value) is float:
        return torch.tensor(value, dtype=float_dtype)
    if type(value) in (bool, int) or type(value) in _NUMPY_NUMBERS:
        return torch.tensor(value)
    return None


def _dtype(value: Any) -> torch.dtype | np.dtype | None:
    """The dtype of a plain tensor or array (exact types), else ``None``."""
    if type(value) in _PLAIN_TENSORS:
        return _DTYPE(value)
    if type(value) is np.ndarray:
        return _ND_DTYPE(value)
    return None


def _shape(value: Any) -> tuple[int, ...] | None:
    """The shape of a plain tensor or array (exact types), else ``None``."""
    if type(value) in _PLAIN_TENSORS:
        return tuple(_SIZE(value))
    if type(value) is np.ndarray:
        return _ND_SHAPE(value)
    return None


def _default_tolerances(values: torch.Tensor | None) -> tuple[float, float]:
    dtype = torch.float32 if values is None else values.dtype
    table = {
        torch.float16: (1e-3, 1e-5),
        torch.bfloat16: (1.6e-2, 1e-5),
        torch.float32: (1.3e-6, 1e-5),
        torch.float64: (1e-7, 1e-7),
        torch.complex64: (1.3e-6, 1e-5),
        torch.complex128: (1e-7, 1e-7),
    }
    return table.get(dtype, (0.0, 0.0))


@contextlib.contextmanager
def check_raises(
    expected: type[BaseException] | tuple[type[BaseException], ...],
    *,
    label: str,
    match: str | None = None,
) -> Iterator[None]:
    """Check that the ``with`` block raises ``expected``.

    ``match``, if given, must occur in the exception's message. A ``NotImplementedError`` (what a released solution
    cell raises) passes only when ``expected`` names it, although it is a ``RuntimeError``.

    Raises:
        AssertionError: the block raised nothing, or another exception, or
            one whose message lacks ``match``.
    """
    __tracebackhide__ = True  # IPython then shows the student's line, not this helper's
    accepted = [expected] if isinstance(expected, type) else list(expected)
    names = " or ".join(e.__name__ for e in accepted)
    rule = {"kind": "raises", "match": match}
    try:
        yield
    except expected as error:
        _record("raises", label, None, _raised(error), [e.__name__ for e in accepted], rule, encoded=True)
        if _TYPE_NAME(type(error)) == _UNWRITTEN and not any(e.__name__ == _UNWRITTEN for e in accepted):
            raise _fail(label, f"expected {names}, but the function is not written yet ({_UNWRITTEN})") from None
        if match is not None and match not in str(_message(error)):
            raise _fail(label, f"raised {type(error).__name__} as expected, but its message lacks {match!r}") from None
        return
    except Exception as error:
        _record("raises", label, None, _raised(error), [e.__name__ for e in accepted], rule, encoded=True)
        raise _fail(label, f"expected {names}, but {_TYPE_NAME(type(error))} was raised: {_message(error)}") from None
    _record("raises", label, None, None, [e.__name__ for e in accepted], rule)
    raise _fail(label, f"expected {names}, but nothing was raised")


_UNWRITTEN = "NotImplementedError"
"""What a released solution cell raises: never the error a test expects, though it is a ``RuntimeError``."""


def _raised(error: BaseException) -> dict[str, Any]:
    names = [_TYPE_NAME(cls) for cls in _MRO(type(error))]
    return {"exception": _TYPE_NAME(type(error)), "mro": names, "message": _message(error)}


def _message(error: BaseException) -> str | None:
    """``str(error)`` as the first built-in exception class of its MRO makes it (up to 1000 characters), so no
    ``__str__`` of a student's is called; ``None`` when an argument of the exception is not plain data."""
    if not all(type(argument) in _PLAIN_ATOMS for argument in _ARGS(error)):
        return None
    builtin = next(cls for cls in _MRO(type(error)) if _TYPE_MODULE(cls) == "builtins")
    return _STR(builtin.__str__(error))[:1000]


def shares_memory(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> bool:
    """Return True when the memory ``a`` and ``b`` can reach overlaps.

    Each argument's extent is the byte range from its lowest to its highest
    addressable element, computed from data pointer, shape, strides and
    element size, so a view into another tensor's storage shares memory with
    it, and two disjoint slices of one storage do not. Empty tensors share
    nothing, and neither do tensors on different devices (NumPy arrays live
    on the CPU).

    Raises:
        TypeError: an argument is neither a tensor nor a NumPy array.
    """
    if _device_of(a) != _device_of(b):
        return False
    span_a, span_b = _byte_extent(a), _byte_extent(b)
    if span_a is None or span_b is None:
        return False
    return span_a[0] < span_b[1] and span_b[0] < span_a[1]


def _device_of(x: torch.Tensor | np.ndarray) -> torch.device:
    return _DEVICE(x) if issubclass(type(x), _TensorBase) else torch.device("cpu")


def _byte_extent(x: torch.Tensor | np.ndarray) -> tuple[int, int] | None:
    if issubclass(type(x), _TensorBase):
        with _NO_TORCH_FUNCTION():
            if _NUMEL(x) == 0:
                return None
            itemsize, shape = _ELEMENT_SIZE(x), tuple(_SIZE(x))
            pointer, strides = _DATA_PTR(x), [s * itemsize for s in _STRIDE(x)]
    elif issubclass(type(x), np.ndarray):
        if _ND_SIZE(x) == 0:
            return None
        pointer, strides, itemsize, shape = _ND_INTERFACE(x)["data"][0], _ND_STRIDES(x), _ND_ITEMSIZE(x), _ND_SHAPE(x)
    else:
        raise TypeError(f"expected a tensor or a NumPy array, got a {type(x).__name__}")
    low = pointer + sum(stride * (size - 1) for stride, size in zip(strides, shape) if stride < 0)
    high = pointer + sum(stride * (size - 1) for stride, size in zip(strides, shape) if stride > 0) + itemsize
    return low, high


def check_shares_memory(actual: Any, other: Any, *, label: str, expected: bool = True) -> None:
    """Check that ``actual`` shares memory with ``other`` (or, with ``expected=False``, that it does not).

    See :func:`shares_memory` for what sharing means.

    Raises:
        AssertionError: ``actual`` is not a tensor or array, or sharing is
            not as expected.
    """
    __tracebackhide__ = True  # IPython then shows the student's line, not this helper's
    if type(actual) not in (*_PLAIN_TENSORS, np.ndarray):
        reason = _record("shares_memory", label, actual, None, expected, _EXACT)
        raise _fail(label, reason or f"expected a tensor, got a {type(actual).__name__}")
    shared = shares_memory(actual, other)
    _record("shares_memory", label, actual, shared, expected, _EXACT)
    if shared and not expected:
        raise _fail(label, "the result shares memory with the input, but it must be a copy (try .clone())")
    if not shared and expected:
        raise _fail(label, "the result is a copy, but it must be a view of the input's memory (no copy)")


# --------------------------------------------------------------------------- groups

_groups: list[str] = []
"""The names of the groups open now, innermost last (groups do not nest: at most one)."""
_failed_groups: list[str] = []
"""The groups of the cell running now (IPython) whose block raised."""


@contextlib.contextmanager
def check_group(name: str, *, points: float) -> Iterator[None]:
    """Declare the checks made in the ``with`` block one group of a test cell, worth ``points`` of its points.

    A test cell worth more than one point splits its hidden checks into named groups (its main behaviour, its
    edge cases, its errors); the grader gives each group's points when all of its checks pass, judged outside the
    kernel against the reference solution's records, with the points the reference run declared (never the
    student's). Each record made in the block carries ``"group": name``; when the block ends, one ``group``
    record says whether it raised. An exception raised in the block (a failed visible check, a student's error)
    ends the block, not the cell: its traceback is shown (to stdout outside IPython: never stderr) and the next
    groups still run. ``KeyboardInterrupt`` and ``SystemExit`` are not caught.

    Raises:
        ValueError: the group is opened inside another one, or ``points`` is not a positive number (mistakes in
            the test).
    """
    __tracebackhide__ = True  # the traceback of an exception it catches leads with the student's line
    if _groups:
        raise ValueError(f"group {name!r} opened inside group {_groups[-1]!r}: groups do not nest")
    if type(points) not in (int, float) or not points > 0:
        raise ValueError(f"group {name!r}: points must be a positive number, got {points!r}")
    _groups.append(name)
    raised = None
    try:
        yield
    except Exception as error:
        raised = {"exception": _TYPE_NAME(type(error))}
        _show(error)
    finally:
        _groups.pop()
        records.append(
            {
                "version": RECORD_VERSION,
                "check": "group",
                "label": name,
                "type": "group",
                "value": {"raised": raised},
                "rule": {"kind": "group", "points": points},
            }
        )
    if raised is not None:
        _failed_groups.append(name)


def _show(error: BaseException) -> None:
    """Show the traceback of an exception a group caught as IPython shows one that ends a cell: a frame per line
    of the cell and of the student's functions (``Cell In[8], line 2``, with the lines before it), without the
    checks' own frames; outside IPython, print it to stdout.

    Written out because IPython numbers a frame by the line it is at now, and a cell's frame has moved on to the
    ``with`` statement when the group catches the exception; a traceback keeps the line that raised."""
    try:
        from IPython import get_ipython
    except ImportError:
        shell = None
    else:
        shell = get_ipython()
    name = _TYPE_NAME(type(error))
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frame, line = tb.tb_frame, tb.tb_lineno
        if not frame.f_locals.get("__tracebackhide__") and frame.f_code.co_filename != contextlib.__file__:
            filename = frame.f_code.co_filename
            cell = shell.compile.format_code_name(filename) if shell is not None else None
            where = f"{cell[0]} {cell[1]}, line {line}" if cell else (
                f"File {filename}:{line}, in {frame.f_code.co_name}"
            )
            context = [
                f"{'---->' if number == line else '     '} {number} {linecache.getline(filename, number).rstrip()}"
                for number in range(max(1, line - 2), line + 1)
            ]
            frames.append("\n".join([where, *context]))
        tb = tb.tb_next
    message = _message(error)
    stb = [f"{'-' * 75}\n{name:<40}Traceback (most recent call last)", *frames, f"{name}: {message or ''}"]
    if shell is None:
        print("\n".join(stb))
    else:
        shell._showtraceback(type(error), error, stb)


# --------------------------------------------------------------------------- IPython


PASSED_LINE = "All checks in this cell passed."
"""Printed after a cell whose checks all passed (inside IPython), so a passing test cell says so."""

JUDGED_LINE = "The checks given an expected value passed; the grader judges the others."
"""Printed instead of :data:`PASSED_LINE` after a cell that ran without failing when some of its checks were given
no expected value (hidden tests: the kernel cannot know whether those pass)."""

GROUPS_FAILED_LINE = "Groups of checks that raised (their points are lost; the later groups ran):"
"""Printed, with their names, after a cell in which some :func:`check_group` caught an exception."""

_records_before_cell = 0


def _hide_check_frames(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> None:
    """IPython's handler for a failed check: the traceback without the checks' own frames.

    IPython hides frames whose locals set ``__tracebackhide__`` only in its debugger, not in
    tracebacks (checked with IPython 9.18), so a failed check would show this module's
    internals (and ``contextlib``'s, for :func:`check_raises`) below the student's line.
    """
    kept = []
    while tb is not None:
        frame = tb.tb_frame
        if not frame.f_locals.get("__tracebackhide__") and frame.f_code.co_filename != contextlib.__file__:
            kept.append(tb)
        tb = tb.tb_next
    chain = None
    for item in reversed(kept):
        chain = types.TracebackType(chain, item.tb_frame, item.tb_lasti, item.tb_lineno)
    shell.showtraceback((etype, value, chain), tb_offset=tb_offset)


def _count_records(info: Any) -> None:
    global _records_before_cell
    _records_before_cell = len(records)
    _failed_groups.clear()


def _end_cell(result: Any) -> None:
    """After a cell: its records as one output (see the module docstring), then the groups that raised
    (:data:`GROUPS_FAILED_LINE`) or, if none did and the cell raised nothing, the passed line (:data:`JUDGED_LINE` if
    some check was given no expected value)."""
    made = records[_records_before_cell:]
    if not made:
        return
    from IPython.display import display

    display({"text/plain": "", RECORD_MIME_TYPE: made}, raw=True)
    if _failed_groups:
        print(f"{GROUPS_FAILED_LINE} {', '.join(_failed_groups)}")
    elif result.success:
        print(PASSED_LINE if all("expected" in record for record in made) else JUDGED_LINE)


def _install_in_ipython() -> None:
    """Inside IPython: failed checks' tracebacks lead with the student's line; a cell's records are published
    when it ends; passing check cells say so."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    shell.set_custom_exc((AssertionError,), _hide_check_frames)
    shell.events.register("pre_run_cell", _count_records)
    shell.events.register("post_run_cell", _end_cell)


_install_in_ipython()
