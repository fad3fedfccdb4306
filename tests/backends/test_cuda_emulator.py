"""mini's CUDA emulator: CUDA semantics (built-ins, barriers, warps, atomics, memory
spaces, errors) and what its sanitizer reports, each proven with a small kernel.

All kernels live in one module (one build).  Expected values come from numpy or from
the CUDA programming guide's definitions, computed here independently.
"""
from __future__ import annotations

import numpy as np
import pytest

from mini.backends.cuda import emulator, kernels
from mini.backends.cuda.emulator import check
from cuda_helpers import load_emulated, requires_posix, without_launch_ids

pytestmark = requires_posix

SRC = kernels.source("helpers") + r"""
#define F(p) ((float*)(p))
#define I(p) ((int*)(p))

__global__ void record_builtins(int* out) {
    int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int* o = out + (b * blockDim.x * blockDim.y * blockDim.z + t) * 12;
    o[0] = threadIdx.x; o[1] = threadIdx.y; o[2] = threadIdx.z;
    o[3] = blockIdx.x; o[4] = blockIdx.y; o[5] = blockIdx.z;
    o[6] = blockDim.x; o[7] = blockDim.y; o[8] = blockDim.z;
    o[9] = gridDim.x; o[10] = gridDim.y; o[11] = gridDim.z;
}
int launch_record_builtins(std::uintptr_t out, int gx, int gy, int gz, int bx, int by, int bz) {
    record_builtins<<<dim3(gx, gy, gz), dim3(bx, by, bz)>>>(I(out));
    return cudaGetLastError();
}

__global__ void rotate_shared(const float* in, float* out, int use_barrier) {
    __shared__ float s[128];
    int t = threadIdx.x;
    s[t] = in[blockIdx.x * blockDim.x + t];
    if (use_barrier) __syncthreads();
    out[blockIdx.x * blockDim.x + t] = s[(t + 1) % blockDim.x];
}
int launch_rotate(std::uintptr_t in, std::uintptr_t out, int blocks, int use_barrier) {
    rotate_shared<<<blocks, 128>>>(F(in), F(out), use_barrier);
    return cudaGetLastError();
}

__global__ void atomics_kernel(const int* bins, const float* vals, int n, int* hist, float* fsum,
                               int* imax, unsigned* counter, int* last) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        atomicAdd(&hist[bins[i]], 1);
        atomicAdd(fsum, vals[i]);
        atomicMax(imax, (bins[i] * 7) % 13);
        unsigned old = atomicCAS(counter, 0u, 0u), assumed;
        do { assumed = old; old = atomicCAS(counter, assumed, assumed + 1u); } while (old != assumed);
        atomicExch(last, i);
    }
}
int launch_atomics(std::uintptr_t bins, std::uintptr_t vals, int n, std::uintptr_t hist, std::uintptr_t fsum,
                   std::uintptr_t imax, std::uintptr_t counter, std::uintptr_t last) {
    atomics_kernel<<<3, 64>>>(I(bins), F(vals), n, I(hist), F(fsum), I(imax), (unsigned*)counter, I(last));
    return cudaGetLastError();
}

__global__ void shuffles(int* out, int src, int delta, int lane_mask, int width) {
    int t = threadIdx.x, lane = t % 32;
    int v = t * 10;
    int* o = out + t * 7;
    o[0] = __shfl_sync(0xffffffff, v, src, width);
    o[1] = __shfl_up_sync(0xffffffff, v, delta, width);
    o[2] = __shfl_down_sync(0xffffffff, v, delta, width);
    o[3] = __shfl_xor_sync(0xffffffff, v, lane_mask, width);
    o[4] = (int)__ballot_sync(0xffffffff, lane % 3 == 0);
    o[5] = __all_sync(0xffffffff, lane < 31);
    o[6] = __any_sync(0xffffffff, lane == 5);
}
int launch_shuffles(std::uintptr_t out, int src, int delta, int lane_mask, int width) {
    shuffles<<<1, 64>>>(I(out), src, delta, lane_mask, width);
    return cudaGetLastError();
}

__global__ void shuffle_after_exit(float* out, int n) {
    int t = threadIdx.x;
    if (t >= n) return;
    out[t] = __shfl_down_sync(0xffffffff, (float)t, 1);
}
int launch_shuffle_after_exit(std::uintptr_t out, int n) {
    shuffle_after_exit<<<1, 32>>>(F(out), n);
    return cudaGetLastError();
}

__global__ void reverse_dynamic(const float* in, float* out, int n) {
    extern __shared__ float buf[];
    int t = threadIdx.x;
    if (t < n) buf[t] = in[t];
    __syncthreads();
    if (t < n) out[t] = buf[n - 1 - t];
}
int launch_reverse_dynamic(std::uintptr_t in, std::uintptr_t out, int n, int shared_bytes) {
    reverse_dynamic<<<1, 64, shared_bytes>>>(F(in), F(out), n);
    return cudaGetLastError();
}

__constant__ float coef[4];
__device__ int calls;
__global__ void poly(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = coef[0] + x[i] * (coef[1] + x[i] * (coef[2] + x[i] * coef[3]));
        atomicAdd(&calls, 1);
    }
}
int set_coef(py::array_t<float> c) { return cudaMemcpyToSymbol(coef, c.data(), 4 * sizeof(float)); }
int reset_calls() { int zero = 0; return cudaMemcpyToSymbol(calls, &zero, sizeof(int)); }
int get_calls() { int v = -1; cudaMemcpyFromSymbol(&v, calls, sizeof(int)); return v; }
int launch_poly(std::uintptr_t x, std::uintptr_t y, int n) {
    poly<<<(n + 31) / 32, 32>>>(F(x), F(y), n);
    return cudaGetLastError();
}

template <typename T> __global__ void fill(T* p, T v, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = v;
}
int launch_fill(std::uintptr_t p, float v, int n) {
    fill<<<1, 32>>>(F(p), v, n);        // T deduced from the arguments, as nvcc does
    return cudaGetLastError();
}

__global__ void two_barriers(int* out) {
    if (threadIdx.x < 16) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1;
}
int launch_two_barriers(std::uintptr_t out) {
    two_barriers<<<1, 32>>>(I(out));
    return cudaGetLastError();
}

__global__ void block_votes(int* out) {
    int t = threadIdx.x;
    int c = __syncthreads_count(t % 3 == 0);
    int a = __syncthreads_and(t < 100);
    int o = __syncthreads_or(t == 7);
    if (t == 0) { out[0] = c; out[1] = a; out[2] = o; }
}
int launch_block_votes(std::uintptr_t out, int threads) {
    block_votes<<<1, threads>>>(I(out));
    return cudaGetLastError();
}

__global__ void bank_pattern(float* out, int stride) {
    __shared__ float s[32 * 33];
    int t = threadIdx.x;
    s[t * stride] = (float)t;
    __syncthreads();
    out[t] = s[t * stride];
}
int launch_bank_pattern(std::uintptr_t out, int stride) {
    bank_pattern<<<1, 32>>>(F(out), stride);
    return cudaGetLastError();
}

__global__ void gather_stride(const float* in, float* out, int stride) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    out[t] = in[t * stride];
}
int launch_gather(std::uintptr_t in, std::uintptr_t out, int stride, int blocks) {
    gather_stride<<<blocks, 32>>>(F(in), F(out), stride);
    return cudaGetLastError();
}

__global__ void read_first(const float* in, float* out) { out[threadIdx.x] = in[threadIdx.x]; }
int uninitialised_read(int do_memset) {
    float *a, *b;
    cudaMalloc(&a, 32 * sizeof(float));
    cudaMalloc(&b, 32 * sizeof(float));
    if (do_memset) cudaMemset(a, 0, 32 * sizeof(float));
    read_first<<<1, 32>>>(a, b);
    cudaError_t e = cudaGetLastError();
    cudaFree(a); cudaFree(b);
    return e;
}

int wrong_direction() {
    float* d;
    cudaMalloc(&d, 16);
    float h[4] = {0, 0, 0, 0};
    cudaError_t e = cudaMemcpy(h, d, 16, cudaMemcpyHostToDevice);     // dst and src swapped
    cudaFree(d);
    return e;
}

int copy_too_much() {
    float* d;
    cudaMalloc(&d, 16);
    float h[8] = {0};
    cudaError_t e = cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice);
    cudaFree(d);
    return e;
}

__global__ void touch(float* p) { p[threadIdx.x] = 1.0f; }
int bad_config() {
    float* d;
    cudaMalloc(&d, 4096 * sizeof(float));
    touch<<<1, 2048>>>(d);
    cudaError_t e = cudaGetLastError();
    cudaFree(d);
    return e;
}

int host_pointer_to_kernel() {
    static float host[32];
    touch<<<1, 32>>>(host);
    cudaError_t e = cudaDeviceSynchronize();
    cudaGetLastError();
    return e;
}

float host_dereference() {
    float* d;
    cudaMalloc(&d, 16);
    cudaMemset(d, 0, 16);
    float v = d[1];                     // device memory read by host code
    cudaFree(d);
    return v;
}

__global__ void asserting(int n) { assert(threadIdx.x < n); }
int device_assert() {
    asserting<<<1, 32>>>(8);
    cudaError_t e = cudaDeviceSynchronize();
    cudaGetLastError();
    return e;
}

std::string error_string(int code) { return cudaGetErrorString((cudaError_t)code); }
"""

