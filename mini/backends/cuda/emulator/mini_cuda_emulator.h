// mini_cuda_emulator.h: CUDA C++ on a CPU, for mini's course.
//
// Where no NVIDIA GPU is present, mini.utils.cpp_extension.load_inline compiles your
// CUDA source with the ordinary C++ compiler against this header, so the same source
// runs here and, unchanged, under nvcc on a GPU.  Two small rewrites happen first:
//
//   kernel<<<grid, block, shmem>>>(args);   becomes  ::mini_cuda::launch(...)
//   __shared__ float tile[16][16];          becomes  a reference into the block's
//                                                    shared memory
//
// How a launch runs (the details are in runtime/scheduler.cpp):
//   * blocks run one after another; inside a block every CUDA thread is a *fiber*, a
//     function with its own stack that the scheduler can pause and resume.  A fiber
//     runs until it reaches __syncthreads(), a warp-level operation (__shfl_*_sync,
//     __syncwarp, votes) or its end; when every thread of the block waits at the
//     barrier, all of them continue.  So __syncthreads really is a barrier here.
//   * the 32 threads of a warp meet at every warp-level operation (lockstep), which
//     is what shuffles need.
//   * the order in which ready threads run is a *schedule*: forward, reverse, or a
//     seeded shuffle.  A correct kernel gives the same result under every schedule.
//
// What is checked (in the spirit of NVIDIA's compute-sanitizer), when the module is
// built with checks (the default for your code):
//   * every load and store your kernel makes goes through a hook (the compiler's
//     ThreadSanitizer instrumentation, -fsanitize=thread, calls __tsan_read4(addr),
//     __tsan_write4(addr), ... before each access; the runtime implements those hooks
//     instead of ThreadSanitizer).  The hook knows the address, the thread and the
//     instruction, so it can report:
//       - out-of-bounds accesses of global and shared memory (with block, thread,
//         index and allocation), and pointers that are not device memory at all;
//       - reads of memory nobody wrote (cudaMalloc does not zero memory);
//       - data races: two threads touch the same bytes between the same two
//         barriers, at least one of them writes, and not both are atomic;
//   * __syncthreads() that not every thread of the block reaches (barrier divergence),
//     and shuffles whose mask leaves out a lane that executes them;
//   * counters: global loads and stores, 32-byte sectors per warp-wide access
//     (coalescing) and shared-memory bank conflicts.
// The checks do not depend on the order threads run in.  Running a launch under more
// than one schedule (mini.cuda.emulator.check(schedules=3)) adds a second line of
// evidence: results that differ between schedules are reported too.
//
// Not modelled: timing, the memory model of concurrent blocks (blocks never overlap
// here), textures, cooperative groups, streams running concurrently (stream work is
// done in order, at once), dynamic parallelism.  A thread that spins waiting for
// another thread (a spin lock, a flag) never gives the CPU back: it hangs here.
#pragma once

#if !defined(__cplusplus) || __cplusplus < 201703L
#error "mini's CUDA emulator needs C++17"
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

#define MINI_CUDA_EMULATOR 1
// CUDA's own version macros: code that checks them sees a recent CUDA.
#ifndef CUDART_VERSION
#define CUDART_VERSION 12000
#endif

// Code the runtime itself must not see as kernel memory accesses.
#define MINI_CUDA_UNCHECKED __attribute__((no_sanitize("thread")))

// ------------------------------------------------------------------------ qualifiers
// On a CPU every function can run anywhere: the qualifiers only document intent.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
// __noinline__ is rewritten to __attribute__((noinline)) in your source (a macro of that
// name would break the C++ standard headers, which use it inside __attribute__).
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __grid_constant__
// __constant__ variables live in one section per module, which the runtime registers
// as read-only device memory (kernels may read it, cudaMemcpyToSymbol writes it).
#ifdef __APPLE__
#define MINI_CUDA_SECTION(name) __attribute__((section("__DATA," name), used))
#else
#define MINI_CUDA_SECTION(name) __attribute__((section(name), used))
#endif
#define __constant__ MINI_CUDA_SECTION("mini_cuda_const")
// __device__ variables (outside functions) are rewritten to this: one section per
// module, registered as device memory.
#define MINI_CUDA_DEVICE_VARIABLE MINI_CUDA_SECTION("mini_cuda_devvar")
// __shared__ declarations are rewritten before compiling (see the top of this file);
// one that reaches the compiler was not recognised.
#define __shared__ MINI_CUDA_UNREWRITTEN_SHARED_DECLARATION_write_one_variable_per_declaration
// __restrict__ needs nothing: GCC and Clang know it.

