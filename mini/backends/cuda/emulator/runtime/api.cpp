// The CUDA runtime API of the emulator, its error state, and the C API through which
// Python (mini/backends/cuda/emulator.py) sets options and collects reports.
#include "runtime.h"

#include <chrono>
#include <dlfcn.h>
#include <stdexcept>

namespace mini_cuda {

namespace {
Options g_options;
std::vector<std::unique_ptr<LaunchRecord>> g_records;    // launches not yet collected by Python
std::unique_ptr<LaunchRecord> g_host;                    // reports made outside kernels
uint64_t g_launch_ids = 0;
uint64_t g_records_dropped = 0;
constexpr size_t MAX_PENDING_RECORDS = 10000;
cudaError_t g_last_error = cudaSuccess;
cudaError_t g_async_error = cudaSuccess;      // an error of a launch, returned by the next sync

struct Transfers {
    uint64_t h2d_bytes = 0, d2h_bytes = 0, d2d_bytes = 0, h2d_count = 0, d2h_count = 0, d2d_count = 0;
    uint64_t launches = 0;
} g_transfers;
}  // namespace

Options& options() { return g_options; }

LaunchRecord* host_record() {
    if (!g_host) {
        g_host = std::make_unique<LaunchRecord>();
        g_host->kernel = "";
    }
    return g_host.get();
}

LaunchRecord* new_launch_record() {
    g_transfers.launches++;
    if (g_records.size() >= MAX_PENDING_RECORDS) {   // nobody collects: keep the newest
        g_records.erase(g_records.begin());
        g_records_dropped++;
    }
    g_records.push_back(std::make_unique<LaunchRecord>());
    g_records.back()->id = ++g_launch_ids;
    return g_records.back().get();
}

uint64_t fast_key(uint64_t tag, uint64_t a, uint64_t b, uint64_t c) {
    auto mix = [](uint64_t x) {
        x += 0x9e3779b97f4a7c15ull;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        return x ^ (x >> 31);
    };
    return mix(mix(mix(mix(tag) ^ a) ^ b) ^ c) | 1;
}

bool repeat(uint64_t key) {
    LaunchRecord* rec = g_launch ? g_launch->record : host_record();
    auto it = rec->fast_index.find(key);
    if (it == rec->fast_index.end()) return false;
    if (it->second == SIZE_MAX) rec->dropped_reports++;
    else rec->reports[it->second].count++;
    return true;
}

void discard_launch_record(LaunchRecord* rec) {
    if (!g_records.empty() && g_records.back().get() == rec) g_records.pop_back();
}

void report(Report r, const std::string& key, uint64_t fast) {
    LaunchRecord* rec = g_launch ? g_launch->record : host_record();
    auto it = rec->report_index.find(key);
    if (it != rec->report_index.end()) {
        rec->reports[it->second].count++;
        if (fast) rec->fast_index.emplace(fast, it->second);
        return;
    }
    if ((int)rec->reports.size() >= g_options.max_reports) {
        rec->dropped_reports++;
        if (fast) rec->fast_index.emplace(fast, SIZE_MAX);
        return;
    }
    if (r.region) {   // copy what we need: the region may be freed before Python reads this
        r.alloc_name = r.region->name;
        r.alloc_id = r.region->id;
        r.alloc_bytes = r.region->size;
        r.alloc_line = r.region->line;
        if (r.space.empty()) r.space = r.region->space == SHARED ? "shared" : "global";
        r.region = nullptr;
    }
    if (fast) rec->fast_index.emplace(fast, rec->reports.size());
    rec->report_index.emplace(key, rec->reports.size());
    rec->reports.push_back(std::move(r));
}

void set_last_error(cudaError_t e) {
    g_last_error = e;
    if (e == cudaErrorIllegalAddress || e == cudaErrorAssert || e == cudaErrorLaunchFailure ||
        e == cudaErrorLaunchOutOfResources)
        g_async_error = e;
}

void count_transfer(int kind, size_t bytes) {
    if (kind == cudaMemcpyHostToDevice) { g_transfers.h2d_bytes += bytes; g_transfers.h2d_count++; }
    else if (kind == cudaMemcpyDeviceToHost) { g_transfers.d2h_bytes += bytes; g_transfers.d2h_count++; }
    else if (kind == cudaMemcpyDeviceToDevice) { g_transfers.d2d_bytes += bytes; g_transfers.d2d_count++; }
}

namespace {
cudaError_t fail(cudaError_t e) {
    g_last_error = e;
    return e;
}

void api_report(const char* what, const std::string& detail, const std::string& key, const Region* r = nullptr) {
    Report rep;
    rep.kind = "api_error";
    rep.what = what;
    rep.detail = detail;
    rep.region = r;
    rep.a.site = site_of((uintptr_t)__builtin_return_address(0));
    report(rep, key);
}

// Device memory for the copy functions: cudaMalloc'd or managed (not pinned host memory).
Region* device_region(const void* p) {
    Region* r = find_global((uintptr_t)p);
    if (!r || r->host_pinned) return nullptr;
    if ((uintptr_t)p < r->base || (uintptr_t)p >= r->base + (r->size ? r->size : 1)) return nullptr;
    return r;
}

std::string kind_name(int kind) {
    switch (kind) {
        case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
        case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
        case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
        case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
        default: return "cudaMemcpyDefault";
    }
}

// Checks a copy of `count` bytes and performs it.
cudaError_t memcpy_checked(void* dst, const void* src, size_t count, int kind, const char* fn) {
    if (count == 0) return cudaSuccess;
    if (!dst || !src) {
        api_report("null pointer", std::string(fn) + " with a null pointer", std::string("null:") + fn);
        return fail(cudaErrorInvalidValue);
    }
    Region* rd = device_region(dst);
    Region* rs = device_region(src);
    int actual = (rs ? 2 : 0) + (rd ? 1 : 0);   // 0 H2H, 1 H2D, 2 D2H, 3 D2D
    static const int as_kind[4] = {cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                   cudaMemcpyDeviceToDevice};
    bool managed_involved = (rd && rd->managed) || (rs && rs->managed);
    if (kind != cudaMemcpyDefault && kind != as_kind[actual] && !managed_involved) {
        api_report("wrong copy direction",
                   std::string(fn) + "(dst, src, " + std::to_string(count) + ", " + kind_name(kind) +
                       "): but dst is " + (rd ? "device" : "host") + " memory and src is " +
                       (rs ? "device" : "host") + " memory (" + kind_name(as_kind[actual]) +
                       "); is the order (dst, src) swapped?",
                   std::string("dir:") + fn + std::to_string(kind));
        return fail(cudaErrorInvalidValue);
    }
    if (kind == cudaMemcpyDefault || managed_involved) kind = as_kind[actual];
    if (rd && (uintptr_t)dst + count > rd->base + rd->size) {
        api_report("copy out of bounds",
                   std::string(fn) + " writes " + std::to_string(count) + " bytes at byte " +
                       std::to_string((uintptr_t)dst - rd->base) + " of " + rd->describe(),
                   std::string("cpyd:") + std::to_string(rd->id), rd);
        return fail(cudaErrorInvalidValue);
    }
    if (rs && (uintptr_t)src + count > rs->base + rs->size) {
        api_report("copy out of bounds",
                   std::string(fn) + " reads " + std::to_string(count) + " bytes at byte " +
                       std::to_string((uintptr_t)src - rs->base) + " of " + rs->describe(),
                   std::string("cpys:") + std::to_string(rs->id), rs);
        return fail(cudaErrorInvalidValue);
    }
    if (rs && !rs->written.empty() && g_options.initcheck) {
        const uint8_t* w = &rs->written[(uintptr_t)src - rs->base];
        size_t unwritten = 0, first = (size_t)-1;
        for (size_t i = 0; i < count; ++i)
            if (!w[i]) { ++unwritten; if (first == (size_t)-1) first = i; }
        if (unwritten) {
            Report rep;
            rep.kind = "uninitialized_read";
            rep.what = "copy";
            rep.space = "global";
            rep.region = rs;
            rep.offset = (long long)((uintptr_t)src - rs->base + first);
            rep.bytes = count;
            rep.a.site = site_of((uintptr_t)__builtin_return_address(0));
            rep.detail = std::string(fn) + " copies " + std::to_string(unwritten) + " of " + std::to_string(count) +
                         " bytes of " + rs->describe() + " that nothing wrote (first at byte " +
                         std::to_string((uintptr_t)src - rs->base + first) +
                         "): did the kernel run, and does it cover every element?";
            report(rep, "uninitcpy:" + std::to_string(rs->id));
        }
    }
    if (g_async_error != cudaSuccess) {
        cudaError_t e = g_async_error;
        g_async_error = cudaSuccess;
        return fail(e);
    }
    std::memmove(dst, src, count);
    if (rd) mark_written(rd, (uintptr_t)dst, count);
    count_transfer(kind, count);
    return cudaSuccess;
}

const char* error_string(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInitializationError: return "initialization error";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidSymbol: return "invalid device symbol";
        case cudaErrorInvalidHostPointer: return "invalid host pointer";
        case cudaErrorInvalidDevicePointer: return "invalid device pointer";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorInvalidDeviceFunction: return "invalid device function";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
        case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
        case cudaErrorAssert: return "device-side assert triggered";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        case cudaErrorNotSupported: return "operation not supported";
        default: return "unknown error";
    }
}

const char* error_name(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInitializationError: return "cudaErrorInitializationError";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidSymbol: return "cudaErrorInvalidSymbol";
        case cudaErrorInvalidHostPointer: return "cudaErrorInvalidHostPointer";
        case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
        case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
        case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
        case cudaErrorAssert: return "cudaErrorAssert";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
        case cudaErrorNotSupported: return "cudaErrorNotSupported";
        default: return "cudaErrorUnknown";
    }
}

