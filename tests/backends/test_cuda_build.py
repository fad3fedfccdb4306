"""Building CUDA sources: GPU detection, the emulator's build, compiler errors mapped to
the student's lines, and NVIDIA's nvcc accepting every kernel the course ships (so that
CUDA only the emulator accepts is caught; nvcc compiles without a GPU or driver)."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

from grader.mistakes.cuda_kernels import CUDA_MISTAKES, SCENARIOS, mistake_source
from mini.backends.cuda import build, kernels
from mini.utils import cpp_extension as ce
from cuda_helpers import emulated, load_emulated, requires_posix

NVCC = build.nvcc_path()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: the kernels are not checked "
                                                     "against NVIDIA's compiler on this machine")
_PLAIN_PREAMBLE = "#include <cstdint>\n#include <vector>\n"


def _nvcc(tmp_path, source, name="k"):
    path = tmp_path / f"{name}.cu"
    path.write_text(source)
    r = subprocess.run([NVCC, "-arch=sm_90", "-std=c++17", "-c", str(path), "-o", str(tmp_path / f"{name}.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]


@needs_nvcc
def test_nvcc_compiles_every_reference_and_backend_kernel(tmp_path):
    src = _PLAIN_PREAMBLE + "\n".join(kernels.source(n) for n in kernels.EXERCISES) + kernels.source("backend")
    _nvcc(tmp_path, src)


@needs_nvcc
def test_nvcc_compiles_every_catalogue_kernel(tmp_path):
    variants = [("ref_" + e, e, None) for e in SCENARIOS]
    variants += [(m.id, m.exercise, mistake_source(m)) for m in CUDA_MISTAKES]
    src, launchers = kernels.variants_source(variants, helpers=False)
    assert len(launchers) == len(SCENARIOS) + len(CUDA_MISTAKES)
    _nvcc(tmp_path, _PLAIN_PREAMBLE + src)


@needs_nvcc
@pytest.mark.slow
def test_nvcc_build_plan_of_the_device_module_compiles(tmp_path):
    """The translation unit load_inline gives nvcc on a GPU machine (pybind11, the device
    helpers, the bindings) compiles; only -arch=native (which needs a GPU) and linking
    are left out."""
    src = kernels.module_source(("matmul_tiled",), backend=True)
    funcs = ce._normalize_functions(list(kernels.HELPER_FUNCTIONS) + ["launch_matmul_tiled"]
                                    + list(kernels.BACKEND_FUNCTIONS))
    plan = build.plan_cuda_build("devmod", "", src, ce._bindings("devmod", funcs), [], [], [], emulate=False)
    assert plan.mode == "nvcc" and "<<<" in plan.source and "mini_cuda_emulator" not in plan.source
    path = tmp_path / "plan.cu"
    path.write_text(plan.source)
    cmd = [c for c in plan.commands[0] if c not in ("-arch=native", "-shared", "-lcudart")]
    cmd = [c.replace("{src}", str(path)).replace("{out}", str(tmp_path / "plan.o")) for c in cmd]
    r = subprocess.run(cmd[:1] + ["-arch=sm_90", "-c"] + cmd[1:], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]


def test_nvcc_messages_map_to_the_students_lines():
    log = ('<cuda>(2): error: identifier "undefined_thing" is undefined\n'
           '      p[0] = undefined_thing;\n'
           '<cell>(1): warning #177-D: variable "x" was declared but never referenced\n')
    sources = {"<cell>": ["int x;"], "<cuda>": ["__global__ void k(float* p) {", "    p[0] = undefined_thing;"]}
    issues = ce._parse_log(log, sources["<cell>"], [], sources)
    assert [(i.file, i.line, i.kind) for i in issues] == [("<cuda>", 2, "error"), ("<cell>", 1, "warning")]
    assert issues[0].source_line == "    p[0] = undefined_thing;"
    text = ce._format_error("k", issues, log)
    assert "<cuda> line 2: identifier" in text and "p[0] = undefined_thing;" in text


def test_detection_follows_the_environment(monkeypatch):
    monkeypatch.setenv(build.EMULATE_ENV, "1")
    assert build.use_emulator()
    monkeypatch.setenv(build.EMULATE_ENV, "0")
    assert build.use_emulator() == (not build.gpu_available())
    if not build.gpu_available():
        assert build.gpu_reason()          # says why: no nvcc, no driver, no GPU


@requires_posix
def test_compile_errors_in_cuda_sources_name_their_lines():
    src = "__global__ void k(float* p) {\n    p[threadIdx.x] = undefined_thing;\n}\n"
    with pytest.raises(ce.CompileError) as e:
        load_emulated("broken_cuda", src, [])
    (issue,) = [i for i in e.value.issues if i.kind == "error"]
    assert (issue.file, issue.line) == ("<cuda>", 2)
    assert "undefined_thing" in issue.message and issue.source_line.strip().startswith("p[threadIdx.x]")
    assert "<cuda> line 2" in str(e.value)


@requires_posix
def test_rewrite_errors_are_compile_errors():
    src = "__global__ void k() {\n    __shared__ float s[4] = {0};\n}\n"
    with pytest.raises(ce.CompileError, match="initializer") as e:
        load_emulated("bad_shared", src, [])
    assert e.value.issues[0].line == 2 and e.value.issues[0].file == "<cuda>"


@requires_posix
def test_cuda_and_cpp_sources_build_one_module():
    """cpp_sources holds declarations (as in torch.utils.cpp_extension) or more host code;
    functions defined in either are bound; the module caches like any other."""
    cpp = "float twice(float x);\nfloat half(float x) { return x / 2; }\n"
    cuda = ("__global__ void k2(float* p) { p[0] *= 2; }\n"
            "float twice(float x) {\n    float* d; cudaMalloc(&d, 4);\n"
            "    cudaMemcpy(d, &x, 4, cudaMemcpyHostToDevice);\n    k2<<<1, 1>>>(d);\n"
            "    cudaMemcpy(&x, d, 4, cudaMemcpyDeviceToHost);\n    cudaFree(d);\n    return x;\n}\n")
    m = load_emulated("two_sources", cuda, ["twice", "half"], cpp_sources=cpp)
    assert m.twice(3.0) == 6.0 and m.half(3.0) == 1.5
    with emulated():
        again = ce.load_inline("two_sources", cpp, cuda_sources=cuda, functions=["twice", "half"])
    assert again is m
    unchecked = load_emulated("two_sources", cuda, ["twice", "half"], cpp_sources=cpp, sanitize=False)
    assert unchecked is not m and unchecked.twice(np.float32(1.5)) == 3.0


@requires_posix
def test_a_prebuilt_runtime_is_used_from_its_folder(tmp_path, monkeypatch):
    """A grading sandbox can bring the runtime read-only instead of building it."""
    import shutil
    built = build.runtime_library()
    shutil.copy(built, tmp_path / built.name)
    monkeypatch.setenv(build.RUNTIME_DIR_ENV, str(tmp_path))
    build._runtime_library.cache_clear()
    try:
        assert build.runtime_library() == tmp_path / built.name
    finally:
        monkeypatch.delenv(build.RUNTIME_DIR_ENV)
        build._runtime_library.cache_clear()
    assert build.runtime_library() == built


# --------------------------------------------------------------------------- plain bindings

PLAIN = r"""
#include <stdexcept>
__global__ void fill(float* p, float v, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = v;
}
// a launcher of plain numbers: bound with ctypes, no pybind11
int launch_fill(std::uintptr_t p, float v, int n) {
    fill<<<1, 32>>>((float*)p, v, n);
    return (int)cudaGetLastError();
}
static long long
twice(const long long x) { return 2 * x; }
double half(double x) noexcept { return x / 2; }
void nothing() {}
int refuse(int code) {
    if (code == 1) throw std::invalid_argument("code 1 is invalid");
    if (code == 2) throw std::out_of_range("code 2 is out of range");
    if (code == 3) throw std::runtime_error("code 3 failed");
    return code;
}
"""


@requires_posix
def test_plain_functions_are_bound_with_ctypes_and_behave_like_pybind11():
    from mini.backends.cuda import plain
    functions = ["launch_fill", "twice", "half", "nothing", "refuse"]
    sigs = plain.plain_signatures(["", PLAIN], functions)
    assert sigs is not None and sigs["twice"].cpp() == "long long twice(long long x)"
    assert sigs["launch_fill"].params == (("uintptr_t", "p"), ("float", "v"), ("int", "n"))
    m = load_emulated("plain_demo", PLAIN, functions)
    assert "bound with ctypes" in m.launch_fill.__doc__
    assert m.twice(21) == 42 and m.twice(np.int64(-3)) == -6 and m.half(3) == 1.5
    assert m.nothing() is None
    with pytest.raises(ValueError, match="code 1 is invalid"):
        m.refuse(1)
    with pytest.raises(IndexError, match="out of range"):
        m.refuse(2)
    with pytest.raises(RuntimeError, match="code 3 failed"):
        m.refuse(3)
    assert m.refuse(7) == 7
    with pytest.raises(TypeError, match=r"argument 1 \(int code\)"):
        m.refuse(1.5)
    with pytest.raises(TypeError, match="does not fit in a C\\+\\+ int"):
        m.refuse(2 ** 31)
    with pytest.raises(TypeError, match="takes 1 positional argument"):
        m.refuse(1, 2)
    with pytest.raises(TypeError, match="positional"):
        m.refuse(code=1)
    with pytest.raises(TypeError, match="must be a number"):
        m.half("1")
    dev = kernels.DeviceSession()
    with dev:
        p = dev.empty(40)
        dev.check(m.launch_fill(p, 2.5, 40))
        np.testing.assert_array_equal(dev.to_host(p), np.full(40, 2.5, np.float32))


@pytest.mark.parametrize("source, functions", [
    ("int f(py::array_t<float> a) { return 0; }", ["f"]),                 # pybind11 types
    ("int f(float* p) { return 0; }", ["f"]),                              # a pointer
    ("int f(int a, int b = 2) { return a; }", ["f"]),                      # a default argument
    ("int f(int a) { return a; }\nint f(float a) { return 1; }", ["f"]),   # overloads
    ("template <int N> int f(int a) { return a; }", ["f"]),                # a template
    ("int f(int a);", ["f"]),                                              # declared only
])
def test_anything_else_keeps_pybind11(source, functions):
    from mini.backends.cuda import plain
    assert plain.plain_signatures(["", source], functions) is None


def test_plain_signatures_ignore_comments_and_calls():
    from mini.backends.cuda import plain
    src = "// int f(py::object o) { }\nint g(int a) { return f(a); }\n/* f(1) */ int f(int a) { return a; }\n"
    sigs = plain.plain_signatures(["", src], ["f", "g"])
    assert sigs is not None and sigs["f"].params == (("int", "a"),)
