// The kernels of mini's cuda device (mini/backends/cuda/backend.py) on compact float32
// arrays.  Each is a grid-stride loop (any grid covers any size) or, for reductions,
// one block per output row.  The launchers wait for the device before they return, so
// Python may read the (managed) results at once.
//
// The parts between "// BEGIN SOLUTION <slot>" and "// END SOLUTION" would give away an
// exercise of chapter 04: a student copy of mini released before that chapter's solutions
// ships without them (grader/solutions.py), and the device then runs the student's kernel
// for that exercise, or the host for the other operations (backend.py asks which
// launchers this file defines).

static int blocks_for(long long n, int threads) {
    long long b = (n + threads - 1) / threads;
    return (int)(b < 1 ? 1 : (b > 1024 ? 1024 : b));   // grid-stride loops do the rest
}

static int finish() {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    return (int)e;
}

// ---------------------------------------------------------------- elementwise
// BEGIN SOLUTION 04.cuda_add
// binary operations: 0 add, 1 sub, 2 mul, 3 div, 4 maximum, 5 minimum, 6 pow
__device__ float binary_op(int op, float x, float y) {
    switch (op) {
        case 0: return x + y;
        case 1: return x - y;
        case 2: return x * y;
        case 3: return x / y;
        case 4: return (x != x || y != y) ? x + y : (x > y ? x : y);   // NaN wins, as in numpy
        case 5: return (x != x || y != y) ? x + y : (x < y ? x : y);
        default: return powf(x, y);
    }
}

// unary operations: 0 neg, 1 exp, 2 log, 3 sqrt, 4 sin, 5 cos, 6 tanh, 7 abs, 8 relu, 9 sigmoid
__device__ float unary_op(int op, float x) {
    switch (op) {
        case 0: return -x;
        case 1: return expf(x);
        case 2: return logf(x);
        case 3: return sqrtf(x);
        case 4: return sinf(x);
        case 5: return cosf(x);
        case 6: return tanhf(x);
        case 7: return fabsf(x);
        case 8: return (x != x || x > 0.0f) ? x : 0.0f;
        default: {   // never exponentiate a large positive number
            float e = expf(-fabsf(x));
            return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        }
    }
}

__global__ void ewise_kernel(int op, const float* a, const float* b, float* out, long long n) {
    long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = binary_op(op, a[i], b[i]);
}

__global__ void scalar_kernel(int op, const float* a, float s, float* out, long long n, int reverse) {
    long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = reverse ? binary_op(op, s, a[i]) : binary_op(op, a[i], s);
}

__global__ void unary_kernel(int op, const float* a, float* out, long long n) {
    long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = unary_op(op, a[i]);
}

int launch_ewise(int op, std::uintptr_t a, std::uintptr_t b, std::uintptr_t out, long long n) {
    if (n > 0) ewise_kernel<<<blocks_for(n, 256), 256>>>(op, (const float*)a, (const float*)b, (float*)out, n);
    return finish();
}

int launch_scalar(int op, std::uintptr_t a, float s, std::uintptr_t out, long long n, int reverse) {
    if (n > 0) scalar_kernel<<<blocks_for(n, 256), 256>>>(op, (const float*)a, s, (float*)out, n, reverse);
    return finish();
}

int launch_unary(int op, std::uintptr_t a, std::uintptr_t out, long long n) {
    if (n > 0) unary_kernel<<<blocks_for(n, 256), 256>>>(op, (const float*)a, (float*)out, n);
    return finish();
}
// END SOLUTION

// ---------------------------------------------------------------- layout
// out[i] = in[offset + sum_d index_d(i) * strides[d]]: a strided view made compact.
struct Layout {
    int ndim;
    long long shape[8];
    long long strides[8];
};

__global__ void compact_kernel(const float* in, float* out, long long n, long long offset, Layout L) {
    long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        long long rest = i, src = offset;
        for (int d = L.ndim - 1; d >= 0; --d) {
            long long idx = rest % L.shape[d];
            rest /= L.shape[d];
            src += idx * L.strides[d];
        }
        out[i] = in[src];
    }
}

