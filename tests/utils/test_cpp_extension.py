"""mini.utils.cpp_extension.load_inline: compile, call, cache, error mapping, OpenMP."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
import warnings

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
    # one rounding of 2.5*x + y, or two (numpy's); a compiler may fuse them into one FMA (it
    # does on arm64): up to an ulp of the terms apart, which near cancellation is far more
    # than an ulp of the result
    tol = 2 * np.finfo(np.float32).eps * (np.abs(2.5 * x) + np.abs(y))
    assert np.all(np.abs(out.astype(np.float64) - (2.5 * x.astype(np.float64) + y)) <= tol)
    assert saxpy_ext.count(x) == 100_003
    assert "out = alpha*x + y" in saxpy_ext.saxpy.__doc__


def _forbid_compiling(monkeypatch):
    """Make any compiler run (or build) fail the test: a cache hit must not start one."""
    def no_build(*a, **k):
        raise AssertionError("compiled although a cached build exists")
    monkeypatch.setattr(ce, "_build", no_build)
    monkeypatch.setattr(ce.subprocess, "run", no_build)


def test_same_source_returns_the_same_module(saxpy_ext, monkeypatch):
    _forbid_compiling(monkeypatch)
    again = load_inline("saxpy_ext", SAXPY, functions={"saxpy": "out = alpha*x + y", "count": ""})
    assert again is saxpy_ext


def test_cache_hit_on_disk_does_not_recompile(tmp_path, monkeypatch):
    src = "int twice(int x) { return 2 * x; }\n"
    m1 = load_inline("twice_ext", src, functions=["twice"], build_directory=tmp_path)
    assert m1.twice(21) == 42
    built = list(tmp_path.glob("twice_ext_*/twice_ext_*.so"))
    assert len(built) == 1
    mtime = built[0].stat().st_mtime_ns
    # forget the in-process memo (as a new kernel would) and forbid compiling
    monkeypatch.setattr(ce, "_MODULES", {})
    _forbid_compiling(monkeypatch)
    m2 = load_inline("twice_ext", src, functions=["twice"], build_directory=tmp_path)
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
    monkeypatch.setitem(ce._OPENMP, ce.compiler(), None)
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
    """pybind11=False: Python.h only, the source defines its own module (the JIT's generated
    kernels are built this way: no pybind11 headers to compile)."""
    mod = load_inline("capi_ext", C_API, pybind11=False, build_directory=tmp_path)
    assert mod.twice(21.0) == 42.0
    assert load_inline("capi_ext", C_API, pybind11=False, build_directory=tmp_path) is mod
    other = load_inline("capi_ext", C_API + "\n// another source\n", pybind11=False,
                        build_directory=tmp_path)
    assert other is not mod and other.twice(1.5) == 3.0      # its own module name


def test_a_c_api_module_takes_no_functions_list(tmp_path):
    with pytest.raises(ValueError, match="pybind11=False"):
        load_inline("capi_bad", C_API, functions=["twice"], pybind11=False,
                    build_directory=tmp_path)


def test_a_c_api_compile_error_names_the_line(tmp_path):
    src = "static int f() {\n    return undefined_name;\n}\n"
    with pytest.raises(CompileError) as info:
        load_inline("capi_broken", src, pybind11=False, build_directory=tmp_path)
    assert info.value.lines == [2]


# --------------------------------------------------------------------------- OpenMP flags
# The same candidates as setup.py, tried in order against a faked compiler probe: which
# flags each kind of compiler ends up with, and what the build command then contains.

GCC_LIKE = (["-fopenmp"], ["-fopenmp"])
APPLE_CLANG = (["-Xpreprocessor", "-fopenmp"], ["-lomp"])


def _fake_compiler(monkeypatch, accepts, cache):
    """A compiler whose OpenMP probe succeeds only for flags ``accepts(cflags, ldflags)``
    allows; its real builds are recorded and fail (the command is what is checked).
    ``cache`` is its own cache directory (where probe results are remembered)."""
    probes, builds = [], []
    monkeypatch.setenv("MINI_EXTENSIONS_DIR", str(cache))

    def probe(cxx, cflags, ldflags):
        probes.append((list(cflags), list(ldflags)))
        return accepts(cflags, ldflags)

    def run(cmd, **kwargs):
        builds.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "")
    monkeypatch.setattr(ce, "_openmp_flags_work", probe)
    monkeypatch.setattr(ce, "_OPENMP", {})
    monkeypatch.setattr(ce.subprocess, "run", run)
    monkeypatch.setattr(ce, "_compiler_id", lambda cxx: "fake compiler 1.0")
    monkeypatch.setenv("CXX", "fake-c++")
    monkeypatch.setattr(ce, "_WARNED", [False])
    return probes, builds


def _build_command(tmp_path, name="omp_flags_ext"):
    with pytest.raises(CompileError) as info:
        load_inline(name, "int f() { return 1; }", functions=["f"], build_directory=tmp_path)
    return info.value.command


def test_gcc_gets_fopenmp(tmp_path, monkeypatch):
    probes, _ = _fake_compiler(monkeypatch, lambda c, l: c == ["-fopenmp"], tmp_path / "cache")
    assert ce.openmp_flags() == GCC_LIKE
    assert probes == [GCC_LIKE]                  # the first candidate worked: nothing else tried
    cmd = _build_command(tmp_path)
    assert cmd.count("-fopenmp") == 2 and "-Xpreprocessor" not in cmd


def test_apple_clang_gets_xpreprocessor_and_libomp(tmp_path, monkeypatch):
    # Apple's clang rejects -fopenmp; with libomp installed, -Xpreprocessor -fopenmp -lomp works
    probes, _ = _fake_compiler(monkeypatch, lambda c, l: "-Xpreprocessor" in c, tmp_path / "cache")
    assert ce.openmp_flags() == APPLE_CLANG
    assert probes[:2] == [GCC_LIKE, APPLE_CLANG]
    cmd = _build_command(tmp_path)
    i = cmd.index("-Xpreprocessor")
    assert cmd[i + 1] == "-fopenmp" and "-lomp" in cmd
    assert cmd.index("-lomp") > cmd.index("-o")  # a link flag, after the source and output


def test_keg_only_libomp_is_found_on_macos(tmp_path, monkeypatch):
    # Homebrew's libomp is not on the default paths; conda's is under $CONDA_PREFIX
    prefix = tmp_path / "libomp"
    (prefix / "include").mkdir(parents=True)
    (prefix / "include" / "omp.h").write_text("")
    monkeypatch.setenv("CONDA_PREFIX", str(prefix))
    lib = str(prefix / "lib")
    monkeypatch.setattr(sys, "platform", "darwin")
    _fake_compiler(monkeypatch, lambda c, l: f"-L{lib}" in l, tmp_path / "cache")
    cflags, ldflags = ce.openmp_flags()
    assert cflags == ["-Xpreprocessor", "-fopenmp", f"-I{prefix / 'include'}"]
    assert ldflags == [f"-L{lib}", "-lomp", f"-Wl,-rpath,{lib}"]
    monkeypatch.setattr(sys, "platform", "linux")
    assert len(ce._openmp_candidates()) == 2     # the prefixes are tried on macOS only


def test_no_openmp_builds_serially_and_says_what_to_do_once(tmp_path, monkeypatch):
    probes, builds = _fake_compiler(monkeypatch, lambda c, l: False, tmp_path / "cache")
    monkeypatch.setattr(sys, "platform", "darwin")
    assert ce.openmp_flags() is None and ce.openmp_available() is False
    with pytest.warns(RuntimeWarning) as record:
        cmd = _build_command(tmp_path, "serial_a")
    text = str(record[0].message)
    assert "no OpenMP" in text and "-Xpreprocessor -fopenmp -lomp" in text
    assert "brew install libomp" in text
    assert "-fopenmp" not in cmd
    assert not list((tmp_path / "cache").glob(".openmp-*"))  # "none" is not remembered
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # once per process, not once per build
        _build_command(tmp_path, "serial_b")
    assert len(builds) == 2


def test_the_openmp_flags_are_part_of_the_cache_key(tmp_path, monkeypatch):
    # a serial build made before libomp was installed is not reused once OpenMP works
    _fake_compiler(monkeypatch, lambda c, l: False, tmp_path / "cache")
    monkeypatch.setattr(ce, "_WARNED", [True])
    first = _build_command(tmp_path, "key_ext")
    ce._OPENMP.clear()                        # a new process, after OpenMP was installed
    monkeypatch.setattr(ce, "_openmp_flags_work", lambda cxx, c, l: c == ["-fopenmp"])
    second = _build_command(tmp_path, "key_ext")
    assert "-fopenmp" not in first and "-fopenmp" in second
    assert len(list(tmp_path.glob("key_ext_*"))) == 2     # two builds, two cache entries


def test_the_probe_runs_once_per_compiler_not_once_per_process(tmp_path, monkeypatch):
    probes, _ = _fake_compiler(monkeypatch, lambda c, l: "-Xpreprocessor" in c, tmp_path / "cache")
    assert ce.openmp_flags() == APPLE_CLANG
    n = len(probes)
    ce._OPENMP.clear()                        # a new process (the grader's sandbox)
    assert ce.openmp_flags() == APPLE_CLANG and len(probes) == n   # read back, not probed
    # a libomp appearing where the candidates look changes them: probed anew
    prefix = tmp_path / "brew"
    (prefix / "include").mkdir(parents=True)
    (prefix / "include" / "omp.h").write_text("")
    monkeypatch.setenv("CONDA_PREFIX", str(prefix))
    monkeypatch.setattr(sys, "platform", "darwin")
    ce._OPENMP.clear()
    assert ce.openmp_flags() == APPLE_CLANG and len(probes) > n


def test_the_real_gcc_gets_fopenmp():
    # the probe with the real compiler (gcc on Linux: the first candidate works)
    if "clang" in ce._compiler_id(ce.compiler()).lower():
        pytest.skip("this check is about gcc")
    assert ce.openmp_flags() == GCC_LIKE


# --------------------------------------------------------------------------- Windows

def test_imports_and_builds_without_fcntl(tmp_path):
    # Windows has no fcntl: importing mini.utils.cpp_extension must not need it
    code = textwrap.dedent(f"""
        import sys
        sys.modules["fcntl"] = None          # `import fcntl` now raises ImportError
        from mini.utils import cpp_extension as ce
        assert ce.fcntl is None
        ext = ce.load_inline("no_fcntl_ext", "int three() {{ return 3; }}", functions=["three"],
                             build_directory={str(tmp_path)!r})
        print(ext.three())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "3"


def test_the_build_lock_uses_msvcrt_where_there_is_no_fcntl(tmp_path, monkeypatch):
    calls = []

    class FakeMsvcrt(types.SimpleNamespace):
        LK_LOCK, LK_UNLCK = 1, 0

        def locking(self, fd, mode, nbytes):
            calls.append((mode, nbytes))
            if len(calls) == 1:
                raise OSError("still locked after 10 s")   # LK_LOCK gave up: try again
    monkeypatch.setattr(ce, "fcntl", None)
    monkeypatch.setattr(ce, "msvcrt", FakeMsvcrt())
    with ce._exclusive_lock(tmp_path / "x.lock"):
        assert calls == [(1, 1), (1, 1)]
    assert calls[-1] == (0, 1)
    with ce._exclusive_lock(tmp_path / "x.lock"):
        pass
    assert calls[-2:] == [(1, 1), (0, 1)]
