"""Chapter 04's CUDA exercises as slots, and mini's cuda device running them.

- each slot's reference holds its kernel (``kernels.source`` reads it there) and passes the
  sanitizer;
- the device runs a student's registered kernels for add, matmul, whole-array sum and
  transposes, and a student's ``03.compact`` for strided views (it used to bypass it);
- while a slot runs mini's reference, the device's own kernels stand in (no copies);
- a slot that is a stub (not written yet) leaves the work to the host, and the answer is
  still right; a slot that returns the wrong thing is named in the error;
- a student copy of chapter 04 has a working cuda device without the kernels that would give
  the answers away, chapter 05's copy has all of them.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mini
from mini import exercises
from mini.backends.cuda import emulator, kernels
from mini.backends.cuda import exercises as cuda_ex
from cuda_helpers import emulated, requires_posix

pytestmark = requires_posix


@pytest.fixture(scope="module")
def dev(cuda):
    return cuda


@pytest.fixture
def registered():
    """Register functions into slots for one test; unregister after."""
    done = []

    def register(slot, fn):
        exercises.implement(slot)(fn)
        done.append(slot)
    yield register
    for slot in done:
        exercises.unregister(slot)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_every_exercise_kernel_comes_from_its_slot():
    for name, slot in kernels.SLOTS.items():
        src = kernels.source(name)
        assert kernels.MARKER in src and f"launch_{name}(" in src
        assert src == kernels.source_of(exercises.reference(slot))
        assert not (kernels.KERNEL_DIR / f"{name}.cu").exists(), "one copy of each answer"
    assert kernels.available("transpose_naive") and "transpose_naive" not in kernels.SLOTS


@pytest.mark.parametrize("slot", sorted(kernels.SLOTS.values()))
def test_references_run_clean_on_the_emulator(slot):
    fn = exercises.reference(slot)
    x = rand(37, 45, seed=1)
    args = {"04.cuda_add": (x, x), "04.cuda_transpose_tiled": (x,)}.get(
        slot, (x, rand(45, 20, seed=2)) if "matmul" in slot else (x,))
    with emulated(), emulator.check(schedules=2) as run:
        got = fn(*args)
    assert run.ok, run
    want = {"04.cuda_add": lambda: x + x, "04.cuda_transpose_tiled": lambda: x.T}.get(
        slot, (lambda: args[0] @ args[1]) if "matmul" in slot else (lambda: x.sum(dtype=np.float64)))()
    # float32 sums of at most 45 x 37 terms in another order than numpy's
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.sqrt(x.size))


def test_the_device_runs_the_students_kernels(dev, registered):
    calls = []

    def spy(slot):
        ref = exercises.reference(slot)

        def student(*args, **kwargs):
            calls.append(slot)
            return ref(*args, **kwargs)
        return student

    for slot in ("04.cuda_add", "04.cuda_matmul_tiled", "04.cuda_block_sum_shuffle",
                 "04.cuda_transpose_tiled"):
        registered(slot, spy(slot))
    a, b = rand(6, 5, seed=3), rand(5, 4, seed=4)
    ta, tb = mini.tensor(a, device=dev), mini.tensor(b, device=dev)
    np.testing.assert_array_equal((ta + ta).numpy(), a + a)
    np.testing.assert_array_equal(ta.T.contiguous().numpy(), a.T)
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ta.sum().item(), a.sum(dtype=np.float64), rtol=1e-5)
    assert calls == ["04.cuda_add", "04.cuda_transpose_tiled", "04.cuda_matmul_tiled",
                     "04.cuda_block_sum_shuffle"]
    # a sum over some axes and other elementwise ops stay the device's own kernels
    calls.clear()
    np.testing.assert_allclose(ta.sum(dim=1).numpy(), a.sum(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal((ta * ta).numpy(), a * a)
    assert calls == []


def test_the_device_compacts_through_03_compact(dev, registered):
    """A strided view that is not a transpose goes through the student's 03.compact."""
    seen = []
    ref = exercises.reference("03.compact")

    def my_compact(buffer, shape, strides, offset):
        seen.append(tuple(shape))
        return ref(buffer, shape, strides, offset)

    registered("03.compact", my_compact)
    a = rand(4, 6, seed=5)
    t = mini.tensor(a, device=dev)
    np.testing.assert_array_equal(t[:, ::2].contiguous().numpy(), a[:, ::2])
    np.testing.assert_array_equal((t[:, ::2] + 1.0).numpy(), a[:, ::2] + 1)
    assert seen and seen[0] == (4, 3)