// ------------------------------------------------------------------------ vector types
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
};
using uint3 = dim3;

#define MINI_CUDA_VEC2(T, N) struct alignas(2 * sizeof(T)) N { T x, y; };
#define MINI_CUDA_VEC3(T, N) struct N { T x, y, z; };
#define MINI_CUDA_VEC4(T, N) struct alignas(4 * sizeof(T) >= 16 ? 16 : 4 * sizeof(T)) N { T x, y, z, w; };
MINI_CUDA_VEC2(float, float2)   MINI_CUDA_VEC3(float, float3)   MINI_CUDA_VEC4(float, float4)
MINI_CUDA_VEC2(double, double2) MINI_CUDA_VEC3(double, double3) MINI_CUDA_VEC4(double, double4)
MINI_CUDA_VEC2(int, int2)       MINI_CUDA_VEC3(int, int3)       MINI_CUDA_VEC4(int, int4)
MINI_CUDA_VEC2(unsigned int, uint2)                             MINI_CUDA_VEC4(unsigned int, uint4)
#undef MINI_CUDA_VEC2
#undef MINI_CUDA_VEC3
#undef MINI_CUDA_VEC4
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float3 make_float3(float x, float y, float z) { return {x, y, z}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int3 make_int3(int x, int y, int z) { return {x, y, z}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return dim3(x, y, z); }

// ------------------------------------------------------------------------ the runtime
// Everything below the CUDA names is implemented in the emulator's runtime library
// (runtime/*.cpp), one per process, shared by every module, as the CUDA driver is.
extern "C" {

// The built-in variables of the thread that runs now.  The scheduler writes them at
// every switch between threads; your kernel reads them through the macros below.
struct mini_cuda_builtins {
    dim3 thread_idx, block_idx, block_dim, grid_dim;
};
extern mini_cuda_builtins mini_cuda_now;

// Launching: the header packs the arguments; the runtime runs the grid.
struct mini_cuda_launch_desc {
    const char* kernel_name;     // as written before <<< (e.g. "matmul<16>")
    const char* arg_names;       // the argument expressions, separated by '\x1f'
    int line;                    // the line of the <<< in your source
    dim3 grid, block;
    size_t dynamic_shared;       // the third launch parameter
    int checked;                 // 1: this module reports accesses (built with checks)
    void (*run_thread)(void* ctx);   // runs the kernel body for the current thread
    void* ctx;
    int n_args;                  // kernel arguments, for naming allocations:
    const void* const* arg_pointers; // each argument's value if it is a pointer, else null
};
void* mini_cuda_param_buffer(size_t bytes, size_t align);
void mini_cuda_launch(const mini_cuda_launch_desc* desc);
void* mini_cuda_shared_variable(int decl_id, size_t bytes, size_t align, const char* name, int line);
void* mini_cuda_dynamic_shared(void);
void mini_cuda_atomic_access(void* address, size_t bytes, void* pc);
void mini_cuda_warp_op(int op, unsigned mask, const void* value, void* result, size_t bytes,
                       int arg, int width, void* pc);
void mini_cuda_register_constant_bank(void* begin, void* end);
void mini_cuda_register_device_variables(void* begin, void* end);
void mini_cuda_device_assert(const char* expr, const char* file, int line);
}

// The built-in variables.  They are read-only values, as in CUDA.
#define threadIdx (static_cast<const dim3&>(mini_cuda_now.thread_idx))
#define blockIdx (static_cast<const dim3&>(mini_cuda_now.block_idx))
#define blockDim (static_cast<const dim3&>(mini_cuda_now.block_dim))
#define gridDim (static_cast<const dim3&>(mini_cuda_now.grid_dim))
static constexpr int warpSize = 32;

// ------------------------------------------------------------------------ errors
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidSymbol = 13,
    cudaErrorInvalidHostPointer = 16,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorAssert = 710,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999
} cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
#define cudaMemAttachGlobal 0x01
#define cudaHostAllocDefault 0x00