FUNCS = list(kernels.HELPER_FUNCTIONS) + [
    "launch_record_builtins", "launch_rotate", "launch_atomics", "launch_shuffles",
    "launch_shuffle_after_exit", "launch_reverse_dynamic", "set_coef", "reset_calls", "get_calls",
    "launch_poly", "launch_fill", "launch_two_barriers", "launch_block_votes", "launch_bank_pattern",
    "launch_gather", "uninitialised_read", "wrong_direction", "copy_too_much", "bad_config",
    "host_pointer_to_kernel", "host_dereference", "device_assert", "error_string"]


@pytest.fixture(scope="module")
def ext():
    return load_emulated("emulator_semantics", SRC, FUNCS)


@pytest.fixture
def dev(ext):
    with kernels.DeviceSession(ext) as s:
        yield s


def _ints(s, ptr, n):
    return s.to_host(ptr, (n,)).view(np.int32)


# --------------------------------------------------------------------------- built-ins

@pytest.mark.parametrize("grid,block", [((1, 1, 1), (1, 1, 1)), ((3, 2, 2), (4, 3, 2)), ((2, 1, 1), (64, 1, 1))])
def test_builtins_are_3d_and_cover_every_thread_once(ext, dev, grid, block):
    nthreads = int(np.prod(grid) * np.prod(block))
    out = dev.empty(nthreads * 12)
    with check() as run:
        assert ext.launch_record_builtins(out, *grid, *block) == 0
    got = _ints(dev, out, nthreads * 12).reshape(nthreads, 12)
    rows = []
    for bz in range(grid[2]):
        for by in range(grid[1]):
            for bx in range(grid[0]):
                for tz in range(block[2]):
                    for ty in range(block[1]):
                        for tx in range(block[0]):
                            rows.append([tx, ty, tz, bx, by, bz, *block, *grid])
    np.testing.assert_array_equal(got, np.array(rows))
    assert run.ok, run
    assert run.launches[0]["counters"]["threads"] == nthreads
    assert run.launches[0]["counters"]["blocks"] == int(np.prod(grid))


