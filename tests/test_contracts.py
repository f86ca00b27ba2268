"""Contract tests: every graded task's reference solution against its docstring, over the inputs it allows.

Property-based (hypothesis) over shapes with empty and size-1 dimensions,
non-contiguous and offset views, the dtypes each contract allows and the
``meta`` device standing in for "not the CPU", checked against PyTorch or
NumPy where they have the answer. The reference functions come from the
source notebooks' solution cells (``reference_solutions.load``), run here in
the test process, not in a kernel. Deterministic: the ``contracts`` profile
derandomizes hypothesis and bounds the examples, so the module costs a few
seconds of CI.
"""

import collections
import copy
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autograder.authoring.samples import variants
from autograder.pipeline.verdict import first_mismatch
from reference_solutions import load, records_of_tests

settings.register_profile(
    "contracts",
    max_examples=30,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("contracts")

META = torch.device("meta")
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.uint8, torch.int8, torch.int32, torch.int64]


def reference(assignment_id):
    """A module-scoped fixture: the reference solutions of ``assignment_id`` (loaded once)."""
    return pytest.fixture(scope="module")(lambda: load(assignment_id))


t01 = reference("01_tensors")
t02 = reference("02_strides")
t03 = reference("03_devices")
t04 = reference("04_autograd")
t05 = reference("05_broadcasting_amp")
t06 = reference("06_polynomial_regression")
t07 = reference("07_hvp_challenge")


# --------------------------------------------------------------------------- strategies

shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


@st.composite
def tensors(draw, shape=None, dtypes=tuple(FLOATS + INTS), special=False):
    """A CPU tensor of ``shape`` (drawn when None), one of ``dtypes``: contiguous, an offset view, strided or transposed.

    ``special``: floating values may include 0, -0, inf, -inf and nan.
    """
    shape = draw(shapes) if shape is None else tuple(shape)
    dtype = draw(st.sampled_from(dtypes))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    layout = draw(st.sampled_from(["contiguous", "offset", "strided", "transposed"]))
    if layout == "transposed" and len(shape) >= 2:
        base_shape = shape[:-2] + (shape[-1], shape[-2])
    elif layout == "strided" and shape:
        base_shape = shape[:-1] + (2 * shape[-1],)
    else:
        base_shape = shape
    numel = math.prod(base_shape) + (1 if layout == "offset" else 0)
    if dtype == torch.bool:
        flat = torch.randint(0, 2, (numel,), generator=gen).bool()
    elif dtype.is_complex:
        flat = torch.randn(numel, generator=gen, dtype=dtype)
    elif dtype.is_floating_point:
        flat = (4 * torch.randn(numel, generator=gen, dtype=torch.float64)).to(dtype)
        if special and numel:
            values = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan], dtype=dtype)
            picks = torch.randint(0, 2, (numel,), generator=gen).bool()
            flat = torch.where(picks, values[torch.randint(0, 5, (numel,), generator=gen)], flat)
    else:
        low = 0 if dtype == torch.uint8 else -9
        flat = torch.randint(low, 10, (numel,), generator=gen, dtype=dtype)
    if layout == "offset":
        return flat[1:].view(shape)
    base = flat.view(base_shape)
    if layout == "transposed" and len(shape) >= 2:
        return base.transpose(-1, -2)
    if layout == "strided" and shape:
        return base[..., ::2]
    return base