// cols [N*Ho*Wo, C*kh*kw]: row (n, oh, ow), column (c, i, j) holds x[n, c, oh*sh - ph + i,
// ow*sw - pw + j], or 0 in the padding.  Consecutive threads write consecutive columns.
__global__ void im2col_kernel(const float* x, float* cols, int N, int C, int H, int W, int kh, int kw,
                              int sh, int sw, int ph, int pw, int Ho, int Wo) {
    long long total = (long long)N * Ho * Wo * C * kh * kw;
    long long stride = (long long)blockDim.x * gridDim.x;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        long long t = idx;
        int j = (int)(t % kw); t /= kw;
        int i = (int)(t % kh); t /= kh;
        int c = (int)(t % C); t /= C;
        int ow = (int)(t % Wo); t /= Wo;
        int oh = (int)(t % Ho);
        long long n = t / Ho;
        int y = oh * sh - ph + i, xx = ow * sw - pw + j;
        cols[idx] = (y >= 0 && y < H && xx >= 0 && xx < W) ? x[((n * C + c) * H + y) * W + xx] : 0.0f;
    }
}

int launch_compact(std::uintptr_t in, std::uintptr_t out, long long n, long long offset,
                   std::vector<long long> shape, std::vector<long long> strides) {
    if (shape.size() > 8 || shape.size() != strides.size()) return (int)cudaErrorInvalidValue;
    Layout L;
    L.ndim = (int)shape.size();
    for (int d = 0; d < L.ndim; ++d) { L.shape[d] = shape[d]; L.strides[d] = strides[d]; }
    if (n > 0) compact_kernel<<<blocks_for(n, 256), 256>>>((const float*)in, (float*)out, n, offset, L);
    return finish();
}

int launch_im2col(std::uintptr_t x, std::uintptr_t cols, int N, int C, int H, int W, int kh, int kw,
                  int sh, int sw, int ph, int pw) {
    int Ho = (H + 2 * ph - kh) / sh + 1, Wo = (W + 2 * pw - kw) / sw + 1;
    long long total = (long long)N * Ho * Wo * C * kh * kw;
    if (total > 0)
        im2col_kernel<<<blocks_for(total, 256), 256>>>((const float*)x, (float*)cols, N, C, H, W, kh, kw,
                                                       sh, sw, ph, pw, Ho, Wo);
    return finish();
}

// ---------------------------------------------------------------- reductions
// BEGIN SOLUTION 04.cuda_block_sum_shuffle
// out[r] = op over in[r, :] for a compact [rows, cols] array, one block per row:
// 0 sum, 1 max, 2 min (max and min propagate NaN, as numpy's do).
__device__ float combine(int op, float a, float b) {
    if (op == 0) return a + b;
    if (a != a || b != b) return a + b;
    return op == 1 ? (a > b ? a : b) : (a < b ? a : b);
}

__device__ float identity_of(int op) { return op == 0 ? 0.0f : (op == 1 ? -INFINITY : INFINITY); }

__device__ float warp_combine(int op, float v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v = combine(op, v, __shfl_down_sync(0xffffffff, v, offset));
    return v;
}

__global__ void row_reduce_kernel(int op, const float* in, float* out, long long cols) {
    __shared__ float warp_vals[32];
    const float* row = in + (long long)blockIdx.x * cols;
    float v = identity_of(op);
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) v = combine(op, v, row[j]);
    v = warp_combine(op, v);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_vals[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x / 32) ? warp_vals[lane] : identity_of(op);
        v = warp_combine(op, v);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

int launch_row_reduce(int op, std::uintptr_t in, std::uintptr_t out, long long rows, long long cols) {
    int threads = 32;
    while (threads < 256 && threads < cols) threads *= 2;    // whole warps, up to 8
    for (long long r0 = 0; r0 < rows; r0 += 2147483647LL) {
        long long r = rows - r0 < 2147483647LL ? rows - r0 : 2147483647LL;
        row_reduce_kernel<<<(unsigned)r, threads>>>(op, (const float*)in + r0 * cols, (float*)out + r0, cols);
    }
    return finish();
}
// END SOLUTION

// ---------------------------------------------------------------- matmul
// BEGIN SOLUTION 04.cuda_matmul_tiled
// The tiled kernel of exercise 04.cuda_matmul_tiled (its source is put in front of this
// file), waiting for the device as the other launchers do.
int launch_matmul(std::uintptr_t A, std::uintptr_t B, std::uintptr_t C, int M, int N, int K) {
    launch_matmul_tiled(A, B, C, M, N, K);
    return finish();
}
// END SOLUTION