def test_template_kernel_arguments_are_deduced_at_launch(ext, dev):
    p = dev.empty(50)
    with check() as run:
        assert ext.launch_fill(p, 2.5, 50) == 0
    np.testing.assert_array_equal(dev.to_host(p), np.full(50, 2.5, np.float32))
    assert run.ok and run.launches[0]["kernel"] == "fill"


# --------------------------------------------------------------------------- barriers and races

def test_syncthreads_makes_neighbour_exchange_correct_under_every_schedule(ext, dev):
    x = np.arange(256, dtype=np.float32)
    src, out = dev.to_device(x), dev.empty(256)
    with check(schedules=["forward", "reverse", "shuffled:1", "shuffled:2"]) as run:
        assert ext.launch_rotate(src, out, 2, 1) == 0
    want = np.concatenate([np.roll(x[:128], -1), np.roll(x[128:], -1)])
    np.testing.assert_array_equal(dev.to_host(out), want)
    assert run.ok, run
    assert run.launches[0]["counters"]["barriers"] == 2        # one per block


def test_missing_barrier_is_a_race_found_whatever_the_schedule(ext, dev):
    x = np.arange(256, dtype=np.float32)
    src, out = dev.to_device(x), dev.empty(256)
    for schedules in (["forward"], ["reverse"], ["shuffled:5"]):
        with check(schedules=schedules) as run:
            ext.launch_rotate(src, out, 2, 0)
        races = run.of_kind("race")
        assert races, (schedules, run)
        r = races[0]
        assert r["space"] == "shared" and r["allocation"] == "s" and r["kernel"] == "rotate_shared"
        accesses = {t["access"] for t in r["threads"]}
        assert accesses == {"read", "write"}
        lines = {t["source"] for t in r["threads"]}
        assert any("s[t] = in[" in s for s in lines) and any("s[(t + 1) % blockDim.x]" in s for s in lines)


