"""Typical wrong implementations of the chapter 04 exercises (hardware on the CPU).

The C++ ones compile real (buggy) kernels with ``load_inline``; each is a plausible answer
that passes a small hand test.  The checks of :mod:`grader.checks.ch04_hardware` must fail
every one with a message that names the mistake.
"""
from __future__ import annotations

import numpy as np

from grader.mistakes import Mistake
from mini.utils.cpp_extension import load_inline

# --------------------------------------------------------------------- kernels

_ADD_SRC = r"""
    void add(py::array_t<float> a, py::array_t<float> b, py::array_t<float> out) {
        const float* pa = a.data();
        const float* pb = b.data();
        float* po = out.mutable_data();
        const int64_t n = out.size();
        #pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
    }
    """


def add_noncompact_input(a, b):
    """Hands numpy views straight to the kernel, which reads them as flat buffers."""
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise TypeError("float32 only")
    if a.shape != b.shape:
        raise ValueError("shapes differ")
    ext = load_inline("omp_add", _ADD_SRC, functions=["add"])
    out = np.empty(a.shape, np.float32)
    ext.add(a, b, out)        # a.T or a[::2] is not one flat block
    return out


def sum_without_reduction(x):
    """`#pragma omp parallel for` on `total += p[i]`: every thread updates one shared total."""
    source = r"""
    double sum(py::array_t<double> x) {
        const double* p = x.data();
        const int64_t n = x.size();
        double total = 0.0;
        #pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) total += p[i];
        return total;
    }
    """
    if x.dtype != np.float64:
        raise TypeError("float64 only")
    ext = load_inline("omp_sum_race", source, functions=["sum"])
    return float(ext.sum(np.ascontiguousarray(x)))


def matmul_tile_edges_dropped(a, b):
    """Loops over whole tiles only (`i0 < M / TILE * TILE`): the last partial tile is never computed."""
    source = r"""
    constexpr int64_t TILE = 32;
    void matmul(py::array_t<float> a, py::array_t<float> b, py::array_t<float> c,
                int64_t M, int64_t K, int64_t N) {
        const float* A = a.data(); const float* B = b.data(); float* C = c.mutable_data();
        #pragma omp parallel for
        for (int64_t i0 = 0; i0 < M / TILE * TILE; i0 += TILE)
            for (int64_t k0 = 0; k0 < K / TILE * TILE; k0 += TILE)
                for (int64_t j0 = 0; j0 < N / TILE * TILE; j0 += TILE)
                    for (int64_t i = i0; i < i0 + TILE; ++i)
                        for (int64_t k = k0; k < k0 + TILE; ++k)
                            for (int64_t j = j0; j < j0 + TILE; ++j)
                                C[i * N + j] += A[i * K + k] * B[k * N + j];
    }
    """
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise TypeError("float32 only")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError("bad shapes")
    ext = load_inline("tiled_matmul_edges", source, functions=["matmul"])
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    if c.size and a.shape[1]:
        ext.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), c, a.shape[0], a.shape[1],
                   b.shape[1])
    return c


def add_relu_wrong_order(a, b):
    """relu(a) + relu(b): clamps each input instead of the sum."""
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise TypeError("float32 only")
    if a.shape != b.shape:
        raise ValueError("shapes differ")
    return np.maximum(a, 0) + np.maximum(b, 0)


# --------------------------------------------------------------------- im2col

def view_off_by_one_stride(xp, kernel_size, stride):
    """Ho = (Hp - kh + 1) // sh: right for stride 1, one short for larger strides."""
    n, c, hp, wp = xp.shape
    kh, kw = kernel_size
    sh, sw = stride
    ho, wo = (hp - kh + 1) // sh, (wp - kw + 1) // sw
    s0, s1, s2, s3 = xp.strides
    return np.lib.stride_tricks.as_strided(xp, (n, ho, wo, c, kh, kw),
                                           (s0, s2 * sh, s3 * sw, s1, s2, s3), writeable=False)