def assert_same_tensor(actual, expected, **tolerances):
    """Shape, dtype, device and values (nan equal to nan)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype and actual.device == expected.device
    if actual.device != META:
        torch.testing.assert_close(actual, expected, equal_nan=True, **tolerances)


# =========================================================================== 01_tensors


@given(n=st.integers(0, 6), classes=st.integers(1, 5), seed=st.integers(0, 999), data=st.data())
def test_one_hot_is_torch_one_hot(t01, n, classes, seed, data):
    labels = torch.randint(0, classes, (2 * n,), generator=torch.Generator().manual_seed(seed))
    labels = labels[::2] if data.draw(st.booleans()) else labels[:n]  # a strided view or a contiguous one
    expected = F.one_hot(labels, classes).to(torch.float32)
    assert_same_tensor(t01.one_hot(labels, classes), expected, rtol=0, atol=0)


@given(classes=st.integers(1, 4), bad=st.sampled_from([-1, 0, 3]))
def test_one_hot_refuses_labels_outside_the_classes(t01, classes, bad):
    label = -1 if bad == -1 else classes + bad
    with pytest.raises(ValueError):
        t01.one_hot(torch.tensor([0, label]), classes)


@given(data=st.data())
def test_center_crop_is_the_centered_view(t01, data):
    image = data.draw(tensors(shape=data.draw(st.lists(st.integers(1, 5), min_size=2, max_size=4))))
    H, W = image.shape[-2:]
    height, width = data.draw(st.integers(1, H)), data.draw(st.integers(1, W))
    top, left = (H - height) // 2, (W - width) // 2
    crop = t01.center_crop(image, height, width)
    assert_same_tensor(crop, image[..., top : top + height, left : left + width], rtol=0, atol=0)
    assert crop.untyped_storage().data_ptr() == image.untyped_storage().data_ptr()
    assert crop.storage_offset() == image.storage_offset() + top * image.stride(-2) + left * image.stride(-1)
    meta = t01.center_crop(image.to(META), height, width)
    assert meta.device == META and meta.shape == crop.shape
    with pytest.raises(ValueError):
        t01.center_crop(image, H + 1, width)
    with pytest.raises(ValueError):
        t01.center_crop(image, height, W + 1)


@given(data=st.data())
def test_zero_negatives_writes_in_place_through_views(t01, data):
    x = data.draw(tensors(special=True))
    expected = torch.where(x < 0, torch.zeros((), dtype=x.dtype), x)  # nan is not < 0: it stays nan
    base = x._base if x._base is not None else x
    before = base.clone()
    assert t01.zero_negatives_(x) is x
    assert_same_tensor(x, expected, rtol=0, atol=0)
    assert torch.equal(torch.isnan(base), torch.isnan(before))
    meta = x.to(META)
    assert t01.zero_negatives_(meta) is meta


@given(data=st.data())
def test_hwc_to_chw_is_a_permuted_view(t01, data):
    ndim = data.draw(st.sampled_from([3, 4]))
    images = data.draw(tensors(shape=data.draw(st.lists(st.integers(0, 3), min_size=ndim, max_size=ndim))))
    expected = images.permute(2, 0, 1) if ndim == 3 else images.permute(0, 3, 1, 2)
    result = t01.hwc_to_chw(images)
    assert_same_tensor(result, expected, rtol=0, atol=0)
    assert result.stride() == expected.stride() and result.storage_offset() == images.storage_offset()
    assert t01.hwc_to_chw(images.to(META)).shape == expected.shape
    with pytest.raises(ValueError):
        t01.hwc_to_chw(torch.zeros((1,) * data.draw(st.sampled_from([0, 1, 2, 5]))))


@given(
    dtype=st.sampled_from([np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.bool_, np.complex64]),
    shape=shapes,
    flip=st.booleans(),
    readonly=st.booleans(),
)
def test_numpy_to_tensor_shares_memory_exactly_when_safe(t01, dtype, shape, flip, readonly):
    array = np.arange(math.prod(shape)).astype(dtype).reshape(shape)
    if flip and array.ndim:
        array = array[..., ::-1]
    if readonly:
        array.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tensor = t01.numpy_to_tensor(array)
    assert tensor.device.type == "cpu" and tuple(tensor.shape) == array.shape
    assert tensor.dtype == torch.from_numpy(np.zeros(1, dtype)).dtype
    np.testing.assert_array_equal(tensor.numpy(), array)
    negative = any(s < 0 for s in array.strides)
    shares = tensor.numel() > 0 and tensor.data_ptr() == array.__array_interface__["data"][0]
    if array.size:
        assert shares == (not negative and not readonly)


@given(data=st.data(), requires_grad=st.booleans())
def test_to_numpy_shares_memory_unless_numpy_lacks_the_dtype(t01, data, requires_grad):
    t = data.draw(tensors(dtypes=tuple(FLOATS + INTS + [torch.bool])))
    if requires_grad and t.dtype.is_floating_point:
        t.requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        array = t01.to_numpy(t)
    expected = (t.detach().float() if t.dtype == torch.bfloat16 else t.detach()).clone().numpy()
    assert type(array) is np.ndarray and array.shape == tuple(t.shape) and array.dtype == expected.dtype
    np.testing.assert_array_equal(array, expected)
    if t.numel():
        assert (array.__array_interface__["data"][0] == t.data_ptr()) == (t.dtype != torch.bfloat16)
    assert t.requires_grad == (requires_grad and t.dtype.is_floating_point)


@given(data=st.data(), big=st.booleans(), expand=st.integers(1, 3))
def test_compact_copies_exactly_when_the_storage_holds_more_than_is_shown(t01, data, big, expand):
    t = data.draw(tensors(dtypes=tuple(FLOATS + INTS + [torch.bool, torch.complex128])))
    if big:  # a piece of a storage 10 times its size
        t = torch.cat([t.flatten(), t.new_zeros(9 * t.numel() + 1)])[: t.numel()].view(t.shape)
    t = t.expand(expand, *t.shape)
    for tensor in (t, t.to(META)):
        shown = tensor.numel() * tensor.element_size()
        result = t01.compact(tensor)
        if tensor.untyped_storage().nbytes() <= shown:
            assert result is tensor
        else:
            assert_same_tensor(result, tensor, rtol=0, atol=0)
            assert result.untyped_storage().nbytes() == shown


@given(data=st.data(), constant_rows=st.booleans())
def test_standardize_rows_is_numpys_population_standardization(t01, data, constant_rows):
    shape = data.draw(shapes.filter(lambda s: s and s[-1] >= 1))
    x = data.draw(tensors(shape=shape, dtypes=(torch.float32, torch.float64)))
    if constant_rows:
        x = x[..., :1].expand(shape).clone()
    before = x.clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = t01.standardize_rows(x)
    a = x.numpy().astype(np.float64)
    std = a.std(axis=-1, keepdims=True)
    constant = (a == a[..., :1]).all(axis=-1, keepdims=True)
    expected = np.divide(a - a.mean(axis=-1, keepdims=True), std, out=np.zeros_like(a), where=~constant)
    assert_same_tensor(result, torch.from_numpy(expected).to(x.dtype), rtol=1e-5, atol=1e-5)
    if constant_rows:
        assert not result.any()
    assert torch.equal(x, before)
    assert t01.standardize_rows(x.to(META)).shape == x.shape


@given(data=st.data())
def test_collate_is_cat_of_the_items_as_batches(t01, data):
    image = tuple(data.draw(st.lists(st.integers(0, 3), min_size=3, max_size=3)))
    sizes = data.draw(st.lists(st.sampled_from([None, 0, 1, 2]), min_size=1, max_size=4))
    items = [data.draw(tensors(shape=image if n is None else (n, *image))) for n in sizes]
    dtype = items[0].dtype
    items = [item.to(dtype) for item in items]
    result = t01.collate(items)
    expected = torch.cat([item.unsqueeze(0) if item.ndim == 3 else item for item in items])
    assert_same_tensor(result, expected, rtol=0, atol=0)
    assert result.numel() == 0 or all(result.data_ptr() != item.data_ptr() for item in items)
    assert t01.collate([item.to(META) for item in items]).shape == expected.shape
    for wrong in ([], [torch.zeros(image[:2])], [torch.zeros(1, 1, *image)], [torch.zeros(image), torch.zeros(1, image[0] + 1, *image[1:])]):
        with pytest.raises(ValueError):
            t01.collate(wrong)


# =========================================================================== 02_strides


@st.composite
def strided_layouts(draw, min_size=0):
    shape = draw(st.lists(st.integers(min_size, 4), min_size=0, max_size=4).map(tuple))
    strides = tuple(draw(st.lists(st.integers(0, 12), min_size=len(shape), max_size=len(shape))))
    return shape, strides


@given(layout=strided_layouts(min_size=1), offset=st.integers(0, 5), data=st.data())
def test_storage_position_is_where_as_strided_reads(t02, layout, offset, data):
    shape, strides = layout
    index = tuple(data.draw(st.integers(-size, size - 1)) for size in shape)
    storage = torch.arange(offset + sum((s - 1) * st_ for s, st_ in zip(shape, strides)) + 1)
    view = storage.as_strided(shape, strides, offset)
    result = t02.storage_position(index, shape, strides, offset)
    assert type(result) is int and result == int(view[index])
    if shape:
        with pytest.raises(IndexError):
            t02.storage_position(index[:-1], shape, strides, offset)
        with pytest.raises(IndexError):
            t02.storage_position(index[:-1] + (shape[-1],), shape, strides, offset)


@given(shape=st.lists(st.sampled_from([0, 1, 2, 3, 2**31, 2**40]), max_size=4).map(tuple))
def test_contiguous_strides_are_torch_empty_strides(t02, shape):
    if math.prod(max(s, 1) for s in shape) >= 2**62:
        shape = shape[:1]
    result = t02.contiguous_strides(shape)
    assert type(result) is tuple and all(type(s) is int for s in result)
    assert result == torch.empty(shape, device=META).stride()


@given(shape=st.lists(st.integers(0, 4), max_size=4).map(tuple), data=st.data())
def test_unravel_position_inverts_row_major_order(t02, shape, data):
    numel = math.prod(shape)
    if numel:
        position = data.draw(st.integers(0, numel - 1))
        result = t02.unravel_position(position, shape)
        assert type(result) is tuple and all(type(i) is int for i in result)
        assert result == tuple(int(i) for i in np.unravel_index(position, shape))
    for outside in (-1, numel):
        with pytest.raises(IndexError):
            t02.unravel_position(outside, shape)


@given(layout=strided_layouts())
def test_is_contiguous_follows_pytorch(t02, layout):
    shape, strides = layout
    assert t02.is_contiguous(shape, strides) is torch.empty_strided(shape, strides, device=META).is_contiguous()
    with pytest.raises(ValueError):
        t02.is_contiguous(shape, strides + (1,))


@st.composite
def view_requests(draw):
    shape, strides = draw(strided_layouts())
    if draw(st.booleans()):  # a real view of a contiguous tensor: often viewable
        column_major = tuple(reversed(torch.empty(tuple(reversed(shape)), device=META).stride()))
        strides = column_major if draw(st.booleans()) else torch.empty(shape, device=META).stride()
    numel = math.prod(shape)
    sizes = []
    rest = numel
    for _ in range(draw(st.integers(0, 4))):
        divisors = [d for d in range(0, 13) if (d == 0 and rest == 0) or (d and rest % d == 0)]
        size = draw(st.sampled_from(divisors or [1]))
        sizes.append(size)
        rest = rest // size if size else 0
    if draw(st.booleans()):
        sizes.append(rest if rest or not numel else 1)
    else:
        sizes.append(draw(st.integers(0, 6)))
    if draw(st.booleans()):
        sizes[draw(st.integers(0, len(sizes) - 1))] = -1
    return shape, tuple(strides), tuple(sizes)


@given(request=view_requests())
def test_can_view_agrees_with_tensor_view(t02, request):
    shape, strides, new_shape = request
    try:
        torch.empty_strided(shape, strides, device=META).view(new_shape)
        expected = True
    except RuntimeError:
        expected = False
    assert t02.can_view(shape, strides, new_shape) is expected


@given(data=st.data())
def test_sliding_windows_is_unfold(t02, data):
    x = data.draw(tensors(shape=(data.draw(st.integers(1, 9)),)))
    size, step = data.draw(st.integers(1, x.shape[0])), data.draw(st.integers(1, 4))
    windows = t02.sliding_windows(x, size, step)
    expected = x.unfold(0, size, step)
    assert_same_tensor(windows, expected, rtol=0, atol=0)
    assert windows.stride() == expected.stride() and windows.storage_offset() == x.storage_offset()
    meta = t02.sliding_windows(x.to(META), size, step)
    assert meta.device == META and meta.shape == expected.shape
    for bad in [(x.shape[0] + 1, step), (0, step), (size, 0)]:
        with pytest.raises(ValueError):
            t02.sliding_windows(x, *bad)
    with pytest.raises(ValueError):
        t02.sliding_windows(x.unsqueeze(0), size, step)


@given(data=st.data(), n=st.integers(0, 8), d=st.integers(0, 3), num_groups=st.integers(0, 4))
def test_sum_by_group_adds_every_row_to_its_group(t02, data, n, d, num_groups):
    dtype = data.draw(st.sampled_from(FLOATS + [torch.int32, torch.int64]))
    values = data.draw(tensors(shape=(n, d), dtypes=(dtype,)))
    groups = torch.tensor(data.draw(st.lists(st.integers(0, num_groups - 1), min_size=n, max_size=n)) if num_groups else [], dtype=torch.int64)
    n = groups.shape[0]
    values, kept = values[:n], values[:n].clone()
    wide = torch.int64 if dtype in (torch.int32, torch.int64) else torch.float64
    expected = torch.zeros(num_groups, d, dtype=wide)
    for row, group in zip(values.to(wide), groups.tolist()):
        expected[group] += row
    result = t02.sum_by_group(values, groups, num_groups)
    loose = dict(rtol=2e-2, atol=2e-2) if dtype in (torch.float16, torch.bfloat16) else dict(rtol=1e-6, atol=1e-6)
    assert_same_tensor(result, expected.to(dtype), **(loose if dtype.is_floating_point else dict(rtol=0, atol=0)))
    assert torch.equal(values, kept)
    assert t02.sum_by_group(values.to(META), groups.to(META), num_groups).shape == (num_groups, d)


# =========================================================================== 03_devices


@given(
    preference=st.sampled_from([None, "", "  ", "cpu", " cpu ", "cpu:0", "cuda", "cuda:1", "mps", "meta", "gpu", "cpu:x"]),
    course=st.sampled_from([None, "", "cpu", "cuda", "gpu"]),
)
def test_choose_device_preference_then_environment(t03, preference, course):
    env = {} if course is None else {"COURSE_DEVICE": course}
    name = (preference or "").strip() or (course or "").strip()
    if not name:
        assert t03.choose_device(preference, env) == torch.device("cpu")  # no CUDA nor MPS on the test machines
    elif name in ("gpu", "cpu:x"):
        with pytest.raises(ValueError):
            t03.choose_device(preference, env)
    elif torch.device(name).type == "cpu":
        result = t03.choose_device(preference, env)
        assert isinstance(result, torch.device) and result == torch.device(name)
    else:
        with pytest.raises(RuntimeError):
            t03.choose_device(preference, env)


Pair = collections.namedtuple("Pair", "first second")

leaves = st.one_of(
    tensors(shape=(2,), dtypes=(torch.float16, torch.float32, torch.float64, torch.int64)),
    st.integers(),
    st.text(max_size=3),
    st.none(),
)
batches = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=2), inner, max_size=3),
        st.tuples(inner, inner).map(lambda pair: Pair(*pair)),
    ),
    max_leaves=6,
)


def assert_moved(result, batch, dtype):
    assert type(result) is type(batch)
    if isinstance(batch, torch.Tensor):
        assert result.device == META and result.shape == batch.shape
        assert result.dtype == (dtype if dtype is not None and batch.is_floating_point() else batch.dtype)
    elif isinstance(batch, dict):
        assert result is not batch and list(result) == list(batch)
        for key in batch:
            assert_moved(result[key], batch[key], dtype)
    elif isinstance(batch, (list, tuple)):
        assert len(result) == len(batch) and (result is not batch or batch == ())
        for item, original in zip(result, batch):
            assert_moved(item, original, dtype)
    else:
        assert result is batch


@given(batch=batches, dtype=st.sampled_from([None, torch.bfloat16, torch.float64]))
def test_move_batch_moves_every_tensor_and_keeps_the_rest(t03, batch, dtype):
    assert_moved(t03.move_batch(batch, "meta", dtype=dtype), batch, dtype)


@given(
    repeats=st.integers(1, 6),
    warmup=st.integers(0, 3),
    durations=st.lists(st.floats(0, 10, allow_nan=False), min_size=6, max_size=6),
    synchronized=st.booleans(),
)
def test_time_function_is_the_median_of_synchronized_runs(t03, repeats, warmup, durations, synchronized):
    events, now = [], [0.0]

    def clock():
        events.append("clock")
        return now[0]

    def fn():
        events.append("fn")
        calls = events.count("fn")
        if calls > warmup:
            now[0] += durations[calls - warmup - 1]

    sync = (lambda: events.append("sync")) if synchronized else None
    result = t03.time_function(fn, repeats=repeats, warmup=warmup, synchronize=sync, clock=clock)
    assert type(result) is float
    assert result == pytest.approx(float(np.median(durations[:repeats])), rel=1e-12, abs=1e-12)
    timed = ["sync", "clock", "fn", "sync", "clock"] if synchronized else ["clock", "fn", "clock"]
    assert events[warmup:] == timed * repeats and events[:warmup] == ["fn"] * warmup
    with pytest.raises(ValueError):
        t03.time_function(fn, repeats=0)
    with pytest.raises(ValueError):
        t03.time_function(fn, warmup=-1)


def accelerator_faster(n, itemsize, cpu, gpu, bandwidth):
    """Section 3.5's model in exact arithmetic: copying two n x n matrices in and the product out, then multiplying
    on the accelerator, takes strictly less time than multiplying on the CPU (rates in GFLOP/s and GB/s)."""
    cpu, gpu, bandwidth = Fraction(cpu), Fraction(gpu), Fraction(bandwidth)
    return 3 * n * n * itemsize / bandwidth + 2 * n**3 / gpu < 2 * n**3 / cpu


@given(
    dtype=st.sampled_from([torch.int8, torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128]),
    cpu=st.integers(1, 1000),
    gpu=st.integers(1, 1000),
    bandwidth=st.integers(1, 1000),
)
def test_break_even_size_is_the_first_size_the_accelerator_wins(t03, dtype, cpu, gpu, bandwidth):
    # Integer rates up to 1000 keep the tie at least 5e-7 away from any other whole number, far above float rounding.
    result = t03.break_even_size(dtype, cpu_gflops=float(cpu), gpu_gflops=float(gpu), bandwidth_gbs=float(bandwidth))
    if gpu <= cpu:
        assert result is None
        return
    assert type(result) is int and result >= 1
    assert accelerator_faster(result, dtype.itemsize, cpu, gpu, bandwidth)
    assert result == 1 or not accelerator_faster(result - 1, dtype.itemsize, cpu, gpu, bandwidth)


@given(which=st.sampled_from(["cpu_gflops", "gpu_gflops", "bandwidth_gbs"]), bad=st.sampled_from([0.0, -0.0, -1.0, math.inf, -math.inf, math.nan]))
def test_break_even_size_refuses_what_it_says(t03, which, bad):
    rates = {"cpu_gflops": 100.0, "gpu_gflops": 20_000.0, "bandwidth_gbs": 12.0, which: bad}
    with pytest.raises(ValueError):
        t03.break_even_size(torch.float32, **rates)


def valid_alternative(assignment_id, name):
    """The source of the valid alternative ``name`` of ``tests/submissions/<assignment_id>.toml``."""
    return next(table["source"] for kind, table in variants(assignment_id) if (kind, table["name"]) == ("valid", name))


def test_break_even_size_keeps_its_points_computed_per_flop(t03):
    # The tie written with the seconds saved per FLOP rounds otherwise than the reference's form: no test may sit on
    # rates where the two times tie exactly, which float rounding alone decides.
    alternative = valid_alternative("03_devices", "break_even_size_time_per_flop")
    reference = records_of_tests("03_devices", "task_3_2_break_even_size")
    assert len(reference) > 40
    graded = records_of_tests("03_devices", "task_3_2_break_even_size", solution=alternative)
    assert first_mismatch(graded, reference) is None


size_tables = st.dictionaries(st.integers(1, 8), st.lists(st.integers(1, 6).map(float), min_size=1, max_size=4), max_size=6)


@given(device=size_tables, baseline=size_tables, other=st.dictionaries(st.integers(1, 8), st.lists(st.floats(allow_nan=True), max_size=2), max_size=2))
def test_crossover_size_is_where_the_medians_stay_ahead(t03, device, baseline, other):
    timings = {"cpu": baseline, "cuda": device, "mps": other}  # mps: not looked at, whatever it holds
    common = sorted(set(device) & set(baseline))
    ahead = [float(np.median(device[n])) < float(np.median(baseline[n])) for n in common]
    expected = next((n for i, n in enumerate(common) if all(ahead[i:])), None)
    assert t03.crossover_size(timings, "cuda") == expected
    assert t03.crossover_size(timings, "cuda", baseline="cuda") is None


@given(bad=st.sampled_from([[], [0.0], [1.0, -1.0], [math.nan], [math.inf, 1.0]]), where=st.sampled_from(["cpu", "cuda"]))
def test_crossover_size_refuses_what_it_says(t03, bad, where):
    timings = {"cpu": {1: [1.0], 2: [2.0]}, "cuda": {1: [0.5], 3: [1.0]}}
    timings[where] = {**timings[where], 4: bad}
    with pytest.raises(ValueError):
        t03.crossover_size(timings, "cuda")
    with pytest.raises(ValueError):
        t03.crossover_size({"cpu": {1: [1.0]}}, "cuda")


# =========================================================================== 04_autograd


@st.composite
def linear_layers(draw, dtypes=(torch.float32, torch.float64)):
    n_in, n_out, m = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(0, 4))
    dtype = draw(st.sampled_from(dtypes))
    X = draw(tensors(shape=(n_in, m), dtypes=(dtype,)))
    W = draw(tensors(shape=(n_out, n_in), dtypes=(dtype,)))
    b = draw(tensors(shape=(n_out, 1), dtypes=(dtype,)))
    return X, W, b


def autograd_float64(X, W, b):
    W64 = W.detach().double().requires_grad_(True)
    b64 = b.detach().double().requires_grad_(True)
    loss = ((W64 @ X.detach().double() + b64) ** 2).sum()
    dW, db = torch.autograd.grad(loss, (W64, b64))
    return loss.detach(), dW, db


@given(data=st.data(), n=st.integers(1, 5))
def test_neuron_grads_are_the_chain_rule_and_leave_the_inputs_alone(t04, data, n):
    dtype = data.draw(st.sampled_from(FLOATS))
    x, w = (data.draw(tensors(shape=(n,), dtypes=(dtype,))) for _ in range(2))
    b = data.draw(tensors(shape=(), dtypes=(dtype,)))
    w_before, b_before = w.clone(), b.clone()
    loss, grad_w, grad_b = t04.neuron_grads(x, w, b)
    z = (x.double() * w.double()).sum() + b.double()  # section 1.4: dL/dw = 2 z x, dL/db = 2 z
    for got, want in zip((loss, grad_w, grad_b), (z**2, 2 * z * x.double(), 2 * z)):
        assert got.dtype == dtype and got.shape == want.shape and not got.requires_grad
        if dtype in (torch.float32, torch.float64):
            torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-3)
    assert not w.requires_grad and not b.requires_grad and w.grad is None and b.grad is None
    assert torch.equal(w, w_before) and torch.equal(b, b_before)
    meta = t04.neuron_grads(x.to(META), w.to(META), b.to(META))
    assert [t.device for t in meta] == [META] * 3 and [t.shape for t in meta] == [(), (n,), ()]


@given(layer=linear_layers())
def test_linear_grads_numpy_are_autograd_grads(t04, layer):
    X, W, b = layer
    loss, dW, db = t04.linear_grads_numpy(X.numpy(), W.numpy(), b.numpy())
    exact = autograd_float64(X, W, b)
    tol = dict(rtol=1e-4, atol=1e-3) if X.dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    assert type(loss) is float and loss == pytest.approx(float(exact[0]), rel=tol["rtol"], abs=tol["atol"])
    for got, want in ((dW, exact[1]), (db, exact[2])):
        assert isinstance(got, np.ndarray) and got.dtype == X.numpy().dtype and got.shape == tuple(want.shape)
        torch.testing.assert_close(torch.from_numpy(np.asarray(got, np.float64)), want, **tol)


@given(layer=linear_layers(dtypes=tuple(FLOATS)), grads=st.booleans(), no_grad=st.booleans())
def test_linear_grads_autograd_leaves_the_inputs_alone(t04, layer, grads, no_grad):
    X, W, b = layer
    W, b = (W.clone().requires_grad_(True), b.clone().requires_grad_(True)) if grads else (W, b)
    W_before, b_before = W.detach().clone(), b.detach().clone()
    if no_grad:
        with torch.no_grad():
            result = t04.linear_grads_autograd(X, W, b)
    else:
        result = t04.linear_grads_autograd(X, W, b)
    exact = autograd_float64(X, W, b)
    low = X.dtype in (torch.float16, torch.bfloat16)
    for got, want in zip(result, exact):
        assert got.dtype == X.dtype and got.device == X.device and not got.requires_grad and got.shape == want.shape
        if not low:
            torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-3)
    assert W.requires_grad is grads and b.requires_grad is grads and W.grad is None and b.grad is None
    assert torch.equal(W.detach(), W_before) and torch.equal(b.detach(), b_before)
    meta = t04.linear_grads_autograd(X.to(META), W.detach().to(META), b.detach().to(META))
    assert [t.device for t in meta] == [META] * 3 and [t.shape for t in meta] == [t.shape for t in exact]


@given(data=st.data(), grad=st.booleans())
def test_relative_error_in_float64(t04, data, grad):
    shape = data.draw(shapes)
    a = data.draw(tensors(shape=shape, dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64)))
    b = data.draw(tensors(shape=shape, dtypes=(torch.float32, torch.float64)))
    if grad:
        b = b.clone().requires_grad_(True)
    a64, b64 = a.double(), b.detach().double()
    denominator = max(float(torch.linalg.vector_norm(a64)), float(torch.linalg.vector_norm(b64)), np.finfo(np.float64).tiny)
    expected = float(torch.linalg.vector_norm(a64 - b64)) / denominator
    for left in (a, a.numpy() if a.dtype not in (torch.bfloat16,) else a):
        result = t04.relative_error(left, b)
        assert type(result) is float and 0.0 <= result <= 2.0
        assert result == pytest.approx(expected, rel=1e-12, abs=1e-300)
    assert t04.relative_error(torch.zeros(shape), torch.zeros(shape)) == 0.0
    for bad in (math.inf, -math.inf, math.nan):  # the docstring: nan when an element is inf or nan
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # and no RuntimeWarning on the way: a kernel would show it on stderr
            assert math.isnan(t04.relative_error(np.array([bad, 1.0]), np.ones(2)))
            assert math.isnan(t04.relative_error(torch.ones(2), torch.tensor([1.0, bad])))
    with pytest.raises(ValueError):
        t04.relative_error(a, b.detach().reshape(-1, 1)[:0] if b.numel() else torch.zeros(1, 1, 1, 1))


@given(layer=linear_layers(), lr=st.floats(0, 0.1), stale=st.booleans())
def test_train_step_is_one_fresh_gradient_step(t04, layer, lr, stale):
    X, W, b = layer
    if X.shape[1] == 0:
        X = torch.ones(X.shape[0], 1, dtype=X.dtype)
    Y = torch.ones(W.shape[0], X.shape[1], dtype=X.dtype)
    W, b = W.clone().requires_grad_(True), b.clone().requires_grad_(True)
    if stale:
        W.grad, b.grad = torch.ones_like(W), torch.ones_like(b)
    W0, b0 = W.detach().clone(), b.detach().clone()
    W64, b64 = W0.double().requires_grad_(True), b0.double().requires_grad_(True)
    loss64 = ((W64 @ X.double() + b64 - Y.double()) ** 2).mean()
    dW, db = torch.autograd.grad(loss64, (W64, b64))
    identity = (id(W), W.data_ptr(), id(b), b.data_ptr())
    loss = t04.train_step(X, Y, W, b, lr)
    tol = dict(rtol=1e-4, atol=1e-4) if X.dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    assert type(loss) is float and loss == pytest.approx(float(loss64.detach()), rel=tol["rtol"], abs=tol["atol"])
    assert identity == (id(W), W.data_ptr(), id(b), b.data_ptr()) and W.is_leaf and b.is_leaf and W.requires_grad
    torch.testing.assert_close(W.grad.double(), dW, **tol)
    torch.testing.assert_close(b.grad.double(), db, **tol)
    torch.testing.assert_close(W.detach(), W0 - lr * W.grad, rtol=0, atol=0)
    torch.testing.assert_close(b.detach(), b0 - lr * b.grad, rtol=0, atol=0)


@given(layer=linear_layers(dtypes=tuple(FLOATS)), grads=st.booleans())
def test_predict_records_no_graph(t04, layer, grads):
    X, W, b = layer
    if grads:
        W, b = W.clone().requires_grad_(True), b.clone().requires_grad_(True)
    result = t04.predict(X, W, b)
    assert not result.requires_grad and result.grad_fn is None
    assert_same_tensor(result, (W.detach() @ X + b.detach()), rtol=0, atol=0)
    assert W.requires_grad is grads and W.grad is None and b.grad is None
    assert t04.predict(X.to(META), W.detach().to(META), b.detach().to(META)).device == META


@given(course=st.sampled_from(["cpu", "unset", "cuda", "gpu"]))
def test_toolkit_get_device_reads_course_device_on_every_call(t04, course, monkeypatch_module):
    if course == "unset":
        monkeypatch_module.delenv("COURSE_DEVICE", raising=False)
        assert t04.PyTorchTensorToolkit.get_device() == torch.device("cpu")
    elif course == "cpu":
        monkeypatch_module.setenv("COURSE_DEVICE", course)
        assert t04.PyTorchTensorToolkit.get_device() == torch.device("cpu")
    else:
        monkeypatch_module.setenv("COURSE_DEVICE", course)
        with pytest.raises((ValueError, RuntimeError)):
            t04.PyTorchTensorToolkit.get_device()
    monkeypatch_module.setenv("COURSE_DEVICE", "cpu")


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@given(dtype=st.sampled_from([np.float16, np.float32, np.float64, np.int64, np.uint8, np.bool_]), shape=shapes, device=st.sampled_from(["cpu", "meta"]))
def test_toolkit_numpy_bridge(t04, dtype, shape, device):
    arr = np.arange(math.prod(shape)).astype(dtype).reshape(shape)
    result = t04.PyTorchTensorToolkit.tensor_numpy_bridge(arr, device)
    assert result.device.type == device and tuple(result.shape) == shape and not result.requires_grad
    assert result.dtype == torch.from_numpy(np.zeros(1, dtype)).dtype
    if device == "cpu":
        np.testing.assert_array_equal(result.numpy(), arr)
        assert arr.size == 0 or result.data_ptr() == arr.__array_interface__["data"][0]


@given(layer=linear_layers(dtypes=tuple(FLOATS)), grads=st.booleans())
def test_toolkit_linear_layer_records_the_graph(t04, layer, grads):
    X, W, b = layer
    if grads:
        W, b = W.clone().requires_grad_(True), b.clone().requires_grad_(True)
    Z, loss = t04.PyTorchTensorToolkit.compute_linear_layer_autograd(X, W, b)
    assert_same_tensor(Z.detach(), (W.detach() @ X + b.detach()), rtol=0, atol=0)
    assert loss.shape == () and loss.dtype == X.dtype
    assert Z.requires_grad is grads and loss.requires_grad is grads and W.grad is None


@given(data=st.data(), n=st.integers(1, 4), k=st.integers(0, 4), stale=st.booleans())
def test_early_exit_grads_differentiate_the_layers_that_ran(t04, data, n, k, stale):
    dtype = data.draw(st.sampled_from(FLOATS))
    x = data.draw(tensors(shape=(n,), dtypes=(dtype,)))
    # values are about 4 * randn, so limits up to 40 stop after 0 to 3 layers; x's own max|x| stops at once (>=)
    limit = data.draw(st.one_of(st.floats(0.0, 40.0), st.just(float(x.abs().max()))))
    weights = [data.draw(tensors(shape=(n,), dtypes=(dtype,))).clone().requires_grad_(True) for _ in range(k)]
    if stale and weights:
        weights[0].grad = torch.ones_like(weights[0])
    h, expected_used = x, 0  # the forward pass as the statement defines it, in x's dtype
    while expected_used < k and not h.abs().max() >= limit:
        h, expected_used = weights[expected_used].detach() * h, expected_used + 1
    used, grads = t04.early_exit_grads(x, weights, limit)
    assert type(used) is int and used == expected_used and type(grads) is list and len(grads) == k
    loose = dict(rtol=2e-2, atol=1e-2) if dtype in (torch.float16, torch.bfloat16) else dict(rtol=1e-5, atol=1e-6)
    for i, (grad, w) in enumerate(zip(grads, weights)):
        others = [v.detach().double() for j, v in enumerate(weights[:used]) if j != i]
        product = x.double() * (torch.stack(others).prod(dim=0) if others else 1.0) if i < used else torch.zeros(n, dtype=torch.float64)
        assert grad.dtype == dtype and grad.shape == w.shape and not grad.requires_grad
        torch.testing.assert_close(grad.double(), product, **loose)
        assert w.is_leaf and w.requires_grad
        assert (w.grad is None) is not (stale and i == 0)


@given(data=st.data(), m=st.integers(1, 5), training=st.booleans(), stale=st.booleans())
def test_evaluate_is_eval_mode_without_a_graph_and_restores_the_model(t04, data, m, training, stale):
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]))
    n_in, n_out = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    torch.manual_seed(data.draw(st.integers(0, 2**16)))
    layers = [torch.nn.Linear(n_in, n_out)]
    if data.draw(st.booleans()):
        layers.append(torch.nn.BatchNorm1d(n_out))
    layers.append(torch.nn.Dropout(data.draw(st.sampled_from([0.0, 0.5, 0.9]))))
    model = torch.nn.Sequential(*layers).to(dtype).train(training)
    if len(layers) == 3:
        with torch.no_grad():
            model[1].running_mean.uniform_(-1.0, 1.0)
            model[1].running_var.uniform_(0.5, 2.0)
    if stale:
        model[0].weight.grad = torch.ones_like(model[0].weight)
    X = data.draw(tensors(shape=(m, n_in), dtypes=(dtype,))).clone().requires_grad_(data.draw(st.booleans()))
    reference = copy.deepcopy(model).eval()
    with torch.no_grad():
        expected = reference(X)
    state = copy.deepcopy(model.state_dict())
    result = t04.evaluate(model, X)
    assert_same_tensor(result, expected, rtol=0, atol=0)
    assert not result.requires_grad and result.grad_fn is None and X.grad is None
    assert all(module.training is training for module in model.modules())
    assert all(torch.equal(value, state[name]) for name, value in model.state_dict().items())
    assert (model[0].weight.grad is None) is not stale and model[0].bias.grad is None


@given(data=st.data(), n=st.integers(1, 4), h=st.integers(1, 4), k=st.integers(1, 3), limit=st.floats(0.01, 100.0))
def test_clipped_hidden_backward_is_the_chain_rule_with_a_clamp(t04, data, n, h, k, limit):
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]))
    x = data.draw(tensors(shape=(n,), dtypes=(dtype,)))
    W1 = data.draw(tensors(shape=(h, n), dtypes=(dtype,))).clone().requires_grad_(True)
    W2 = data.draw(tensors(shape=(k, h), dtypes=(dtype,))).clone().requires_grad_(True)
    hidden = W1.detach().double() @ x.double()
    out = W2.detach().double() @ hidden
    grad_hidden = W2.detach().double().T @ (2 * out)
    loss = t04.clipped_hidden_backward(x, W1, W2, limit)
    tol = dict(rtol=1e-4, atol=1e-3) if dtype == torch.float32 else dict(rtol=1e-9, atol=1e-9)
    assert type(loss) is float and math.isclose(loss, float((out**2).sum()), rel_tol=tol["rtol"], abs_tol=tol["atol"])
    torch.testing.assert_close(W1.grad.double(), torch.outer(grad_hidden.clamp(-limit, limit), x.double()), **tol)
    torch.testing.assert_close(W2.grad.double(), torch.outer(2 * out, hidden), **tol)
    W1.grad = W2.grad = None
    ((W2 @ (W1 @ x)) ** 2).sum().backward()
    torch.testing.assert_close(W1.grad.double(), torch.outer(grad_hidden, x.double()), **tol)


# =========================================================================== 05_broadcasting_amp


def assert_shape_rule(function, torch_rule, a, b):
    """``function(a, b)`` is the tuple of ints ``torch_rule(a, b)`` gives, or raises ValueError where it raises."""
    try:
        expected = tuple(torch_rule(a, b))
    except RuntimeError:
        with pytest.raises(ValueError):
            function(a, b)
        return
    result = function(a, b)
    assert type(result) is tuple and result == expected and all(type(s) is int for s in result)


@given(a=shapes, b=shapes, size=st.booleans())
def test_broadcast_shape_is_torch_broadcast_shapes(t05, a, b, size):
    assert_shape_rule(t05.broadcast_shape, torch.broadcast_shapes, torch.Size(a) if size else a, b)


@given(data=st.data())
def test_pairwise_sq_dists_against_float64(t05, data):
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]))
    n, m, d = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 4)), data.draw(st.integers(1, 3))
    X = data.draw(tensors(shape=(n, d), dtypes=(dtype,)))
    Y = data.draw(tensors(shape=(m, d), dtypes=(dtype,)))
    result = t05.pairwise_sq_dists(X, Y)
    expected = ((X.double()[:, None, :] - Y.double()[None, :, :]) ** 2).sum(-1)
    assert result.shape == (n, m) and result.dtype == dtype and bool((result >= 0).all())
    scale = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(result.double(), expected, rtol=scale, atol=scale * 100 * (1 + float(expected.max()) if expected.numel() else 1))
    assert t05.pairwise_sq_dists(X.to(META), Y.to(META)).shape == (n, m)


@given(data=st.data())
def test_sum_to_shape_is_sum_to_size(t05, data):
    grad = data.draw(tensors(dtypes=(torch.float32, torch.float64, torch.bfloat16)))
    keep = data.draw(st.integers(0, grad.dim()))
    shape = tuple(data.draw(st.sampled_from([1, size])) for size in grad.shape[grad.dim() - keep :])
    result = t05.sum_to_shape(grad, shape)
    assert_same_tensor(result, grad.sum_to_size(shape), rtol=1e-2 if grad.dtype == torch.bfloat16 else 1e-6, atol=1e-5)
    assert t05.sum_to_shape(grad.to(META), torch.Size(shape)).shape == shape
    if grad.dim():
        with pytest.raises(ValueError):
            t05.sum_to_shape(grad, (1,) + tuple(grad.shape))
        if any(s > 1 for s in grad.shape):
            with pytest.raises(ValueError):
                t05.sum_to_shape(grad, tuple(s + 1 if s > 1 else s for s in grad.shape))


@given(a=shapes, b=shapes, size=st.booleans())
def test_matmul_shape_is_matmul_on_meta(t05, a, b, size):
    def on_meta(a, b):
        return torch.matmul(torch.empty(a, device=META), torch.empty(b, device=META)).shape

    assert_shape_rule(t05.matmul_shape, on_meta, torch.Size(a) if size else a, b)


@st.composite
def broadcast_triples(draw):
    """Three shapes that broadcast together: suffixes of one shape, each size kept or made 1."""
    full = draw(st.lists(st.integers(0, 3), min_size=0, max_size=3))
    return [tuple(draw(st.sampled_from([1, s])) for s in full[len(full) - draw(st.integers(0, len(full))) :]) for _ in range(3)]


@given(data=st.data())
def test_scale_shift_backward_has_input_shapes(t05, data):
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]))
    inputs = [data.draw(tensors(shape=shape, dtypes=(dtype,))).requires_grad_() for shape in data.draw(broadcast_triples())]
    out = t05.ScaleShift.apply(*inputs)
    expected = inputs[0] * inputs[1] + inputs[2]
    assert_same_tensor(out.detach(), expected.detach(), rtol=1e-6, atol=1e-6)
    grad_out = data.draw(tensors(shape=tuple(expected.shape), dtypes=(dtype,)))
    returned = out.grad_fn.apply(grad_out)
    wanted = torch.autograd.grad(expected, inputs, grad_out)
    assert len(returned) == 3
    for got, want in zip(returned, wanted):
        assert_same_tensor(got.detach(), want, rtol=1e-5, atol=1e-5)


def test_amp_train_step_matches_a_manual_step(t05):
    for amp_dtype, enabled, max_norm in ((torch.bfloat16, False, None), (torch.float16, False, None), (torch.bfloat16, True, 0.05), (torch.float16, True, None)):
        gen = torch.Generator().manual_seed(5)
        model = torch.nn.Linear(3, 2)
        twin = torch.nn.Linear(3, 2)
        twin.load_state_dict(model.state_dict())
        x, y = torch.randn(4, 3, generator=gen), torch.randn(4, 2, generator=gen)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, enabled=enabled)
        loss = t05.amp_train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), scaler, x, y, amp_dtype, max_norm=max_norm)
        with torch.autocast("cpu", dtype=amp_dtype):
            expected = F.mse_loss(twin(x), y)
        expected.backward()
        if max_norm is not None:
            norm = torch.cat([p.grad.flatten() for p in twin.parameters()]).norm()
            assert norm > max_norm  # the clipping binds: the step below is the clipped one
            torch.nn.utils.clip_grad_norm_(twin.parameters(), max_norm)
        torch.optim.SGD(twin.parameters(), lr=0.1).step()
        assert type(loss) is float and loss == float(expected.detach())
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
        assert scaler.get_scale() == (2.0**16 if enabled else 1.0)


# =========================================================================== 06_polynomial_regression


@given(data=st.data(), degree=st.integers(0, 4))
def test_design_matrix_is_vander(t06, data, degree):
    x = data.draw(tensors(shape=(data.draw(st.integers(0, 5)),), dtypes=tuple(FLOATS), special=True))
    result = t06.design_matrix(x, degree)
    expected = torch.stack([x**j for j in range(degree + 1)], dim=1) if x.numel() else torch.ones(0, degree + 1, dtype=x.dtype)
    assert_same_tensor(result, expected, rtol=1e-6 if x.dtype.itemsize > 2 else 1e-2, atol=0)
    assert bool((result[:, 0] == 1).all())
    assert t06.design_matrix(x.to(META), degree).shape == (x.shape[0], degree + 1)
    with pytest.raises(ValueError):
        t06.design_matrix(x, -1)
    with pytest.raises(ValueError):
        t06.design_matrix(x.unsqueeze(0), degree)


@given(degree=st.integers(0, 3), extra=st.integers(0, 4), seed=st.integers(0, 999), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_fit_least_squares_is_polyfit(t06, degree, extra, seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    n = degree + 1 + extra
    x = torch.linspace(-1, 1, n, dtype=torch.float64) + 0.01 * torch.rand(n, generator=gen, dtype=torch.float64)
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    result = t06.fit_least_squares(x.to(dtype), y.to(dtype), degree)
    expected = torch.from_numpy(np.polynomial.polynomial.polyfit(x.to(dtype).double().numpy(), y.to(dtype).double().numpy(), degree))
    assert result.shape == (degree + 1,) and result.dtype == dtype
    tol = 1e-3 if dtype == torch.float32 else 1e-8
    torch.testing.assert_close(result.double(), expected, rtol=tol, atol=tol)
    with pytest.raises(ValueError):
        t06.fit_least_squares(x[:degree], y[:degree], degree)
    with pytest.raises(ValueError):
        t06.fit_least_squares(x, y[:-1], degree)


@given(data=st.data())
def test_mse_is_mse_loss(t06, data):
    shape = data.draw(shapes.filter(lambda s: math.prod(s) > 0))
    pred = data.draw(tensors(shape=shape, dtypes=(torch.float32, torch.float64)))
    target = data.draw(tensors(shape=shape, dtypes=(pred.dtype,)))
    pred = pred.clone().requires_grad_(True)
    result = t06.mse(pred, target)
    expected = F.mse_loss(pred, target)
    assert_same_tensor(result.detach(), expected.detach(), rtol=1e-6, atol=1e-6)
    (grad,) = torch.autograd.grad(result, pred)
    torch.testing.assert_close(grad, 2 * (pred.detach() - target) / pred.numel())
    if shape:
        with pytest.raises(ValueError):
            t06.mse(pred, target.unsqueeze(0))


@given(data=st.data(), lr=st.floats(0, 1), count=st.integers(0, 3))
def test_sgd_step_updates_in_place_and_clears(t06, data, lr, count):
    params = [data.draw(tensors(dtypes=(torch.float32, torch.float64, torch.bfloat16))).requires_grad_(True) for _ in range(count)]
    for p in params:
        if data.draw(st.booleans()):
            p.grad = torch.ones_like(p)
    before = [(id(p), p.data_ptr(), p.stride(), p.detach().clone(), None if p.grad is None else p.grad.clone()) for p in params]
    assert t06.sgd_step_(tuple(params) if count % 2 else params, lr) is None
    for p, (ident, ptr, stride, value, grad) in zip(params, before):
        assert (id(p), p.data_ptr(), p.stride()) == (ident, ptr, stride) and p.is_leaf and p.requires_grad
        assert p.grad is None or not bool(p.grad.any())
        expected = value if grad is None else value - lr * grad
        torch.testing.assert_close(p.detach(), expected, rtol=0, atol=0)
    meta = torch.zeros(2, device=META, requires_grad=True)
    meta.grad = torch.ones(2, device=META)
    t06.sgd_step_([meta], lr)
    assert meta.grad is None or meta.grad.device == META


SGD_RUNS = dict(
    n=st.integers(1, 7),
    d=st.integers(1, 3),
    epochs=st.integers(0, 3),
    batch_size=st.integers(1, 9),
    seed=st.integers(0, 50),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
"""The small SGD runs the contracts of fit_sgd and fit_sgd_module draw: any batch size against any n, float32 or 64."""


def sgd_by_the_text(X, y, lr, epochs, batch_size, seed):
    """The procedure the task's text fixes, written out: a fresh randperm every epoch, the short batch kept."""
    n, d = X.shape
    w = torch.zeros(d, dtype=torch.float64)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, batch_size):
            rows = order[start : start + batch_size]
            residual = X[rows].double() @ w - y[rows].double()
            w = w - lr * 2 * X[rows].double().T @ residual / len(rows)
    return w