def test_schedules_show_the_race_in_the_result_too(ext, dev):
    x = np.arange(256, dtype=np.float32)
    src, out = dev.to_device(x), dev.empty(256)
    with check(schedules=3) as run:
        ext.launch_rotate(src, out, 2, 0)
    assert "schedule_dependent" in run.kinds(), run
    # the visible result is the forward schedule's, whatever else ran
    with check(schedules=1):
        ext.launch_rotate(src, out, 2, 0)
    forward = dev.to_host(out)
    with check(schedules=3):
        ext.launch_rotate(src, out, 2, 0)
    np.testing.assert_array_equal(dev.to_host(out), forward)


def test_reports_are_identical_over_three_runs(ext, dev):
    x = np.arange(256, dtype=np.float32)
    src, out = dev.to_device(x), dev.empty(256)
    runs = []
    for _ in range(3):
        with check(schedules=3) as run:
            ext.launch_rotate(src, out, 2, 0)
        runs.append(without_launch_ids(run.reports))
    assert runs[0] == runs[1] == runs[2]
    assert runs[0]


def test_barriers_reached_at_different_lines_are_divergence(ext, dev):
    out = dev.empty(32)
    with check() as run:
        ext.launch_two_barriers(out)
    (r,) = run.of_kind("barrier_divergence")
    assert r["what"] == "threads wait at different __syncthreads"
    assert all("__syncthreads()" in t["source"] for t in r["threads"])
    assert np.all(_ints(dev, out, 32) == 1)     # the launch still finished


@pytest.mark.parametrize("threads", [32, 96, 128])
def test_syncthreads_count_and_or(ext, dev, threads):
    out = dev.empty(3)
    with check() as run:
        ext.launch_block_votes(out, threads)
    t = np.arange(threads)
    assert list(_ints(dev, out, 3)) == [int((t % 3 == 0).sum()), int((t < 100).all()), 1]
    assert run.ok, run


# --------------------------------------------------------------------------- atomics

def test_atomics_are_exact_and_never_race_with_each_other(ext, dev):
    rng = np.random.default_rng(0)
    n = 500
    bins = rng.integers(0, 10, n).astype(np.int32)
    vals = rng.standard_normal(n).astype(np.float32)
    B, V = dev.to_device(bins.view(np.float32)), dev.to_device(vals)
    hist, fsum, imax, counter, last = (dev.to_device(np.zeros(k, np.float32)) for k in (10, 1, 1, 1, 1))
    with check(schedules=3) as run:
        assert ext.launch_atomics(B, V, n, hist, fsum, imax, counter, last) == 0
    np.testing.assert_array_equal(_ints(dev, hist, 10), np.bincount(bins, minlength=10))
    # float atomics add in thread order: tolerance of n roundings of the running sum
    np.testing.assert_allclose(dev.to_host(fsum)[0], vals.astype(np.float64).sum(), rtol=0, atol=n * 1e-6 * 30)
    assert _ints(dev, imax, 1)[0] == ((bins * 7) % 13).max()
    assert _ints(dev, counter, 1)[0] == n
    assert 0 <= _ints(dev, last, 1)[0] < n
    assert run.ok, run
    assert run.launches[0]["counters"]["atomics"] > 5 * n


