"""The source rewrites the emulator needs: launches and __shared__ declarations become
C++, nothing else changes, and every line stays where it was."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from mini.backends.cuda.rewrite import RewriteError, code_mask, rewrite_cuda


def lines_kept(src):
    out = rewrite_cuda(src)
    assert out.count("\n") == src.count("\n")
    return out


def test_a_launch_becomes_a_call_with_names_and_line():
    out = lines_kept("void f(float* d_x, int n) {\n    scale<<<(n + 255) / 256, 256>>>(d_x, 2.0f, n);\n}\n")
    assert ('::mini_cuda::launch(::mini_cuda::LaunchConfig((n + 255) / 256, 256), "scale", '
            '"d_x\\x1f""2.0f\\x1f""n", __LINE__, [](auto&... mini_cuda_arg) { scale(mini_cuda_arg...); }, '
            'd_x, 2.0f, n);') in out


def test_launch_forms():
    src = """
k<<<1, 2>>>();
ns::k2<float, 4> <<< g, b, 64 * sizeof(float), stream >>> ( (float*)p,
        q );
::k3<<<dim3(1, 2), dim3(32, (n >> 1) + 1)>>>(std::min(a, b), c);
"""
    out = lines_kept(src)
    assert 'LaunchConfig(1, 2), "k", "", __LINE__, [](auto&... mini_cuda_arg) { k(mini_cuda_arg...); })' in out
    assert 'LaunchConfig( g, b, 64 * sizeof(float), stream ), "ns::k2<float, 4>", "p\\x1f""q"' in out
    assert "{ ns::k2<float, 4>(mini_cuda_arg...); },  (float*)p,         q )\n;" in out
    assert 'LaunchConfig(dim3(1, 2), dim3(32, (n >> 1) + 1)), "::k3", "std::min(a, b)\\x1f""c"' in out


def test_comments_and_strings_are_left_alone():
    src = '// k<<<1,2>>>(x);\nconst char* s = "k<<<1,2>>>(x) __shared__ float t[4];";\n/* __shared__ int q; */\n'
    assert rewrite_cuda(src) == src


def test_shared_declarations():
    src = """__global__ void k() {
    __shared__ float tile[T][T + 1], other[4];
    static __shared__ __align__(16) float al[8]; /* keep me */ __shared__ int q;
    extern __shared__ float dyn[];
    float __shared__ after[2];
}
"""
    out = lines_kept(src)
    assert 'auto& tile = ::mini_cuda::shared<float[T][T+1]>(1, "tile", __LINE__, 0);' in out
    assert 'auto& other = ::mini_cuda::shared<float[4]>(2, "other", __LINE__, 0);' in out
    assert 'auto& al = ::mini_cuda::shared<float[8]>(3, "al", __LINE__, (16)); /* keep me */' in out
    assert 'auto& q = ::mini_cuda::shared<int>(4, "q", __LINE__, 0);' in out
    assert "float* const dyn = ::mini_cuda::dynamic_shared<float>();" in out
    assert 'auto& after = ::mini_cuda::shared<float[2]>(5, "after", __LINE__, 0);' in out
    assert "__shared__" not in out


def test_shared_at_namespace_scope_becomes_an_object():
    out = lines_kept("namespace a {\n__shared__ float buf[32];\n}\nextern __shared__ int dyn[];\n")
    assert 'static const ::mini_cuda::SharedAtNamespaceScope<float[32]> buf{1, "buf", __LINE__, 0};' in out
    assert "static const ::mini_cuda::DynamicSharedAtNamespaceScope<int> dyn{};" in out


def test_device_variables_and_noinline():
    src = "__device__ int counter;\n__device__ float g(float x) { return x; }\n__device__ __noinline__ int h();\n"
    out = lines_kept(src)
    assert out.splitlines()[0] == "MINI_CUDA_DEVICE_VARIABLE int counter;"
    assert out.splitlines()[1] == src.splitlines()[1]
    assert "__attribute__((noinline)) int h();" in out


@pytest.mark.parametrize("src,message", [
    ("__global__ void k() { __shared__ float x = 0; }", "initializer"),
    ("void f() { k<<<1, 2>>>; }", "arguments in parentheses"),
    ("void f() { k<<<1>>>(x); }", "grid and block"),
    ("void f() { k<<<1, 2(x); }", "without a matching >>>"),
    ("void f() { k<<<1, 2>>>(x; }", "expected '\\)' first"),
    ("__global__ void k() { extern __shared__ float x[4]; }", "unsized array"),
])
def test_errors_name_the_line(src, message):
    with pytest.raises(RewriteError, match=message) as e:
        rewrite_cuda("\n\n" + src)
    assert e.value.line == 3


@given(st.text(alphabet="ab<>;{}()\"'/*\n \\R", max_size=60))
def test_code_mask_never_fails_and_keeps_length(text):
    assert len(code_mask(text)) == len(text)