@given(**SGD_RUNS)
def test_fit_sgd_follows_the_procedure(t06, n, d, epochs, batch_size, seed, dtype):
    gen = torch.Generator().manual_seed(seed + 1000)
    X, y = torch.rand(n, d, generator=gen, dtype=dtype), torch.rand(n, generator=gen, dtype=dtype)
    result = t06.fit_sgd(X, y.requires_grad_(False), lr=0.1, epochs=epochs, batch_size=batch_size, seed=seed)
    assert result.shape == (d,) and result.dtype == dtype and not result.requires_grad
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(result.double(), sgd_by_the_text(X, y, 0.1, epochs, batch_size, seed), rtol=tol, atol=tol)
    with pytest.raises(ValueError):
        t06.fit_sgd(X, y[:-1] if n > 1 else y.unsqueeze(0), lr=0.1, epochs=1, batch_size=1)


@given(**SGD_RUNS)
def test_fit_sgd_module_takes_the_steps_of_fit_sgd(t06, n, d, epochs, batch_size, seed, dtype):
    gen = torch.Generator().manual_seed(seed + 2000)
    X, y = torch.rand(n, d, generator=gen, dtype=dtype), torch.rand(n, generator=gen, dtype=dtype)
    model = t06.fit_sgd_module(X, y, lr=0.1, epochs=epochs, batch_size=batch_size, seed=seed)
    assert isinstance(model, torch.nn.Module)
    assert [(name, p.shape, p.dtype) for name, p in model.named_parameters()] == [("weight", (1, d), dtype)]
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    expected = sgd_by_the_text(X, y, 0.1, epochs, batch_size, seed)
    torch.testing.assert_close(model.weight.detach()[0].double(), expected, rtol=tol, atol=tol)
    predictions = X.double() @ model.weight.detach().double().T
    torch.testing.assert_close(model(X).detach().double(), predictions, rtol=tol, atol=tol)
    with pytest.raises(ValueError):
        t06.fit_sgd_module(X, y[:-1] if n > 1 else y.unsqueeze(0), lr=0.1, epochs=1, batch_size=1)
    meta = t06.fit_sgd_module(X.to(META), y.to(META), lr=0.1, epochs=epochs, batch_size=batch_size, seed=seed)
    assert meta.weight.device == META and meta.weight.shape == (1, d)