# --------------------------------------------------------------------------- warps

def _expected_shuffles(src, delta, lane_mask, width, threads=64):
    v = np.arange(threads) * 10
    out = np.zeros((threads, 7), np.int64)
    for t in range(threads):
        warp, lane = divmod(t, 32)
        base = warp * 32
        seg = lane & ~(width - 1)
        idx = seg + (src % width)
        up = lane - delta if lane - delta >= seg else lane
        down = lane + delta if lane + delta < seg + width else lane
        x = lane ^ lane_mask
        xor = x if x < seg + width else lane     # an earlier group may be read, a later one not
        ballot = sum(1 << l for l in range(32) if l % 3 == 0)
        out[t] = [v[base + idx], v[base + up], v[base + down], v[base + xor],
                  np.int32(np.uint32(ballot)), 0, 1]
    return out


@pytest.mark.parametrize("src,delta,lane_mask,width", [(3, 1, 1, 32), (5, 4, 16, 32), (37, 2, 3, 8), (1, 3, 12, 8)])
def test_shuffles_and_votes_follow_cuda(ext, dev, src, delta, lane_mask, width):
    out = dev.empty(64 * 7)
    with check() as run:
        assert ext.launch_shuffles(out, src, delta, lane_mask, width) == 0
    got = _ints(dev, out, 64 * 7).reshape(64, 7)
    np.testing.assert_array_equal(got, _expected_shuffles(src, delta, lane_mask, width))
    assert run.ok, run
    assert run.launches[0]["counters"]["warp_ops"] == 2 * 7      # 7 operations, 2 warps


def test_shuffle_waiting_for_exited_lanes_is_reported(ext, dev):
    out = dev.empty(32)
    with check() as run:
        ext.launch_shuffle_after_exit(out, 20)
    (r,) = run.of_kind("shuffle_mask")
    assert "20-31" in r["detail"] and "exited" in r["detail"]
    assert "__shfl_down_sync" in r["threads"][0]["source"]
    got = dev.to_host(out, (20,))
    np.testing.assert_array_equal(got[:19], np.arange(1, 20))   # lanes that had a partner


# --------------------------------------------------------------------------- memory spaces

def test_dynamic_shared_memory_is_sized_by_the_launch(ext, dev):
    x = np.arange(40, dtype=np.float32)
    src, out = dev.to_device(x), dev.empty(40)
    with check() as run:
        ext.launch_reverse_dynamic(src, out, 40, 40 * 4)
    np.testing.assert_array_equal(dev.to_host(out), x[::-1])
    assert run.ok, run
    with check() as run:
        ext.launch_reverse_dynamic(src, out, 40, 39 * 4)      # one float too few
    oob = run.of_kind("out_of_bounds")
    assert oob and oob[0]["space"] == "shared" and oob[0]["index"] == 39
    assert "extern __shared__" in oob[0]["allocation"]


def test_constant_and_device_variables(ext, dev):
    x = np.linspace(-1, 1, 70).astype(np.float32)
    c = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    X, Y = dev.to_device(x), dev.empty(70)
    with check() as run:
        assert ext.set_coef(c) == 0 and ext.reset_calls() == 0
        assert ext.launch_poly(X, Y, 70) == 0
        assert ext.get_calls() == 70
    np.testing.assert_allclose(dev.to_host(Y), c[0] + x * (c[1] + x * (c[2] + x * c[3])), rtol=1e-6)
    assert run.ok, run


# --------------------------------------------------------------------------- counters