def test_reference_slots_use_the_devices_own_kernels(dev, monkeypatch):
    """While a slot runs mini's reference, the fast path launches the device's kernel on its
    buffers: the reference (which would build its module and copy to fresh device memory)
    is not called."""
    def fail(*args, **kwargs):
        raise AssertionError("a slot's reference ran instead of the device's kernel")
    monkeypatch.setattr(cuda_ex, "load_inline", fail)       # what every reference calls first
    monkeypatch.setattr(cuda_ex, "DeviceSession", fail)
    launched = []
    for name in ("ewise_kernel", "matmul_kernel", "sum_kernel", "transpose_kernel"):
        orig = getattr(dev, name)
        monkeypatch.setattr(dev, name, lambda *a, _o=orig, _n=name, **k: (launched.append(_n), _o(*a, **k))[1])
    a = rand(33, 20, seed=6)
    ta = mini.tensor(a, device=dev)
    np.testing.assert_array_equal((ta + ta).numpy(), a + a)
    np.testing.assert_allclose((ta @ ta.T).numpy(), a @ a.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ta.sum().item(), a.sum(dtype=np.float64), rtol=1e-5)
    assert launched == ["ewise_kernel", "transpose_kernel", "matmul_kernel", "sum_kernel"]
    with exercises.fast_paths(False):       # no fast paths: the reference runs (and fails here)
        with pytest.raises(AssertionError, match="reference ran"):
            ta + ta


def test_a_stub_slot_leaves_the_work_to_the_host(dev, registered):
    def not_yet(*args, **kwargs):
        raise NotImplementedError()      # the template of a fresh notebook
    for slot in ("04.cuda_add", "04.cuda_matmul_tiled", "04.cuda_block_sum_shuffle",
                 "04.cuda_transpose_tiled"):
        registered(slot, not_yet)
    a = rand(7, 9, seed=7)
    t = mini.tensor(a, device=dev)
    np.testing.assert_array_equal((t + t).numpy(), a + a)
    np.testing.assert_array_equal(t.T.contiguous().numpy(), a.T)
    np.testing.assert_allclose((t @ t.T).numpy(), a @ a.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t.sum().item(), a.sum(dtype=np.float64), rtol=1e-5)


def test_a_slot_that_returns_the_wrong_thing_is_named(dev, registered):
    registered("04.cuda_add", lambda a, b, blocks=None, threads=256: (a + b).astype(np.float64))
    t = mini.tensor(rand(3, seed=8), device=dev)
    with pytest.raises(TypeError, match=r"04\.cuda_add must return a numpy array of 3 float32"):
        t + t
    registered("04.cuda_block_sum_shuffle", lambda x, blocks=None: [1.0])
    with pytest.raises(TypeError, match=r"04\.cuda_block_sum_shuffle must return a float"):
        t.sum()


def test_a_students_kernel_bug_shows_up_in_minis_ops(dev, registered):
    """mini runs on the student's code, bugs included: the sanitizer reports them."""
    from grader.mistakes.cuda_kernels import mistake_source, slot_variant
    registered("04.cuda_add", slot_variant("add", mistake_source("add_no_bounds_check")))
    a = rand(1000, seed=9)
    t = mini.tensor(a, device=dev)
    with emulated(), emulator.check() as run:
        (t + t).numpy()
    assert run.of_kind("out_of_bounds"), run
    assert "missing" not in str(run) and "out-of-bounds read of global memory" in str(run)


def _in_copy(tmp_path, chapter: int, code: str) -> str:
    from grader.course import default_mini_src
    from grader.solutions import strip_package
    root = tmp_path / f"release{chapter}"
    strip_package(default_mini_src(), root / "mini", chapter)
    proc = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(root)!r})\n"
                           + textwrap.dedent(code)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


_DEVICE_IN_A_COPY = """
    import warnings; warnings.simplefilter("ignore")
    import numpy as np, mini
    assert mini.__file__.startswith(sys.path[0]), mini.__file__
    from mini.backends import get_backend
    be = get_backend("cuda")
    print(sorted(n for n in dir(be.ext) if n.startswith("launch")))
    a = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    t = mini.tensor(a, device="cuda")
    assert np.array_equal((t + t).numpy(), a + a) and np.array_equal((t * t).relu().numpy(), np.maximum(a * a, 0))
    assert np.allclose((t @ t.T).numpy(), a @ a.T) and t.sum().item() == a.sum()
    assert np.array_equal(t.T.contiguous().numpy(), a.T) and np.allclose(t.max(dim=1).values.numpy(), a.max(1))
    print("device works")
"""


@pytest.mark.slow
def test_the_device_in_student_copies_of_chapters_04_and_05(tmp_path):
    out4 = _in_copy(tmp_path, 4, _DEVICE_IN_A_COPY)
    assert "device works" in out4 and "['launch_compact', 'launch_im2col']" in out4
    out5 = _in_copy(tmp_path, 5, _DEVICE_IN_A_COPY)
    assert "device works" in out5
    for launcher in ("launch_ewise", "launch_row_reduce", "launch_matmul", "launch_transpose_tiled"):
        assert launcher in out5