typedef struct mini_cuda_stream* cudaStream_t;
typedef struct mini_cuda_event* cudaEvent_t;

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int clockRate;
    size_t totalConstMem;
    int major, minor;
    int multiProcessorCount;
    int maxThreadsPerMultiProcessor;
    int maxBlocksPerMultiProcessor;
    size_t sharedMemPerMultiprocessor;
    int regsPerMultiprocessor;
    int memoryClockRate;
    int memoryBusWidth;
    int l2CacheSize;
};

extern "C" {
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);

cudaError_t cudaMalloc(void** devPtr, size_t size);
cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags);
cudaError_t cudaMallocHost(void** ptr, size_t size);
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags);
cudaError_t cudaFree(void* devPtr);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemset(void* devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream);
cudaError_t mini_cuda_memcpy_symbol(void* symbol, const void* src, size_t count, size_t offset, int to_symbol);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t mini_cuda_func_set_attribute(int attr, int value);
}

// CUDA's C++ conveniences: typed pointers and default arguments.
template <class T> inline cudaError_t cudaMalloc(T** devPtr, size_t size) {
    return cudaMalloc(reinterpret_cast<void**>(devPtr), size);
}
template <class T> inline cudaError_t cudaMallocManaged(T** devPtr, size_t size,
                                                        unsigned int flags = cudaMemAttachGlobal) {
    return cudaMallocManaged(reinterpret_cast<void**>(devPtr), size, flags);
}
template <class T> inline cudaError_t cudaMallocHost(T** ptr, size_t size) {
    return cudaMallocHost(reinterpret_cast<void**>(ptr), size);
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
    return cudaMemcpyAsync(dst, src, count, kind, nullptr);
}
inline cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count) {
    return cudaMemsetAsync(devPtr, value, count, nullptr);
}
inline cudaError_t cudaEventRecord(cudaEvent_t event) { return cudaEventRecord(event, nullptr); }
template <class T> inline cudaError_t cudaMemcpyToSymbol(const T& symbol, const void* src, size_t count,
                                                         size_t offset = 0,
                                                         cudaMemcpyKind = cudaMemcpyHostToDevice) {
    return mini_cuda_memcpy_symbol((void*)&symbol, src, count, offset, 1);
}
template <class T> inline cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t count,
                                                           size_t offset = 0,
                                                           cudaMemcpyKind = cudaMemcpyDeviceToHost) {
    return mini_cuda_memcpy_symbol((void*)&symbol, dst, count, offset, 0);
}
template <class F> inline cudaError_t cudaFuncSetAttribute(F*, cudaFuncAttribute attr, int value) {
    return mini_cuda_func_set_attribute((int)attr, value);
}

// ------------------------------------------------------------------------ barriers and warps
extern "C" {
// __syncthreads(): wait until every thread of the block arrives here.  A barrier is
// known by its source line (the compiler may copy one call into several places), so
// two __syncthreads() written on one line count as one barrier.
int mini_cuda_barrier(int kind, int predicate, int line);
void __threadfence(void);
void __threadfence_block(void);
}
#define __syncthreads() ((void)mini_cuda_barrier(0, 0, __LINE__))
#define __syncthreads_count(predicate) mini_cuda_barrier(1, (predicate), __LINE__)   // how many true
#define __syncthreads_and(predicate) mini_cuda_barrier(2, (predicate), __LINE__)     // all true?
#define __syncthreads_or(predicate) mini_cuda_barrier(3, (predicate), __LINE__)      // any true?