// ------------------------------------------------------------------------ JSON for Python
struct Json {
    std::string s;
    void str(const std::string& v) {
        s += '"';
        for (unsigned char c : v) {
            if (c == '"' || c == '\\') { s += '\\'; s += (char)c; }
            else if (c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\u%04x", c); s += b; }
            else s += (char)c;
        }
        s += '"';
    }
    void key(const char* k) { if (s.back() != '{' && s.back() != '[') s += ','; str(k); s += ':'; }
    void kv(const char* k, const std::string& v) { key(k); str(v); }
    void kv(const char* k, long long v) { key(k); s += std::to_string(v); }
    void kvu(const char* k, uint64_t v) { key(k); s += std::to_string(v); }
    void kv(const char* k, bool v) { key(k); s += v ? "true" : "false"; }
    void dim(const char* k, const uint32_t* v) {
        key(k);
        s += "[" + std::to_string(v[0]) + "," + std::to_string(v[1]) + "," + std::to_string(v[2]) + "]";
    }
    void dim(const char* k, const dim3& d) { uint32_t v[3] = {d.x, d.y, d.z}; dim(k, v); }
    void site(const char* k, uint32_t site) {
        key(k);
        uintptr_t pc = site_pc(site);
        Dl_info info;
        if (pc && dladdr((void*)pc, &info) && info.dli_fname) {
            s += "{";
            kv("module", std::string(info.dli_fname));
            kvu("offset", (uint64_t)(pc - (uintptr_t)info.dli_fbase));
            s += "}";
        } else {
            s += "null";
        }
    }
};

void thread_json(Json& j, const char* k, const ThreadRef& t) {
    j.key(k);
    if (!t.valid && !t.site) { j.s += "null"; return; }
    j.s += "{";
    if (t.valid) { j.dim("block", t.block); j.dim("thread", t.thread); }
    j.kv("access", std::string(t.access ? t.access : ""));
    j.site("site", t.site);
    j.s += "}";
}

void report_json(Json& j, const Report& r) {
    j.s += "{";
    j.kv("kind", r.kind);
    j.kv("what", r.what);
    j.kv("space", r.space);
    if (r.alloc_id || !r.alloc_name.empty()) {
        j.key("allocation");
        j.s += "{";
        j.kv("name", r.alloc_name);
        j.kvu("id", r.alloc_id);
        j.kvu("bytes", r.alloc_bytes);
        j.kv("line", (long long)r.alloc_line);
        j.s += "}";
    }
    j.kv("index", r.index);
    j.kv("offset", r.offset);
    j.kvu("access_bytes", r.bytes);
    thread_json(j, "first", r.a);
    thread_json(j, "second", r.b);
    j.kv("detail", r.detail);
    j.kvu("count", r.count);
    j.s += "}";
}

void counters_json(Json& j, const Counters& c) {
    j.key("counters");
    j.s += "{";
#define F(name) j.kvu(#name, c.name);
    F(global_loads) F(global_stores) F(global_load_bytes) F(global_store_bytes)
    F(global_load_requests) F(global_store_requests) F(global_load_sectors) F(global_store_sectors)
    F(shared_loads) F(shared_stores) F(shared_load_requests) F(shared_store_requests)
    F(shared_wavefronts) F(shared_bank_conflicts) F(atomics) F(barriers) F(warp_ops) F(threads) F(blocks)
#undef F
    j.s += "}";
}

void record_json(Json& j, const LaunchRecord& r) {
    j.s += "{";
    j.kvu("launch", r.id);
    j.kv("kernel", r.kernel);
    j.kv("line", (long long)r.line);
    j.dim("grid", r.grid);
    j.dim("block", r.block);
    j.kvu("dynamic_shared_bytes", r.dynamic_shared);
    j.kvu("static_shared_bytes", r.static_shared);
    j.kv("checked", r.checked);
    j.kv("error", std::string(error_name(r.error)));
    j.kv("schedules", r.schedules);
    counters_json(j, r.counters);
    j.key("reports");
    j.s += "[";
    for (size_t i = 0; i < r.reports.size(); ++i) {
        if (i) j.s += ",";
        report_json(j, r.reports[i]);
    }
    j.s += "]";
    j.kvu("dropped_reports", r.dropped_reports);
    j.s += "}";
}

std::string g_json;

struct Event { std::chrono::steady_clock::time_point t; };
}  // namespace
}  // namespace mini_cuda