# =========================================================================== 07_hvp_challenge


def quadratic_plus(A, c):
    return lambda t: 0.5 * t @ A.to(t.device, t.dtype) @ t + c * torch.sin(t).sum() + torch.exp(0.3 * t.sum())


@st.composite
def hvp_problems(draw, dtypes=(torch.float32, torch.float64)):
    n, dtype, seed = draw(st.integers(1, 5)), draw(st.sampled_from(dtypes)), draw(st.integers(0, 999))
    gen = torch.Generator().manual_seed(seed)
    M = torch.randn(n, n, generator=gen, dtype=torch.float64)
    f = quadratic_plus(M + M.T, draw(st.sampled_from([0.0, 1.0])))
    x = draw(tensors(shape=(n,), dtypes=(dtype,)))
    v = draw(tensors(shape=(n,), dtypes=(dtype,)))
    return f, x, v


HVPS = ["hvp_double_backward", "hvp_forward_over_reverse", "hvp_finite_difference"]


@pytest.mark.parametrize("name", HVPS)
@given(problem=hvp_problems(), grad=st.booleans())
def test_hvp_is_autograd_hvp(t07, name, problem, grad):
    f, x, v = problem
    if grad:
        x = x.clone().requires_grad_(True)
    x_before = x.detach().clone()
    result = getattr(t07, name)(f, x, v)
    _, exact = torch.autograd.functional.hvp(f, x.detach().double(), v.double())
    assert result.shape == x.shape and result.dtype == x.dtype and result.device == x.device and not result.requires_grad
    tol = 1e-3 if x.dtype == torch.float32 else 1e-6
    torch.testing.assert_close(result.double(), exact, rtol=tol, atol=tol * (1 + float(exact.abs().max())))
    assert torch.equal(x.detach(), x_before) and x.grad is None and x.requires_grad is grad
    meta = getattr(t07, name)(f, x.detach().to(META), v.to(META))
    assert meta.device == META and meta.shape == x.shape and meta.dtype == x.dtype