def view_that_copies(xp, kernel_size, stride):
    """Right values, but a fresh array: the point of the view (no memory) is lost."""
    v = np.lib.stride_tricks.sliding_window_view(xp, kernel_size, axis=(2, 3))
    return np.ascontiguousarray(v[:, :, ::stride[0], ::stride[1]].transpose(0, 2, 3, 1, 4, 5))


def view_compact_strides(xp, kernel_size, stride):
    """Computes strides as if xp were compact instead of using xp.strides."""
    n, c, hp, wp = xp.shape
    kh, kw = kernel_size
    sh, sw = stride
    ho, wo = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    it = xp.itemsize
    s0, s1, s2, s3 = c * hp * wp * it, hp * wp * it, wp * it, it
    return np.lib.stride_tricks.as_strided(xp, (n, ho, wo, c, kh, kw),
                                           (s0, s2 * sh, s3 * sw, s1, s2, s3), writeable=False)


def _view(xp, kernel_size, stride, writeable=False):
    n, c, hp, wp = xp.shape
    kh, kw = kernel_size
    sh, sw = stride
    ho, wo = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    s0, s1, s2, s3 = xp.strides
    return np.lib.stride_tricks.as_strided(xp, (n, ho, wo, c, kh, kw),
                                           (s0, s2 * sh, s3 * sw, s1, s2, s3), writeable=writeable)


def im2col_padding_one_side(x, kernel_size, stride, padding):
    """Pads 2*ph rows at the bottom and 2*pw columns at the right only."""
    ph, pw = padding
    x = np.pad(x, ((0, 0), (0, 0), (0, 2 * ph), (0, 2 * pw)))
    v = _view(x, kernel_size, stride)
    n, ho, wo, c, kh, kw = v.shape
    return np.ascontiguousarray(v).reshape(n * ho * wo, c * kh * kw)


def im2col_ignores_padding(x, kernel_size, stride, padding):
    """Forgets to pad: the output is too small when padding > 0."""
    v = _view(x, kernel_size, stride)
    n, ho, wo, c, kh, kw = v.shape
    return np.ascontiguousarray(v).reshape(n * ho * wo, c * kh * kw)


def col2im_overwrites(cols, x_shape, kernel_size, stride, padding):
    """Assigns each receptive field's entries instead of adding them up."""
    n, c, h, w = x_shape
    kh, kw = kernel_size
    sh, sw = stride
    ph, pw = padding
    ho, wo = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    g = cols.reshape(n, ho, wo, c, kh, kw)
    out = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
    for p in range(kh):
        for q in range(kw):
            out[:, :, p:p + sh * ho:sh, q:q + sw * wo:sw] = g[:, :, :, :, p, q].transpose(0, 3, 1, 2)
    return out[:, :, ph:ph + h, pw:pw + w].copy()


def _im2col(x, kernel_size, stride, padding):
    ph, pw = padding
    x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    v = _view(x, kernel_size, stride)
    n, ho, wo, c, kh, kw = v.shape
    return np.ascontiguousarray(v).reshape(n * ho * wo, c * kh * kw)


def _col2im(cols, x_shape, kernel_size, stride, padding):
    n, c, h, w = x_shape
    kh, kw = kernel_size
    sh, sw = stride
    ph, pw = padding
    ho, wo = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    g = cols.reshape(n, ho, wo, c, kh, kw)
    out = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
    for p in range(kh):
        for q in range(kw):
            out[:, :, p:p + sh * ho:sh, q:q + sw * wo:sw] += g[:, :, :, :, p, q].transpose(0, 3, 1, 2)
    return out[:, :, ph:ph + h, pw:pw + w].copy()