using namespace mini_cuda;

// ------------------------------------------------------------------------ CUDA runtime API
extern "C" {

const char* cudaGetErrorString(cudaError_t e) { return error_string(e); }
const char* cudaGetErrorName(cudaError_t e) { return error_name(e); }
cudaError_t cudaGetLastError(void) {
    cudaError_t e = g_last_error;
    g_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return g_last_error; }
cudaError_t cudaDeviceSynchronize(void) {
    cudaError_t e = g_async_error;
    g_async_error = cudaSuccess;
    return e;
}
cudaError_t cudaDeviceReset(void) {
    g_last_error = g_async_error = cudaSuccess;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* count) {
    if (!count) return fail(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
    if (!device) return fail(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
    if (!p) return fail(cudaErrorInvalidValue);
    if (device != 0) return fail(cudaErrorInvalidDevice);
    std::memset(p, 0, sizeof *p);
    std::snprintf(p->name, sizeof p->name, "mini CUDA emulator (CPU)");
    // The limits CUDA code checks against, those of a recent data-centre GPU (sm_90).
    p->totalGlobalMem = size_t(16) << 30;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = optin_shared_limit();
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->clockRate = 1980000;
    p->totalConstMem = 65536;
    p->major = 9; p->minor = 0;
    p->multiProcessorCount = 132;
    p->maxThreadsPerMultiProcessor = 2048;
    p->maxBlocksPerMultiProcessor = 32;
    p->sharedMemPerMultiprocessor = 228 * 1024;
    p->regsPerMultiprocessor = 65536;
    p->memoryClockRate = 2619000;
    p->memoryBusWidth = 5120;
    p->l2CacheSize = 50 * 1024 * 1024;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t size) {
    if (!p) return fail(cudaErrorInvalidValue);
    if (in_kernel()) return fail(cudaErrorNotSupported);
    if (size == 0) { *p = nullptr; return cudaSuccess; }
    Region* r = new_allocation(size, false, false);
    if (!r) { *p = nullptr; return fail(cudaErrorMemoryAllocation); }
    *p = (void*)r->base;
    return cudaSuccess;
}
cudaError_t cudaMallocManaged(void** p, size_t size, unsigned int) {
    if (!p) return fail(cudaErrorInvalidValue);
    Region* r = new_allocation(size, true, false);
    if (!r) { *p = nullptr; return fail(cudaErrorMemoryAllocation); }
    *p = (void*)r->base;
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t size) {
    if (!p) return fail(cudaErrorInvalidValue);
    Region* r = new_allocation(size, false, true);
    if (!r) { *p = nullptr; return fail(cudaErrorMemoryAllocation); }
    *p = (void*)r->base;
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t size, unsigned int) { return cudaMallocHost(p, size); }
cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    Region* r = allocation_starting_at((uintptr_t)p);
    if (!r || r->host_pinned) {
        api_report("bad free", "cudaFree of a pointer that is not the start of a live cudaMalloc "
                   "allocation (freed twice? a host pointer? an offset pointer?)", "free");
        return fail(cudaErrorInvalidValue);
    }
    free_allocation(p);
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    Region* r = allocation_starting_at((uintptr_t)p);
    if (!r || !r->host_pinned) return fail(cudaErrorInvalidValue);
    free_allocation(p);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
    return memcpy_checked(dst, src, count, kind, "cudaMemcpy");
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t) {
    return memcpy_checked(dst, src, count, kind, "cudaMemcpyAsync");
}
cudaError_t cudaMemset(void* p, int value, size_t count) {
    if (count == 0) return cudaSuccess;
    Region* r = device_region(p);
    if (!r) {
        api_report("not device memory", "cudaMemset of a pointer that is not device memory", "memset");
        return fail(cudaErrorInvalidValue);
    }
    if ((uintptr_t)p + count > r->base + r->size) {
        api_report("copy out of bounds",
                   "cudaMemset writes " + std::to_string(count) + " bytes at byte " +
                       std::to_string((uintptr_t)p - r->base) + " of " + r->describe(),
                   "memsetoob:" + std::to_string(r->id), r);
        return fail(cudaErrorInvalidValue);
    }
    std::memset(p, value, count);
    mark_written(r, (uintptr_t)p, count);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t count, cudaStream_t) { return cudaMemset(p, value, count); }

cudaError_t mini_cuda_memcpy_symbol(void* symbol, const void* src, size_t count, size_t offset, int to_symbol) {
    Region* r = find_global((uintptr_t)symbol);
    if (!r || !(r->space == CONSTANT || r->name == "__device__ variables")) {
        api_report("not a symbol", "cudaMemcpyToSymbol/FromSymbol: the symbol is not a __constant__ or "
                   "__device__ variable",
                   "symbol");
        return fail(cudaErrorInvalidSymbol);
    }
    char* p = (char*)symbol + offset;
    if ((uintptr_t)p + count > r->base + r->size) return fail(cudaErrorInvalidValue);
    if (to_symbol) { std::memcpy(p, src, count); count_transfer(cudaMemcpyHostToDevice, count); }
    else { std::memcpy((void*)src, p, count); count_transfer(cudaMemcpyDeviceToHost, count); }
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* s) {
    if (!s) return fail(cudaErrorInvalidValue);
    *s = reinterpret_cast<cudaStream_t>(new char(0));
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) { delete reinterpret_cast<char*>(s); return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaDeviceSynchronize(); }
cudaError_t cudaEventCreate(cudaEvent_t* e) {
    if (!e) return fail(cudaErrorInvalidValue);
    *e = reinterpret_cast<cudaEvent_t>(new Event{std::chrono::steady_clock::now()});
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete reinterpret_cast<Event*>(e); return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    reinterpret_cast<Event*>(e)->t = std::chrono::steady_clock::now();
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    if (!ms || !a || !b) return fail(cudaErrorInvalidValue);
    // Time on the CPU running the emulator: says nothing about a GPU.
    *ms = std::chrono::duration<float, std::milli>(reinterpret_cast<Event*>(b)->t - reinterpret_cast<Event*>(a)->t).count();
    return cudaSuccess;
}
cudaError_t mini_cuda_func_set_attribute(int attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > optin_shared_limit()) return fail(cudaErrorInvalidValue);
        set_dynamic_shared_limit((size_t)value);
    }
    return cudaSuccess;
}