@pytest.mark.parametrize("name", HVPS)
@given(n=st.integers(1, 4), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_hvp_of_a_linear_function_is_zero(t07, name, n, dtype):
    x, v = torch.ones(n, dtype=dtype), torch.arange(n, dtype=dtype)
    result = getattr(t07, name)(lambda t: (v * t).sum() + 2.0, x, v)
    assert result.dtype == dtype and torch.equal(result, torch.zeros(n, dtype=dtype))


@given(h=st.sampled_from([0.0, -0.0, -1e-5, -math.inf]))
def test_hvp_finite_difference_refuses_a_step_that_is_not_positive(t07, h):
    with pytest.raises(ValueError):
        t07.hvp_finite_difference(lambda t: (t**2).sum(), torch.ones(2), torch.ones(2), h)


@given(problem=hvp_problems(dtypes=(torch.float64,)), steps=st.lists(st.sampled_from([1e-1, 1e-3, 1e-5, 1e-8]), max_size=4))
def test_fd_hvp_errors_are_relative_errors(t07, problem, steps):
    f, x, v = problem
    _, exact = torch.autograd.functional.hvp(f, x, v)
    errors = t07.fd_hvp_errors(f, x, v, steps)
    assert errors.shape == (len(steps),) and errors.dtype == torch.float64 and errors.device.type == "cpu"
    for k, h in enumerate(steps):
        approx = t07.hvp_finite_difference(f, x, v, h)
        expected = torch.linalg.vector_norm(approx - exact) / torch.linalg.vector_norm(exact)
        torch.testing.assert_close(errors[k], expected, rtol=1e-6, atol=1e-15)


@given(n=st.integers(1, 6), seed=st.integers(0, 999), sign=st.sampled_from([1.0, -1.0]))
def test_largest_eigenvalue_is_eigvalsh(t07, n, seed, sign):
    gen = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    spectrum = torch.linspace(-1, 1, n, dtype=torch.float64) * 0.5
    spectrum[0] = 3.0 * sign
    H = Q @ torch.diag(spectrum) @ Q.T
    calls = []
    result = t07.largest_eigenvalue(lambda q: calls.append(q) or H @ q, n, num_iters=500, seed=seed)
    assert type(result) is float and result == pytest.approx(3.0 * sign, rel=1e-6)
    assert len(calls) <= 500 and all(q.dtype == torch.float64 and q.shape == (n,) for q in calls)
    assert abs(float(torch.linalg.vector_norm(calls[0])) - 1.0) < 1e-12  # the start is normalised
    assert t07.largest_eigenvalue(lambda q: torch.zeros_like(q), n) == 0.0
    with pytest.raises(ValueError):
        t07.largest_eigenvalue(lambda q: q, 0)
    with pytest.raises(ValueError):
        t07.largest_eigenvalue(lambda q: q, n, num_iters=0)


# =========================================================================== 01_tensors, 05_broadcasting_amp: extremes


def test_tensors_references_keep_extreme_values(t01):
    x = torch.tensor([-math.inf, -1e30, -0.0, 3.0, math.inf])
    assert torch.equal(t01.zero_negatives_(x), torch.tensor([0.0, 0.0, 0.0, 3.0, math.inf]))
    wide = torch.tensor([1e5, -3e38, 1e-30, 65536.0], dtype=torch.bfloat16)
    array = t01.to_numpy(wide)
    assert array.dtype == np.float32 and np.array_equal(array, wide.float().numpy())
    large = torch.tensor([[1e20, -1e20, 3e20], [1e30, 2e30, -1e30]])
    a = large.double().numpy()
    expected = (a - a.mean(axis=-1, keepdims=True)) / a.std(axis=-1, keepdims=True)
    assert_same_tensor(t01.standardize_rows(large), torch.from_numpy(expected).float(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("second", [(4, 4), (1, 2, 3, 4, 4), (2, 1, 4, 4)])
def test_collate_refuses_a_bad_item_after_a_valid_one_with_value_error(t01, second):
    with pytest.raises(ValueError):
        t01.collate([torch.zeros(2, 3, 4, 4), torch.zeros(second)])


def test_results_stay_on_the_inputs_device(t01, t05):
    assert t01.collate([torch.empty(2, 3, 4, 4, device=META), torch.empty(3, 4, 4, device=META)]).device == META
    assert t05.pairwise_sq_dists(torch.empty(5, 3, device=META), torch.empty(4, 3, device=META)).device == META
    assert t05.sum_to_shape(torch.empty(2, 3, 4, device=META), (3, 1)).device == META


# =========================================================================== 03_devices and 04_autograd: per call


@given(
    machines=st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(1, 3)), min_size=1, max_size=4),
    index=st.integers(0, 3),
)
def test_choose_device_asks_the_machine_on_every_call(t03, machines, index):
    from unittest import mock

    for cuda, mps, count in machines:
        with (
            mock.patch("torch.cuda.is_available", return_value=cuda),
            mock.patch("torch.cuda.device_count", return_value=count if cuda else 0),
            mock.patch("torch.backends.mps.is_available", return_value=mps),
        ):
            best = "cuda" if cuda else "mps" if mps else "cpu"
            assert t03.choose_device(env={}) == torch.device(best)
            assert t03.choose_device(env={"COURSE_DEVICE": " cpu "}) == torch.device("cpu")
            if cuda and index < count:
                assert t03.choose_device(env={"COURSE_DEVICE": f"cuda:{index}"}) == torch.device("cuda", index)
            else:
                with pytest.raises(RuntimeError):
                    t03.choose_device(f"cuda:{index}", env={"COURSE_DEVICE": "cpu"})


@given(n=st.integers(1, 4), k=st.integers(0, 4), limit=st.sampled_from([0.5, 2.0, 1e9]))
def test_early_exit_and_linear_grads_stay_on_the_inputs_device_whatever_the_default(t04, n, k, limit):
    x = torch.linspace(0.25, 1.0, n, dtype=torch.float64)
    weights = [torch.full((n,), 1.5 + i, dtype=torch.float64, requires_grad=True) for i in range(k)]
    X, W, b = (torch.ones(shape, dtype=torch.float64) for shape in [(n, 2), (3, n), (3, 1)])
    with torch.device(META):
        used, grads = t04.early_exit_grads(x, weights, limit)
        results = t04.linear_grads_autograd(X, W, b)
    assert type(used) is int and [g.device.type for g in grads] == ["cpu"] * k
    assert [t.device.type for t in results] == ["cpu"] * 3
    assert all(not g.requires_grad for g in [*grads, *results])


@given(dtype=st.sampled_from([np.float32, np.float64]), m=st.integers(0, 3))
def test_linear_grads_numpy_loss_is_a_python_float(t04, dtype, m):
    X, W, b = np.ones((2, m), dtype=dtype), np.ones((3, 2), dtype=dtype), np.ones((3, 1), dtype=dtype)
    loss, dW, db = t04.linear_grads_numpy(X, W, b)
    assert type(loss) is float and loss == 27.0 * m  # every entry of Z is 1 + 1 + 1
    assert dW.dtype == dtype and db.dtype == dtype


# =========================================================================== 07_hvp_challenge: scales of the spectrum


@given(exponent=st.integers(-14, 8), seed=st.integers(0, 999), sign=st.sampled_from([1.0, -1.0]))
def test_largest_eigenvalue_is_relative_at_every_scale(t07, exponent, seed, sign):
    """The stopping rule is relative and only an exact zero vector gives 0.0, so scaling H scales the estimate."""
    gen = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(4, 4, generator=gen, dtype=torch.float64))
    scale = 10.0**exponent
    H = Q @ torch.diag(torch.tensor([sign, 0.5, 0.1, -0.01], dtype=torch.float64) * scale) @ Q.T
    result = t07.largest_eigenvalue(lambda q: H @ q, 4, seed=seed)
    assert type(result) is float and result == pytest.approx(sign * scale, rel=1e-6, abs=0.0)