@pytest.mark.parametrize("stride,conflicts", [(1, 0), (2, 1), (32, 31), (33, 0)])
def test_bank_conflicts_per_warp_access(ext, dev, stride, conflicts):
    out = dev.empty(32)
    with check() as run:
        ext.launch_bank_pattern(out, stride)
    np.testing.assert_array_equal(dev.to_host(out), np.arange(32, dtype=np.float32))
    c = run.counters("bank_pattern")
    assert c["shared_store_requests"] == c["shared_load_requests"] == 1
    assert c["shared_bank_conflicts"] == 2 * conflicts       # the store and the load


@pytest.mark.parametrize("stride,sectors", [(0, 1), (1, 4), (2, 8), (8, 32), (100, 32)])
def test_sectors_per_warp_load(ext, dev, stride, sectors):
    x = np.arange(64 * max(stride, 1), dtype=np.float32)
    src, out = dev.to_device(x), dev.empty(64)
    with check() as run:
        ext.launch_gather(src, out, stride, 2)
    np.testing.assert_array_equal(dev.to_host(out), x[np.arange(64) * stride])
    c = run.counters("gather_stride")
    assert c["global_loads"] == c["global_stores"] == 64
    assert c["global_load_requests"] == c["global_store_requests"] == 2
    assert c["global_load_sectors"] == 2 * sectors
    assert c["global_store_sectors"] == 2 * 4          # 32 floats in a row: 128 bytes


# --------------------------------------------------------------------------- errors

def test_uninitialised_device_memory(ext):
    with check() as run:
        ext.uninitialised_read(0)
    (r,) = run.of_kind("uninitialized_read")
    assert r["space"] == "global" and r["allocation"] == "a" and "in[threadIdx.x]" in r["threads"][0]["source"]
    with check() as run:
        ext.uninitialised_read(1)
    assert run.ok, run


def test_copy_direction_and_size_are_checked(ext):
    with check() as run:
        assert ext.wrong_direction() == 1             # cudaErrorInvalidValue
        assert ext.copy_too_much() == 1
    whats = [r["what"] for r in run.of_kind("api_error")]
    assert whats == ["wrong copy direction", "copy out of bounds"]
    assert "swapped" in run.of_kind("api_error")[0]["detail"]


def test_invalid_configuration_does_not_run_the_kernel(ext):
    with check() as run:
        assert ext.bad_config() == 9                  # cudaErrorInvalidConfiguration
    (r,) = run.of_kind("launch_error")
    assert "2048 threads" in r["detail"] and "1024" in r["detail"]
    assert run.launches[0]["counters"]["threads"] == 0
    assert ext.error_string(9) == "invalid configuration argument"


def test_host_pointer_in_a_kernel_stops_the_launch(ext):
    with check() as run:
        assert ext.host_pointer_to_kernel() == 700    # cudaErrorIllegalAddress
    (r,) = run.of_kind("invalid_address")
    assert "p[threadIdx.x] = 1.0f" in r["threads"][0]["source"]
    assert run.launches[0]["error"] == "cudaErrorIllegalAddress"


def test_host_code_reading_device_memory_is_reported(ext):
    with check() as run:
        assert ext.host_dereference() == 0.0
    (r,) = run.of_kind("host_access")
    assert "float v = d[1]" in r["threads"][0]["source"]


def test_assert_in_a_kernel(ext):
    with check() as run:
        assert ext.device_assert() == 710             # cudaErrorAssert
    (r,) = run.of_kind("assert")
    assert "threadIdx.x < n" in r["detail"]


def test_outside_check_reports_are_warnings(ext, dev):
    x = np.arange(128, dtype=np.float32)
    src, out = dev.to_device(x), dev.empty(128)
    with pytest.warns(emulator.CudaSanitizerWarning, match="data race"):
        ext.launch_rotate(src, out, 1, 0)
    assert emulator.last_launch()["kernel"] == "rotate_shared"


def test_check_restores_options(ext):
    before = emulator.get_options()
    with check(races=False, counters=False, max_reports=3):
        assert emulator.get_options()["races"] is False
    assert emulator.get_options() == before


def test_check_arguments_are_validated():
    with pytest.raises(ValueError, match="unknown schedule"):
        with check(schedules=["sideways"]):
            pass
    with pytest.raises(ValueError, match="at least 1"):
        with check(schedules=0):
            pass