def conv_forward_reshape_without_transpose(x, weight, bias, stride, padding):
    """Reshapes the [N*Ho*Wo, Cout] product straight to [N, Cout, Ho, Wo]."""
    n = x.shape[0]
    cout, _, kh, kw = weight.shape
    ho = (x.shape[2] + 2 * padding[0] - kh) // stride[0] + 1
    wo = (x.shape[3] + 2 * padding[1] - kw) // stride[1] + 1
    out = _im2col(x, (kh, kw), stride, padding) @ weight.reshape(cout, -1).T
    if bias is not None:
        out = out + bias
    return np.ascontiguousarray(out.reshape(n, cout, ho, wo))


def conv_backward_wrong_weight_transpose(x, weight, grad_out, stride, padding):
    """grad_weight = (cols^T @ g).reshape(W.shape): a [C*kh*kw, Cout] matrix read as [Cout, ...]."""
    cout, c, kh, kw = weight.shape
    g = grad_out.transpose(0, 2, 3, 1).reshape(-1, cout)
    cols = _im2col(x, (kh, kw), stride, padding)
    grad_w = (cols.T @ g).reshape(weight.shape)
    grad_b = g.sum(axis=0)
    grad_x = _col2im(g @ weight.reshape(cout, -1), x.shape, (kh, kw), stride, padding)
    return grad_x, grad_w, grad_b


def _conv_stride1(x, weight, padding):
    """A plain stride-1 convolution (numpy, no bias)."""
    kh, kw = weight.shape[2:]
    v = _view(np.pad(x, ((0, 0), (0, 0), (padding[0], padding[0]), (padding[1], padding[1]))),
              (kh, kw), (1, 1))                                   # [N, Ho, Wo, C, kh, kw]
    return np.einsum("nhwcij,ocij->nohw", v, weight)


def flipped_grad_not_flipped(grad_out, weight, padding):
    """Swaps the channel axes and pads for a full convolution, but forgets the flip."""
    kh, kw = weight.shape[2:]
    return _conv_stride1(grad_out, weight.transpose(1, 0, 2, 3), (kh - 1 - padding[0], kw - 1 - padding[1]))


def flipped_grad_one_axis(grad_out, weight, padding):
    """Flips the kernel's columns only (w[:, :, :, ::-1])."""
    kh, kw = weight.shape[2:]
    return _conv_stride1(grad_out, weight[:, :, :, ::-1].transpose(1, 0, 2, 3),
                         (kh - 1 - padding[0], kw - 1 - padding[1]))


def flipped_grad_forward_padding(grad_out, weight, padding):
    """Pads grad_out with the forward conv's padding instead of kh - 1 - ph (a 'same', not a
    'full', convolution)."""
    return _conv_stride1(grad_out, weight[:, :, ::-1, ::-1].transpose(1, 0, 2, 3), padding)


# --------------------------------------------------------------------- napkin questions

def gemm_cost_counts_elements(m, k, n):
    return 2 * m * k * n, m * k + k * n + m * n


def chain_traffic_ignores_fusion(n, k, itemsize, fused):
    return 2 * k * n * itemsize


# --------------------------------------------------------------------- more kernels
# (mistakes from the causes of issue 18: side effects, unchecked arguments, precision,
# off-by-one ranges, index arithmetic)

def _float32_pair(a, b):
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise TypeError("float32 only")
    if a.shape != b.shape:
        raise ValueError("shapes differ")


def add_into_first_input(a, b):
    """Saves an allocation by writing the sum into a (the caller's array) and returning it."""
    _float32_pair(a, b)
    ext = load_inline("omp_add", _ADD_SRC, functions=["add"])
    a_c = np.ascontiguousarray(a)
    ext.add(a_c, np.ascontiguousarray(b), a_c)   # a compact a is the caller's own buffer
    return a_c


def add_no_dtype_check(a, b):
    """Lets pybind11 convert whatever arrives to float32: float64 input is accepted silently."""
    if a.shape != b.shape:
        raise ValueError("shapes differ")
    ext = load_inline("omp_add", _ADD_SRC, functions=["add"])
    out = np.empty(a.shape, np.float32)
    ext.add(np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32), out)
    return out


