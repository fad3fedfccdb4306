"""mini.utils.cpp_extension.load_inline: compile, call, cache, error mapping, OpenMP."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from mini.utils import cpp_extension as ce
from mini.utils.cpp_extension import CompileError, load_inline

SAXPY = r"""
// out = alpha * x + y, in parallel
void saxpy(float alpha, py::array_t<float> x, py::array_t<float> y, py::array_t<float> out) {
    const float* px = x.data();
    const float* py_ = y.data();
    float* po = out.mutable_data();
    const int64_t n = x.size();
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) po[i] = alpha * px[i] + py_[i];
}
int64_t count(py::array_t<float> x) { return x.size(); }
"""


@pytest.fixture(scope="module")
def saxpy_ext():
    return load_inline("saxpy_ext", SAXPY, functions={"saxpy": "out = alpha*x + y", "count": ""})


def test_compile_and_call(saxpy_ext):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(100_003).astype(np.float32)
    y = rng.standard_normal(100_003).astype(np.float32)
    out = np.empty_like(x)
    saxpy_ext.saxpy(2.5, x, y, out)
    np.testing.assert_allclose(out, 2.5 * x + y, rtol=1e-6)
    assert saxpy_ext.count(x) == 100_003
    assert "out = alpha*x + y" in saxpy_ext.saxpy.__doc__


def test_same_source_returns_the_same_module(saxpy_ext):
    t0 = time.perf_counter()
    again = load_inline("saxpy_ext", SAXPY, functions={"saxpy": "out = alpha*x + y", "count": ""})
    assert again is saxpy_ext
    assert time.perf_counter() - t0 < 0.05


def test_cache_hit_on_disk_does_not_recompile(tmp_path, monkeypatch):
    src = "int twice(int x) { return 2 * x; }\n"
    m1 = load_inline("twice_ext", src, functions=["twice"], build_directory=tmp_path)
    assert m1.twice(21) == 42
    built = list(tmp_path.glob("twice_ext_*/twice_ext_*.so"))
    assert len(built) == 1
    mtime = built[0].stat().st_mtime_ns
    # forget the in-process memo (as a new kernel would) and forbid compiling
    monkeypatch.setattr(ce, "_MODULES", {})

    def no_build(*a, **k):
        raise AssertionError("recompiled although a cached build exists")
    monkeypatch.setattr(ce, "_build", no_build)
    t0 = time.perf_counter()
    m2 = load_inline("twice_ext", src, functions=["twice"], build_directory=tmp_path)
    assert time.perf_counter() - t0 < 1.0
    assert m2.twice(5) == 10
    assert built[0].stat().st_mtime_ns == mtime


def test_changed_source_or_flags_rebuild(tmp_path):
    src = "int k() { return MINI_TEST_K; }"
    a = load_inline("k_ext", src, functions=["k"], build_directory=tmp_path,
                    extra_cflags=["-DMINI_TEST_K=1"])
    b = load_inline("k_ext", src + "\n", functions=["k"], build_directory=tmp_path,
                    extra_cflags=["-DMINI_TEST_K=2"])   # same name, new source and flags
    assert (a.k(), b.k()) == (1, 2)
    assert len(list(tmp_path.glob("k_ext_*"))) == 2


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MINI_EXTENSIONS_DIR", str(tmp_path / "ext"))
    assert ce.cache_dir() == tmp_path / "ext"
    assert (tmp_path / "ext").is_dir()


def test_compile_error_names_the_student_line(tmp_path):
    src = ("// a comment on line 1\n"
           "float add_one(float x) {\n"
           "    float y = x + 1.0f;\n"
           "    return y + undefined_name;\n"
           "}\n")
    with pytest.raises(CompileError) as info:
        load_inline("broken_ext", src, functions=["add_one"], build_directory=tmp_path)
    err = info.value
    assert err.lines == [4]
    text = str(err)
    assert "line 4" in text and "undefined_name" in text
    assert "return y + undefined_name;" in text   # the offending line is quoted
    assert "line 5" not in text


def test_compile_error_for_a_function_the_source_lacks(tmp_path):
    with pytest.raises(CompileError) as info:
        load_inline("missing_ext", "int present() { return 1; }",
                    functions=["present", "absent"], build_directory=tmp_path)
    assert "absent" in str(info.value)
    assert "defines no function" in str(info.value)


def test_bad_names_are_rejected():
    with pytest.raises(ValueError, match="identifier"):
        load_inline("not a name", "int f() { return 0; }", functions=["f"])
    with pytest.raises(ValueError, match="identifier"):
        load_inline("ok_name", "int f() { return 0; }", functions=["f(x)"])


@pytest.mark.skipif(not ce.openmp_available(), reason="compiler without OpenMP")
def test_openmp_threads_are_visible():
    src = r"""
    int team_size() {
        int n = 0;
        #pragma omp parallel
        {
            #pragma omp single
            n = omp_get_num_threads();
        }
        return n;
    }
    """
    ext = load_inline("team_ext", src, functions=["team_size"])
    default = ce.get_max_threads()
    assert default >= 1
    if "OMP_NUM_THREADS" not in os.environ:
        assert default == len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else True
    try:
        ce.set_num_threads(3)
        assert ext.team_size() == 3      # one OpenMP runtime for all extensions
    finally:
        ce.set_num_threads(default)
    assert ext.team_size() == default


def test_set_num_threads_rejects_zero():
    with pytest.raises(ValueError):
        ce.set_num_threads(0)


def test_without_openmp_it_builds_serially_and_says_so_once(tmp_path, monkeypatch):
    monkeypatch.setitem(ce._OPENMP, ce.compiler(), False)
    monkeypatch.setattr(ce, "_WARNED", [False])
    src = r"""
    int serial_sum(int n) {
        int s = 0;
        #pragma omp parallel for reduction(+ : s)
        for (int i = 0; i < n; ++i) s += i;
    #ifdef _OPENMP
        return -1;
    #else
        return s;
    #endif
    }
    """
    with pytest.warns(RuntimeWarning, match="no OpenMP"):
        ext = load_inline("serial_ext", src, functions=["serial_sum"], build_directory=tmp_path)
    assert ext.serial_sum(10) == 45
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_inline("serial_ext2", src, functions=["serial_sum"], build_directory=tmp_path)


# --------------------------------------------------------------------------- pybind11=False

C_API = r"""
static PyObject* twice(PyObject* self, PyObject* arg) {
    double x = PyFloat_AsDouble(arg);
    if (x == -1.0 && PyErr_Occurred()) return NULL;
    return PyFloat_FromDouble(2 * x);
}
static PyMethodDef methods[] = {{"twice", twice, METH_O, "2 x"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef definition = {PyModuleDef_HEAD_INIT, MINI_MODULE_NAME, NULL, -1, methods};
PyMODINIT_FUNC MINI_MODULE_INIT(void) { return PyModule_Create(&definition); }
"""


def test_a_plain_c_api_module_builds_without_pybind11(tmp_path):
    """pybind11=False: Python.h only, the source defines its own module; a build takes a
    fraction of what a pybind11 one takes (the JIT's generated kernels rely on it)."""
    t0 = time.perf_counter()
    mod = load_inline("capi_ext", C_API, pybind11=False, build_directory=tmp_path)
    assert mod.twice(21.0) == 42.0
    assert load_inline("capi_ext", C_API, pybind11=False, build_directory=tmp_path) is mod
    other = load_inline("capi_ext", C_API + "\n// another source\n", pybind11=False,
                        build_directory=tmp_path)
    assert other is not mod and other.twice(1.5) == 3.0      # its own module name
    assert time.perf_counter() - t0 < 120                    # (no timing claim: just finishes)


def test_a_c_api_module_takes_no_functions_list(tmp_path):
    with pytest.raises(ValueError, match="pybind11=False"):
        load_inline("capi_bad", C_API, functions=["twice"], pybind11=False,
                    build_directory=tmp_path)


def test_a_c_api_compile_error_names_the_line(tmp_path):
    src = "static int f() {\n    return undefined_name;\n}\n"
    with pytest.raises(CompileError) as info:
        load_inline("capi_broken", src, pybind11=False, build_directory=tmp_path)
    assert info.value.lines == [2]