namespace mini_cuda {
// What the warp-level operations ask of the runtime (see runtime/scheduler.cpp).
enum WarpOp { SHFL_IDX = 0, SHFL_UP = 1, SHFL_DOWN = 2, SHFL_XOR = 3, SYNCWARP = 4,
              VOTE_ALL = 5, VOTE_ANY = 6, VOTE_BALLOT = 7, ACTIVEMASK = 8 };

template <class T> struct same { using type = T; };
template <class T> using same_t = typename same<T>::type;  // stops template deduction

// noinline: so that __builtin_return_address(0) is the line in *your* kernel.
template <class T> __attribute__((noinline)) MINI_CUDA_UNCHECKED
T shuffle(int op, unsigned mask, T var, int arg, int width, void* pc) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "__shfl_*_sync moves values of at most 8 bytes");
    T out = var;
    mini_cuda_warp_op(op, mask, &var, &out, sizeof(T), arg, width, pc);
    return out;
}
}  // namespace mini_cuda

// Each lane of the warp passes `var`, and receives the `var` of another lane:
//   __shfl_sync(mask, v, src)       lane src's value
//   __shfl_up_sync(mask, v, d)      lane (lane - d)'s value (own value below 0)
//   __shfl_down_sync(mask, v, d)    lane (lane + d)'s value (own value past the warp)
//   __shfl_xor_sync(mask, v, m)     lane (lane ^ m)'s value
// `mask` names the lanes that take part: each of them must execute the same shuffle.
template <class T> __attribute__((noinline)) MINI_CUDA_UNCHECKED
T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize) {
    return mini_cuda::shuffle<T>(mini_cuda::SHFL_IDX, mask, var, srcLane, width, __builtin_return_address(0));
}
template <class T> __attribute__((noinline)) MINI_CUDA_UNCHECKED
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    return mini_cuda::shuffle<T>(mini_cuda::SHFL_UP, mask, var, (int)delta, width, __builtin_return_address(0));
}
template <class T> __attribute__((noinline)) MINI_CUDA_UNCHECKED
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    return mini_cuda::shuffle<T>(mini_cuda::SHFL_DOWN, mask, var, (int)delta, width, __builtin_return_address(0));
}
template <class T> __attribute__((noinline)) MINI_CUDA_UNCHECKED
T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize) {
    return mini_cuda::shuffle<T>(mini_cuda::SHFL_XOR, mask, var, laneMask, width, __builtin_return_address(0));
}
__attribute__((noinline)) MINI_CUDA_UNCHECKED inline void __syncwarp(unsigned mask = 0xffffffffu) {
    mini_cuda_warp_op(mini_cuda::SYNCWARP, mask, nullptr, nullptr, 0, 0, 32, __builtin_return_address(0));
}
__attribute__((noinline)) MINI_CUDA_UNCHECKED inline int __all_sync(unsigned mask, int predicate) {
    int out = 0;
    mini_cuda_warp_op(mini_cuda::VOTE_ALL, mask, &predicate, &out, sizeof(int), 0, 32, __builtin_return_address(0));
    return out;
}
__attribute__((noinline)) MINI_CUDA_UNCHECKED inline int __any_sync(unsigned mask, int predicate) {
    int out = 0;
    mini_cuda_warp_op(mini_cuda::VOTE_ANY, mask, &predicate, &out, sizeof(int), 0, 32, __builtin_return_address(0));
    return out;
}
__attribute__((noinline)) MINI_CUDA_UNCHECKED inline unsigned __ballot_sync(unsigned mask, int predicate) {
    unsigned out = 0;
    mini_cuda_warp_op(mini_cuda::VOTE_BALLOT, mask, &predicate, &out, sizeof(unsigned), 0, 32,
                      __builtin_return_address(0));
    return out;
}
__attribute__((noinline)) MINI_CUDA_UNCHECKED inline unsigned __activemask() {
    unsigned out = 0;
    mini_cuda_warp_op(mini_cuda::ACTIVEMASK, 0, nullptr, &out, sizeof(unsigned), 0, 32, __builtin_return_address(0));
    return out;
}

// ------------------------------------------------------------------------ atomics
// Threads here never run at the same time, so an atomic is a plain read-modify-write;
// what makes it atomic for the checker is that it is announced as one (two atomics on
// the same address never race; an atomic and a plain access do).
#ifdef MINI_CUDA_CHECKS
#define MINI_CUDA_ANNOUNCE_ATOMIC(p) mini_cuda_atomic_access((void*)(p), sizeof(*(p)), __builtin_return_address(0))
#else
#define MINI_CUDA_ANNOUNCE_ATOMIC(p) ((void)0)
#endif
#define MINI_CUDA_ATOMIC(NAME, EXPR)                                                           \
    template <class T> __attribute__((noinline)) MINI_CUDA_UNCHECKED                          \
    T NAME(T* address, mini_cuda::same_t<T> val) {                                             \
        MINI_CUDA_ANNOUNCE_ATOMIC(address);                                                    \
        T old = *address;                                                                      \
        *address = (EXPR);                                                                     \
        return old;                                                                            \
    }