def add_checks_size_only(a, b):
    """Compares the sizes, not the shapes: (4, 3) + (3, 4) goes through."""
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise TypeError("float32 only")
    if a.size != b.size:
        raise ValueError("sizes differ")
    ext = load_inline("omp_add", _ADD_SRC, functions=["add"])
    out = np.empty(a.shape, np.float32)
    ext.add(np.ascontiguousarray(a), np.ascontiguousarray(b), out)
    return out


def _sum_kernel(name, total_type, start):
    source = r"""
    double sum(py::array_t<double> x) {
        const double* p = x.data();
        const int64_t n = x.size();
        TOTAL total = 0;
        #pragma omp parallel for reduction(+ : total) schedule(static) if (n > 65536)
        for (int64_t i = START; i < n; ++i) total += p[i];
        return total;
    }
    """.replace("TOTAL", total_type).replace("START", str(start))

    def omp_sum(x):
        if x.dtype != np.float64:
            raise TypeError("float64 only")
        ext = load_inline(name, source, functions=["sum"])
        return float(ext.sum(np.ascontiguousarray(x)))
    return omp_sum


sum_float_accumulator = _sum_kernel("omp_sum_float_total", "float", 0)
sum_float_accumulator.__doc__ = "A reduction clause, but a float total: rounds on big sums."


def sum_skips_first(x):
    """The loop starts at i = 1 (a habit from 1-based pseudocode).  numpy stands in for the
    kernel: the same sum, one compile less for the catalogue."""
    if x.dtype != np.float64:
        raise TypeError("float64 only")
    return float(np.sum(np.ascontiguousarray(x).ravel()[1:]))

sum_integer_accumulator = _sum_kernel("omp_sum_long_total", "long long", 0)
sum_integer_accumulator.__doc__ = "An integer total: every fraction is cut off."


def _matmul_kernel(name, b_row):
    source = r"""
    constexpr int64_t TILE = 32;
    void matmul(py::array_t<float> a, py::array_t<float> b, py::array_t<float> c,
                int64_t M, int64_t K, int64_t N) {
        const float* A = a.data(); const float* B = b.data(); float* C = c.mutable_data();
        #pragma omp parallel for
        for (int64_t i0 = 0; i0 < M; i0 += TILE)
            for (int64_t k0 = 0; k0 < K; k0 += TILE)
                for (int64_t j0 = 0; j0 < N; j0 += TILE)
                    for (int64_t i = i0; i < std::min(i0 + TILE, M); ++i)
                        for (int64_t k = k0; k < std::min(k0 + TILE, K); ++k)
                            for (int64_t j = j0; j < std::min(j0 + TILE, N); ++j)
                                C[i * N + j] += A[i * K + k] * B[k * BROW + j];
    }
    """.replace("BROW", b_row)
    return lambda: load_inline(name, source, functions=["matmul"])


def matmul_b_row_length_k(a, b):
    """Indexes B with A's row length (B[k * K + j]): right only when K == N."""
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise TypeError("float32 only")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError("bad shapes")
    ext = _matmul_kernel("tiled_matmul_brow", "K")()
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    if c.size and a.shape[1]:
        ext.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), c, *a.shape, b.shape[1])
    return c


def matmul_converts_dtype(a, b):
    """Converts any input to float32 instead of refusing it (then a right tiled kernel:
    mini's own, compiled once for the reference's check)."""
    from mini.backends.cpu.exercises import tiled_matmul
    return tiled_matmul.reference(np.asarray(a, np.float32), np.asarray(b, np.float32))


def view_writeable(xp, kernel_size, stride):
    """as_strided with its default writeable=True: a write through one window changes others."""
    return _view(xp, kernel_size, stride, writeable=True)