// ------------------------------------------------------------------------ header support
void* mini_cuda_shared_variable(int decl_id, size_t bytes, size_t align, const char* name, int line) {
    Launch* L = g_launch;
    if (!L || !L->current) {
        static char host_dummy[1 << 16];
        api_report("__shared__ outside a kernel", std::string("__shared__ variable ") + name +
                   " declared in host code", "sharedhost");
        return host_dummy;
    }
    SharedMemory& sm = shared_memory();
    auto it = sm.by_decl.find(decl_id);
    if (it != sm.by_decl.end()) return (void*)it->second->base;
    Region* r = sm.place(bytes, align, name, line);
    if (!r) abort_launch(cudaErrorLaunchOutOfResources);
    sm.by_decl.emplace(decl_id, r);
    size_t static_bytes = sm.real_bytes - (sm.dynamic ? sm.dynamic->size : 0);
    if (static_bytes > 48 * 1024) {
        Report rep;
        rep.kind = "launch_error";
        rep.what = "too much shared memory";
        rep.a = current_thread_ref((uintptr_t)__builtin_return_address(0), "");
        rep.detail = "the block's __shared__ variables need " + std::to_string(static_bytes) +
                     " bytes; a block may have at most 49152 bytes of static shared memory";
        report(rep, "toomuchshared");
        abort_launch(cudaErrorLaunchOutOfResources);
    }
    return (void*)r->base;
}