MINI_CUDA_ATOMIC(atomicAdd, old + val)
MINI_CUDA_ATOMIC(atomicSub, old - val)
MINI_CUDA_ATOMIC(atomicExch, val)
MINI_CUDA_ATOMIC(atomicMax, old < val ? val : old)
MINI_CUDA_ATOMIC(atomicMin, val < old ? val : old)
MINI_CUDA_ATOMIC(atomicAnd, old & val)
MINI_CUDA_ATOMIC(atomicOr, old | val)
MINI_CUDA_ATOMIC(atomicXor, old ^ val)
MINI_CUDA_ATOMIC(atomicInc, (old >= val) ? 0 : old + 1)
MINI_CUDA_ATOMIC(atomicDec, (old == 0 || old > val) ? val : old - 1)
#undef MINI_CUDA_ATOMIC
template <class T> __attribute__((noinline)) MINI_CUDA_UNCHECKED
T atomicCAS(T* address, mini_cuda::same_t<T> compare, mini_cuda::same_t<T> val) {
    MINI_CUDA_ANNOUNCE_ATOMIC(address);
    T old = *address;
    if (old == compare) *address = val;
    return old;
}

// ------------------------------------------------------------------------ math
// The float functions of <cmath> (expf, sqrtf, fmaxf, ...) are CUDA's too.  The
// fast intrinsics compute the exact function here.
using std::abs;
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __powf(float a, float b) { return std::pow(a, b); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / std::sqrt(x); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline int __float2int_rn(float x) { return (int)std::nearbyint(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float f) { int x; std::memcpy(&x, &f, 4); return x; }
inline unsigned __float_as_uint(float f) { unsigned x; std::memcpy(&x, &f, 4); return x; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
// CUDA's min and max take mixed int/float arguments in device code.
template <class A, class B> inline auto min(A a, B b) -> typename std::common_type<A, B>::type {
    return b < a ? b : a;
}
template <class A, class B> inline auto max(A a, B b) -> typename std::common_type<A, B>::type {
    return a < b ? b : a;
}
template <class T> inline T __ldg(const T* p) { return *p; }

// A failing assert() in a kernel stops the launch with cudaErrorAssert, as on a GPU
// (instead of ending the Python process).
#undef assert
#define assert(e) ((e) ? (void)0 : mini_cuda_device_assert(#e, __FILE__, __LINE__))

// ------------------------------------------------------------------------ launching
namespace mini_cuda {

struct LaunchConfig {
    dim3 grid, block;
    size_t shared;
    LaunchConfig(dim3 g, dim3 b, size_t s = 0, cudaStream_t = nullptr) : grid(g), block(b), shared(s) {}
};

// What each CUDA thread of a launch runs: the kernel, called with (its own copy of)
// the arguments.  The arguments live in the launch's parameter buffer.
template <class Body, class Args> struct LaunchContext {
    Body body;
    Args* args;
};
template <class Body, class Args> MINI_CUDA_UNCHECKED void run_thread(void* ctx) {
    auto* c = static_cast<LaunchContext<Body, Args>*>(ctx);
    std::apply(c->body, *c->args);
}

template <class A> const void* pointer_value(const A& a) {
    if constexpr (std::is_pointer<A>::value) return (const void*)a;
    else return nullptr;
}

// kernel<<<grid, block, shared>>>(args...) becomes
//   launch(LaunchConfig(grid, block, shared), "kernel", "args...", line,
//          [](auto&... a) { kernel(a...); }, args...)
template <class Body, class... A>
MINI_CUDA_UNCHECKED void launch(const LaunchConfig& cfg, const char* name, const char* arg_names, int line,
                                Body body, A&&... args) {
    using Args = std::tuple<typename std::decay<A>::type...>;
    void* buf = mini_cuda_param_buffer(sizeof(Args), alignof(Args));
    Args* params = new (buf) Args(std::forward<A>(args)...);
    const void* pointers[sizeof...(A) + 1] = {pointer_value(args)..., nullptr};
    LaunchContext<Body, Args> ctx{body, params};
    mini_cuda_launch_desc d;
    d.kernel_name = name;
    d.arg_names = arg_names;
    d.line = line;
    d.grid = cfg.grid;
    d.block = cfg.block;
    d.dynamic_shared = cfg.shared;
#ifdef MINI_CUDA_CHECKS
    d.checked = 1;
#else
    d.checked = 0;
#endif
    d.run_thread = &run_thread<Body, Args>;
    d.ctx = &ctx;
    d.n_args = (int)sizeof...(A);
    d.arg_pointers = pointers;
    mini_cuda_launch(&d);
    params->~Args();
}

// __shared__ T name[dims];  becomes  auto& name = shared<T[dims]>(id, "name", line);
// The first thread of a block that reaches the declaration places the variable in
// the block's shared memory; the others get the same place.
template <class T> MINI_CUDA_UNCHECKED T& shared(int decl_id, const char* name, int line, size_t align = 0) {
    return *static_cast<T*>(mini_cuda_shared_variable(decl_id, sizeof(T), align > alignof(T) ? align : alignof(T),
                                                      name, line));
}
// extern __shared__ T name[];  becomes  T* name = dynamic_shared<T>();
// (the bytes the launch asked for with its third parameter).
template <class T> MINI_CUDA_UNCHECKED T* dynamic_shared() {
    return static_cast<T*>(mini_cuda_dynamic_shared());
}
// The same two, for declarations outside any function: an object that finds the
// current block's variable each time it is used.
template <class T> struct SharedAtNamespaceScope {
    int decl_id; const char* name; int line; size_t align;
    MINI_CUDA_UNCHECKED T& get() const { return shared<T>(decl_id, name, line, align); }
    MINI_CUDA_UNCHECKED operator T&() const { return get(); }
    template <class I> MINI_CUDA_UNCHECKED auto& operator[](I i) const { return get()[i]; }
};
template <class T> struct DynamicSharedAtNamespaceScope {
    MINI_CUDA_UNCHECKED operator T*() const { return dynamic_shared<T>(); }
    template <class I> MINI_CUDA_UNCHECKED T& operator[](I i) const { return dynamic_shared<T>()[i]; }
};

// Each module registers its __constant__ variables as read-only device memory, and its
// __device__ variables as device memory.  The linker marks where each section starts
// and stops (ELF: __start_<name>, __stop_<name>; Mach-O: section$start$__DATA$<name>).
#ifdef __APPLE__
extern "C" char __start_mini_cuda_const[] __asm("section$start$__DATA$mini_cuda_const");
extern "C" char __stop_mini_cuda_const[] __asm("section$end$__DATA$mini_cuda_const");
extern "C" char __start_mini_cuda_devvar[] __asm("section$start$__DATA$mini_cuda_devvar");
extern "C" char __stop_mini_cuda_devvar[] __asm("section$end$__DATA$mini_cuda_devvar");
#else
extern "C" char __start_mini_cuda_const[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_mini_cuda_const[] __attribute__((weak, visibility("hidden")));
extern "C" char __start_mini_cuda_devvar[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_mini_cuda_devvar[] __attribute__((weak, visibility("hidden")));
#endif
struct RegisterConstants {
    MINI_CUDA_UNCHECKED RegisterConstants() {
        if (static_cast<char*>(__start_mini_cuda_const) != static_cast<char*>(__stop_mini_cuda_const))
            mini_cuda_register_constant_bank(__start_mini_cuda_const, __stop_mini_cuda_const);
        if (static_cast<char*>(__start_mini_cuda_devvar) != static_cast<char*>(__stop_mini_cuda_devvar))
            mini_cuda_register_device_variables(__start_mini_cuda_devvar, __stop_mini_cuda_devvar);
    }
};
static RegisterConstants register_constants_of_this_module;

}  // namespace mini_cuda