def im2col_pads_into_float64(x, kernel_size, stride, padding):
    """Builds the padded input in np.zeros(...) without a dtype: float32 comes out float64."""
    n, c, h, w = x.shape
    ph, pw = padding
    xp = np.zeros((n, c, h + 2 * ph, w + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + w] = x
    v = _view(xp, kernel_size, stride)
    n, ho, wo, c, kh, kw = v.shape
    return np.ascontiguousarray(v).reshape(n * ho * wo, c * kh * kw)


def col2im_crops_one_side(cols, x_shape, kernel_size, stride, padding):
    """Accumulates right, then keeps out[:, :, :H, :W]: the padding is dropped at one end only."""
    n, c, h, w = x_shape
    full = _col2im(cols, (n, c, h + 2 * padding[0], w + 2 * padding[1]), kernel_size, stride, (0, 0))
    return full[:, :, :h, :w].copy()


def col2im_float64_buffer(cols, x_shape, kernel_size, stride, padding):
    """Accumulates into np.zeros(...) without a dtype: float32 cols give a float64 image."""
    return _col2im(cols, x_shape, kernel_size, stride, padding).astype(np.float64)


def conv_forward_weight_not_transposed(x, weight, bias, stride, padding):
    """cols @ weight.reshape(-1, Cout): the right shape, the filters' numbers scrambled."""
    n = x.shape[0]
    cout, _, kh, kw = weight.shape
    ho = (x.shape[2] + 2 * padding[0] - kh) // stride[0] + 1
    wo = (x.shape[3] + 2 * padding[1] - kw) // stride[1] + 1
    out = _im2col(x, (kh, kw), stride, padding) @ weight.reshape(-1, cout)
    if bias is not None:
        out = out + bias
    return np.ascontiguousarray(out.reshape(n, ho, wo, cout).transpose(0, 3, 1, 2))


def conv_backward_bias_of_first_image(x, weight, grad_out, stride, padding):
    """grad_bias sums grad_out over Ho and Wo of the first image only."""
    cout, c, kh, kw = weight.shape
    g = grad_out.transpose(0, 2, 3, 1).reshape(-1, cout)
    cols = _im2col(x, (kh, kw), stride, padding)
    grad_w = (g.T @ cols).reshape(weight.shape)
    grad_x = _col2im(g @ weight.reshape(cout, -1), x.shape, (kh, kw), stride, padding)
    return grad_x, grad_w, grad_out.sum(axis=(2, 3))[0]


def flipped_grad_channels_reshaped(grad_out, weight, padding):
    """Flips both axes, then reshapes [Cout, C, ...] to [C, Cout, ...] instead of swapping."""
    cout, c, kh, kw = weight.shape
    return _conv_stride1(grad_out, weight[:, :, ::-1, ::-1].reshape(c, cout, kh, kw),
                         (kh - 1 - padding[0], kw - 1 - padding[1]))


def gemm_cost_reads_only(m, k, n):
    return 2 * m * k * n, (m * k + k * n) * 4


def gemm_cost_counts_terms(m, k, n):
    return m * k * n, (m * k + k * n + m * n) * 4


def chain_traffic_reads_only(n, k, itemsize, fused):
    return (1 if fused else k) * n * itemsize


MISTAKES = [
    Mistake("04.omp_sum", "OpenMP reduction without a reduction clause (data race)",
            sum_without_reduction, expect_message="data race"),
    Mistake("04.tiled_matmul", "tile edges dropped when n is not a multiple of the tile",
            matmul_tile_edges_dropped, expect_message="tile edges"),
    Mistake("04.omp_add", "non-compact input passed to the kernel", add_noncompact_input,
            expect_message="not compact"),
    Mistake("04.fused_add_relu", "relu applied to each input instead of the sum",
            add_relu_wrong_order, expect_message="max(a + b, 0)"),
    Mistake("04.im2col_view", "output size off by one with stride", view_off_by_one_stride,
            expect_message="off-by-one"),
    Mistake("04.im2col_view", "a copy instead of a view", view_that_copies,
            expect_message="it is a copy"),
    Mistake("04.im2col_view", "compact strides assumed", view_compact_strides,
            expect_message="xp.strides"),
    Mistake("04.im2col", "padding applied on the wrong side", im2col_padding_one_side,
            expect_message="wrong side"),
    Mistake("04.im2col", "padding forgotten", im2col_ignores_padding,
            expect_message="off-by-one in the output size"),
    Mistake("04.col2im", "col2im overwrites instead of accumulating", col2im_overwrites,
            expect_message="accumulate (+=)"),
    Mistake("04.conv2d_forward", "GEMM result reshaped without moving Cout",
            conv_forward_reshape_without_transpose, expect_message="reshape/transpose"),
    Mistake("04.conv2d_backward", "wrong transpose in the weight gradient",
            conv_backward_wrong_weight_transpose, expect_message="wrong transpose"),
    Mistake("04.conv_input_grad_flipped", "kernel not flipped", flipped_grad_not_flipped,
            expect_message="NOT flipped"),
    Mistake("04.conv_input_grad_flipped", "kernel flipped along one axis only", flipped_grad_one_axis,
            expect_message="flip BOTH"),
    Mistake("04.conv_input_grad_flipped", "the forward padding reused (not a full convolution)",
            flipped_grad_forward_padding, expect_message="kh - 1 - ph"),
    Mistake("04.quiz_gemm_cost", "bytes counted as elements", gemm_cost_counts_elements,
            expect_message="4 bytes"),
    Mistake("04.quiz_chain_traffic", "fusion ignored", chain_traffic_ignores_fusion,
            expect_message="fused"),
    # issue 18: side effects, unchecked arguments, precision, ranges, layouts, dtypes
    Mistake("04.omp_add", "the sum written into the first input", add_into_first_input,
            expect_message="changed its input a"),
    Mistake("04.omp_add", "no dtype check (pybind11 converts float64 silently)",
            add_no_dtype_check, expect_message="should raise TypeError"),
    Mistake("04.omp_add", "sizes compared instead of shapes", add_checks_size_only,
            expect_message="different shapes"),
    Mistake("04.omp_sum", "a float accumulator (with the reduction clause)", sum_float_accumulator,
            expect_message="a precision problem, not a race"),
    Mistake("04.omp_sum", "loop from 1: the first element is never added", sum_skips_first,
            expect_message="without the first element"),
    Mistake("04.omp_sum", "an integer accumulator", sum_integer_accumulator,
            expect_message="integer type"),
    Mistake("04.tiled_matmul", "B indexed with A's row length", matmul_b_row_length_k,
            expect_message="each with its own row length"),
    Mistake("04.tiled_matmul", "inputs converted to float32 instead of refused",
            matmul_converts_dtype, expect_message="should raise TypeError"),
    Mistake("04.im2col_view", "a writeable view (as_strided's default)", view_writeable,
            expect_message="read-only"),
    Mistake("04.im2col", "padded buffer made without a dtype (float64)", im2col_pads_into_float64,
            expect_message="keeps x's dtype"),
    Mistake("04.col2im", "padding cropped at one end only", col2im_crops_one_side,
            expect_message="EACH side"),
    Mistake("04.col2im", "accumulated into a float64 buffer", col2im_float64_buffer,
            expect_message="keeps cols' dtype"),
    Mistake("04.conv2d_forward", "weight reshaped to [C*kh*kw, Cout] instead of transposed",
            conv_forward_weight_not_transposed, expect_message="weight matrix is read in the wrong order"),
    Mistake("04.conv2d_backward", "bias gradient of the first image only",
            conv_backward_bias_of_first_image, expect_message="in every image"),
    Mistake("04.conv_input_grad_flipped", "channel axes reshaped instead of swapped",
            flipped_grad_channels_reshaped, expect_message="reshaped instead of swapped"),
    Mistake("04.quiz_gemm_cost", "the output's write not counted", gemm_cost_reads_only,
            expect_message="reads only"),
    Mistake("04.quiz_gemm_cost", "FLOPs counted as terms", gemm_cost_counts_terms,
            expect_message="multiply AND an add"),
    Mistake("04.quiz_chain_traffic", "the writes not counted", chain_traffic_reads_only,
            expect_message="AND writes"),
]