void* mini_cuda_dynamic_shared(void) {
    SharedMemory& sm = shared_memory();
    Launch* L = g_launch;
    if (!L || !L->current) return nullptr;
    if (!sm.dynamic) {
        // No bytes were asked for: an empty region, so that any access is out of bounds.
        sm.dynamic = sm.place(0, 16, "extern __shared__ (0 bytes: pass the size as the third launch parameter)", 0);
    }
    return sm.dynamic ? (void*)sm.dynamic->base : nullptr;
}

void mini_cuda_register_constant_bank(void* begin, void* end) {
    register_constant_bank((uintptr_t)begin, (uintptr_t)end, CONSTANT);
}

void mini_cuda_register_device_variables(void* begin, void* end) {
    register_constant_bank((uintptr_t)begin, (uintptr_t)end, GLOBAL);
}

void mini_cuda_device_assert(const char* expr, const char* file, int line) {
    if (!in_kernel())
        throw std::runtime_error(std::string("assertion failed: ") + expr + " (" + file + ":" + std::to_string(line) + ")");
    Report rep;
    rep.kind = "assert";
    rep.what = "assert failed";
    rep.a = current_thread_ref((uintptr_t)__builtin_return_address(0), "");
    rep.detail = std::string("assert(") + expr + ") failed at line " + std::to_string(line) +
                 "; the launch stopped (cudaErrorAssert)";
    report(rep, std::string("assert:") + std::to_string(line));
    abort_launch(cudaErrorAssert);
}

// ------------------------------------------------------------------------ the C API for Python
__attribute__((visibility("default"))) const char* mini_cuda_take_json(void) {
    Json j;
    j.s = "{\"launches\":[";
    for (size_t i = 0; i < g_records.size(); ++i) {
        if (i) j.s += ",";
        record_json(j, *g_records[i]);
    }
    j.s += "],\"host_reports\":[";
    if (g_host)
        for (size_t i = 0; i < g_host->reports.size(); ++i) {
            if (i) j.s += ",";
            report_json(j, g_host->reports[i]);
        }
    j.s += "]";
    j.kvu("dropped_launches", g_records_dropped);
    j.s += "}";
    g_records.clear();
    g_host.reset();
    g_records_dropped = 0;
    g_json.swap(j.s);
    return g_json.c_str();
}

__attribute__((visibility("default"))) const char* mini_cuda_stats_json(void) {
    Json j;
    j.s = "{";
    j.kvu("h2d_bytes", g_transfers.h2d_bytes);
    j.kvu("d2h_bytes", g_transfers.d2h_bytes);
    j.kvu("d2d_bytes", g_transfers.d2d_bytes);
    j.kvu("h2d_count", g_transfers.h2d_count);
    j.kvu("d2h_count", g_transfers.d2h_count);
    j.kvu("d2d_count", g_transfers.d2d_count);
    j.kvu("launches", g_transfers.launches);
    uint64_t live[2] = {0, 0};   // device allocations and their bytes
    for_each_region([](Region* r, void* v) {
        if (r->space != GLOBAL || r->host_pinned) return;
        auto* p = static_cast<uint64_t*>(v);
        p[0]++;
        p[1] += r->size;
    }, live);
    j.kvu("allocations", live[0]);
    j.kvu("allocated_bytes", live[1]);
    j.s += "}";
    g_json.swap(j.s);
    return g_json.c_str();
}

__attribute__((visibility("default"))) void mini_cuda_reset_stats(void) { g_transfers = Transfers{}; }

// Python counts a copy it makes into or out of managed memory (mini's cuda device).
__attribute__((visibility("default"))) void mini_cuda_count_transfer(int kind, unsigned long long bytes) {
    count_transfer(kind, bytes);
}

__attribute__((visibility("default"))) int mini_cuda_set_option(const char* name, long long value) {
    std::string n = name ? name : "";
    if (n == "races") g_options.races = value != 0;
    else if (n == "memcheck") g_options.memcheck = value != 0;
    else if (n == "initcheck") g_options.initcheck = value != 0;
    else if (n == "synccheck") g_options.synccheck = value != 0;
    else if (n == "counters") g_options.counters = value != 0;
    else if (n == "max_reports") g_options.max_reports = (int)value;
    else return -1;
    return 0;
}

__attribute__((visibility("default"))) long long mini_cuda_get_option(const char* name) {
    std::string n = name ? name : "";
    if (n == "races") return g_options.races;
    if (n == "memcheck") return g_options.memcheck;
    if (n == "initcheck") return g_options.initcheck;
    if (n == "synccheck") return g_options.synccheck;
    if (n == "counters") return g_options.counters;
    if (n == "max_reports") return g_options.max_reports;
    return -1;
}

// kinds: 0 forward, 1 reverse, 2 shuffled (with a seed); n >= 1
__attribute__((visibility("default"))) int mini_cuda_set_schedules(const int* kinds, const unsigned long long* seeds, int n) {
    if (n < 1) return -1;
    g_options.schedules.clear();
    for (int i = 0; i < n; ++i) {
        if (kinds[i] < 0 || kinds[i] > 2) return -1;
        g_options.schedules.emplace_back(kinds[i], seeds[i]);
    }
    return 0;
}

__attribute__((visibility("default"))) int mini_cuda_name_allocation(void* ptr, const char* name) {
    Region* r = allocation_starting_at((uintptr_t)ptr);
    if (!r) return -1;
    r->name = name ? name : "";
    return 0;
}

__attribute__((visibility("default"))) int mini_cuda_abi_version(void) { return 1; }

}  // extern "C"
