// The access hooks: what happens at every load and store of a checked kernel.
//
// A module built with checks is compiled with -fsanitize=thread, which makes the
// compiler call __tsan_read4(address) before every 4-byte load, __tsan_write8(address)
// before every 8-byte store, and so on.  Those functions are defined here (there is no
// ThreadSanitizer runtime in the process).  For an access by the current CUDA thread
// the hook
//   1. ignores the thread's own stack (its local variables) and the kernel parameters;
//   2. finds the memory: a __shared__ variable of the block, or a device allocation.
//      Nothing found: an invalid address; the launch stops before the access happens.
//      In a red zone: out of bounds, reported (the access itself is harmless there);
//   3. reports a read of bytes nobody wrote;
//   4. checks for a data race against the last accesses to the same 4-byte word;
//   5. logs the access, so that at the next barrier the accesses of each warp can be
//      grouped into warp-wide requests: 32-byte sectors for global memory, bank
//      conflicts for shared memory.
// The hook knows the instruction by its return address (the "site"); Python turns
// sites into lines of your source.
#include "runtime.h"

namespace mini_cuda {

// ------------------------------------------------------------------------ sites
namespace {
std::vector<uintptr_t> g_site_pcs{0};
std::unordered_map<uintptr_t, uint32_t> g_site_index;
struct SiteCacheEntry { uintptr_t pc; uint32_t site; };
SiteCacheEntry g_site_cache[4096];
}

uint32_t site_of(uintptr_t pc) {
    SiteCacheEntry& e = g_site_cache[(pc >> 1) & 4095];
    if (e.pc == pc && pc) return e.site;
    auto it = g_site_index.find(pc);
    uint32_t s;
    if (it == g_site_index.end()) {
        s = (uint32_t)g_site_pcs.size();
        g_site_pcs.push_back(pc);
        g_site_index.emplace(pc, s);
    } else {
        s = it->second;
    }
    e.pc = pc;
    e.site = s;
    return s;
}

uintptr_t site_pc(uint32_t site) { return site < g_site_pcs.size() ? g_site_pcs[site] : 0; }

// ------------------------------------------------------------------------ helpers
namespace {

const char* space_name(Space s) { return s == SHARED ? "shared" : (s == CONSTANT ? "constant" : "global"); }
const char* access_name(int kind) { return kind == 0 ? "read" : (kind == 1 ? "write" : "atomic"); }

ThreadRef ref_from_access(const Launch& L, const Access& a, const char* what) {
    ThreadRef r;
    const dim3 g = L.desc->grid, b = L.desc->block;
    r.block[0] = a.block % g.x;
    r.block[1] = (a.block / g.x) % g.y;
    r.block[2] = a.block / (g.x * g.y);
    r.thread[0] = a.thread % b.x;
    r.thread[1] = (a.thread / b.x) % b.y;
    r.thread[2] = a.thread / (b.x * b.y);
    r.site = a.site;
    r.access = what;
    r.valid = true;
    return r;
}

bool conflicts(const Access& prev, const Access& cur) {
    if (!(prev.flags & ACC_VALID) || !(prev.bytes & cur.bytes)) return false;
    if (prev.block == cur.block && prev.thread == cur.thread) return false;     // program order
    if ((prev.flags & ACC_ATOMIC) && (cur.flags & ACC_ATOMIC)) return false;   // atomics commute
    if (!(prev.flags & ACC_WRITE) && !(cur.flags & ACC_WRITE)) return false;   // two reads
    if (prev.block != cur.block) return true;      // blocks of one launch are never ordered
    if (prev.interval != cur.interval) return false;   // a __syncthreads in between
    if (prev.thread / 32 == cur.thread / 32 && prev.wepoch != cur.wepoch)
        return false;                              // same warp, a warp-level sync in between
    return true;
}

void report_race(Launch& L, Region* r, uintptr_t addr, size_t n, const Access& prev, const Access& cur,
                 const char* what) {
    uint32_t s1 = std::min(prev.site, cur.site), s2 = std::max(prev.site, cur.site);
    uint64_t fk = fast_key(1, ((uint64_t)s1 << 32) | s2, r->id * 4 + r->space, (uintptr_t)what);
    if (repeat(fk)) return;
    Report rep;
    rep.kind = "race";
    rep.what = what;
    rep.space = space_name(r->space);
    rep.region = r;
    rep.offset = (long long)(addr - r->base);
    rep.index = rep.offset / (long long)(n ? n : 1);
    rep.bytes = n;
    auto acc = [](const Access& a) {
        return (a.flags & ACC_ATOMIC) ? "atomic" : ((a.flags & ACC_WRITE) ? "write" : "read");
    };
    rep.a = ref_from_access(L, prev, acc(prev));
    rep.b = ref_from_access(L, cur, acc(cur));
    const char* between = prev.block != cur.block ? "two blocks of one launch"
                                                   : "two threads between the same two barriers";
    rep.detail = std::string(between) + " touch the same bytes, at least one writes, and not both are atomic";
    report(rep, std::string("race:") + what + ":" + std::to_string(s1) + ":" + std::to_string(s2) + ":" +
                    std::to_string(r->id) + rep.space, fk);
}

void race_check(Launch& L, Region* r, uintptr_t addr, size_t n, int kind, uintptr_t pc) {
    uint64_t epoch = r->space == SHARED ? L.block_epoch : L.launch_epoch;
    size_t words = (r->size + 3) / 4;
    if (r->shadow_epoch != epoch || r->shadow.size() != words) {
        r->shadow.assign(words, Shadow{});
        r->shadow_epoch = epoch;
    }
    Thread* t = L.current;
    Access cur;
    cur.site = site_of(pc);
    cur.block = L.block_linear;
    cur.thread = (uint16_t)t->linear;
    cur.interval = L.interval;
    cur.wepoch = t->wepoch;
    cur.flags = ACC_VALID | (kind != 0 ? ACC_WRITE : 0) | (kind == 2 ? ACC_ATOMIC : 0);
    size_t off = addr - r->base;
    for (size_t w = off / 4; w * 4 < off + n && w < words; ++w) {
        // which bytes of this word the access covers
        size_t lo = std::max(off, w * 4) - w * 4, hi = std::min(off + n, w * 4 + 4) - w * 4;
        cur.bytes = (uint8_t)(((1u << hi) - 1) & ~((1u << lo) - 1));
        Shadow& s = r->shadow[w];
        if (kind == 0) {
            if (conflicts(s.write, cur)) { report_race(L, r, addr, n, s.write, cur, "read-after-write"); break; }
            bool same1 = (s.read1.flags & ACC_VALID) && s.read1.block == cur.block && s.read1.thread == cur.thread;
            if (!same1 && (s.read1.flags & ACC_VALID)) s.read2 = s.read1;
            s.read1 = cur;
        } else {
            if (conflicts(s.write, cur)) { report_race(L, r, addr, n, s.write, cur, "write-after-write"); break; }
            if (conflicts(s.read1, cur)) { report_race(L, r, addr, n, s.read1, cur, "write-after-read"); break; }
            if (conflicts(s.read2, cur)) { report_race(L, r, addr, n, s.read2, cur, "write-after-read"); break; }
            // A thread that wrote plainly and then atomically in one interval still
            // holds a plain write: keep that (it races with other threads' atomics).
            bool same_thread = (s.write.flags & ACC_VALID) && s.write.block == cur.block &&
                               s.write.thread == cur.thread && s.write.interval == cur.interval;
            if (same_thread && !(s.write.flags & ACC_ATOMIC) && (cur.flags & ACC_ATOMIC)) {
                s.write.bytes |= cur.bytes;
            } else {
                s.write = cur;
            }
            if (!(cur.flags & ACC_ATOMIC)) {   // plain reads before an atomic still count
                s.read1 = Access{};
                s.read2 = Access{};
            }
        }
    }
}

void report_out_of_bounds(Launch& L, Region* r, uintptr_t addr, size_t n, int kind, uintptr_t pc) {
    uint64_t fk = fast_key(2, pc, r->id * 4 + r->space);
    if (repeat(fk)) return;
    Report rep;
    rep.kind = "out_of_bounds";
    rep.what = access_name(kind);
    rep.space = space_name(r->space);
    rep.region = r;
    rep.offset = (long long)((intptr_t)addr - (intptr_t)r->base);
    long long size = (long long)(n ? n : 1);
    rep.index = rep.offset >= 0 ? rep.offset / size : -((-rep.offset + size - 1) / size);
    rep.bytes = n;
    rep.a = current_thread_ref(pc, access_name(kind));
    long long elements = (long long)r->size / size;
    rep.detail = std::string(access_name(kind)) + " of element " + std::to_string(rep.index) + " (" +
                 std::to_string(n) + "-byte elements) of " + r->describe() + ", which has " +
                 std::to_string(elements) + " such elements: valid indices are 0 to " +
                 std::to_string(elements - 1);
    report(rep, "oob:" + std::to_string(rep.a.site) + ":" + std::to_string(r->id) + rep.space, fk);
}

void report_uninitialized(Launch& L, Region* r, uintptr_t addr, size_t n, uintptr_t pc) {
    uint64_t fk = fast_key(3, pc, r->id * 4 + r->space);
    if (repeat(fk)) return;
    Report rep;
    rep.kind = "uninitialized_read";
    rep.what = "read";
    rep.space = space_name(r->space);
    rep.region = r;
    rep.offset = (long long)(addr - r->base);
    rep.index = rep.offset / (long long)(n ? n : 1);
    rep.bytes = n;
    rep.a = current_thread_ref(pc, "read");
    rep.detail = r->space == SHARED
                     ? "reads " + r->describe() + " at element " + std::to_string(rep.index) +
                           ", which no thread of this block has written"
                     : "reads " + r->describe() + " at element " + std::to_string(rep.index) +
                           ", which was never written (cudaMalloc does not zero memory: copy or "
                           "cudaMemset it first)";
    report(rep, "uninit:" + std::to_string(rep.a.site) + ":" + std::to_string(r->id) + rep.space, fk);
    (void)L;
}

[[noreturn]] void invalid_address(Launch& L, uintptr_t addr, size_t n, int kind, uintptr_t pc) {
    Report rep;
    rep.kind = "invalid_address";
    rep.what = access_name(kind);
    rep.bytes = n;
    rep.a = current_thread_ref(pc, access_name(kind));
    char buf[64];
    std::snprintf(buf, sizeof buf, "%#llx", (unsigned long long)addr);
    rep.detail = std::string("a ") + std::to_string(n) + "-byte " + access_name(kind) + " at address " + buf +
                 ", which is neither device memory nor shared memory (a host pointer passed to the kernel? "
                 "an index far out of bounds?); the launch stopped here (cudaErrorIllegalAddress)";
    report(rep, "invalid:" + std::to_string(rep.a.site));
    (void)L;
    abort_launch(cudaErrorIllegalAddress);
}

void host_access(uintptr_t addr, size_t n, int kind, uintptr_t pc) {
    Region* r = find_global(addr);
    if (!r || r->managed || r->host_pinned || r->space != GLOBAL) return;
    uint64_t fk = fast_key(4, pc, r->id);
    if (repeat(fk)) return;
    Report rep;
    rep.kind = "host_access";
    rep.what = access_name(kind);
    rep.space = "global";
    rep.region = r;
    rep.offset = (long long)(addr - r->base);
    rep.index = rep.offset / (long long)(n ? n : 1);
    rep.bytes = n;
    rep.a.site = site_of(pc);
    rep.a.access = access_name(kind);
    rep.detail = std::string("host code ") + (kind == 0 ? "reads " : "writes ") + r->describe() +
                 ": memory from cudaMalloc lives on the GPU and cannot be used by host code "
                 "(on a GPU this crashes); copy it with cudaMemcpy";
    report(rep, "host:" + std::to_string(rep.a.site) + ":" + std::to_string(r->id), fk);
}

}  // namespace

// The hook.  kind: 0 read, 1 write, 2 atomic read-modify-write.
static inline void on_access(uintptr_t addr, size_t n, int kind, uintptr_t pc) {
    Launch* L = g_launch;
    if (!L || !L->current) {
        if (options().memcheck) host_access(addr, n, kind, pc);
        return;
    }
    if (addr - L->stack_lo < L->stack_hi - L->stack_lo) return;            // its own locals
    if (addr - L->params_lo < L->params_hi - L->params_lo) return;          // kernel arguments
    if (addr - (uintptr_t)&mini_cuda_now < sizeof(mini_cuda_now)) return;  // threadIdx and co.
    Region* r = find_shared(addr);
    if (!r) r = find_global(addr);
    if (!r) invalid_address(*L, addr, n, kind, pc);
    if (!L->checking) return;
    const Options& o = options();
    bool inside = addr >= r->base && addr + n <= r->base + r->size;
    if (!inside) {
        if (o.memcheck) report_out_of_bounds(*L, r, addr, n, kind, pc);
    } else {
        if (r->space == CONSTANT && kind != 0) {
            Report rep;
            rep.kind = "invalid_address";
            rep.what = "write to __constant__ memory";
            rep.space = "constant";
            rep.region = r;
            rep.a = current_thread_ref(pc, access_name(kind));
            rep.detail = "a kernel writes __constant__ memory, which kernels may only read";
            report(rep, "constwrite:" + std::to_string(rep.a.site));
        }
        if (!r->written.empty()) {
            if (kind == 0) {
                if (o.initcheck) {
                    const uint8_t* w = &r->written[addr - r->base];
                    for (size_t i = 0; i < n; ++i)
                        if (!w[i]) { report_uninitialized(*L, r, addr, n, pc); break; }
                }
            } else {
                std::memset(&r->written[addr - r->base], 1, n);
            }
        }
        if (o.races) race_check(*L, r, addr, n, kind, pc);
    }
    if (o.counters) L->current->log.push_back(LogEntry{addr, pc, (uint32_t)n, (uint8_t)kind, (uint8_t)r->space});
}

// ------------------------------------------------------------------------ counters

namespace {

void count_group(Counters& c, const LogEntry* const* g, int m) {
    const LogEntry& e0 = *g[0];
    if (e0.write == 2 || e0.space == CONSTANT) return;   // atomics are counted where they happen
    uint64_t bytes = 0;
    for (int i = 0; i < m; ++i) bytes += g[i]->bytes;
    if (e0.space == GLOBAL) {
        uintptr_t sectors[32 * 4 + 8];
        int k = 0;
        for (int i = 0; i < m; ++i) {
            uintptr_t first = g[i]->addr >> 5, last = (g[i]->addr + g[i]->bytes - 1) >> 5;
            for (uintptr_t s = first; s <= last && k < (int)(sizeof sectors / sizeof *sectors); ++s) sectors[k++] = s;
        }
        std::sort(sectors, sectors + k);
        uint64_t distinct = (uint64_t)(std::unique(sectors, sectors + k) - sectors);
        if (e0.write) {
            c.global_stores += m; c.global_store_bytes += bytes;
            c.global_store_requests++; c.global_store_sectors += distinct;
        } else {
            c.global_loads += m; c.global_load_bytes += bytes;
            c.global_load_requests++; c.global_load_sectors += distinct;
        }
    } else {
        // 32 banks of 4-byte words: lanes reading the same word share it (broadcast);
        // different words in one bank are served one after another (a conflict).
        uintptr_t words[32 * 4 + 8];
        int k = 0;
        for (int i = 0; i < m; ++i) {
            uintptr_t first = g[i]->addr >> 2, last = (g[i]->addr + g[i]->bytes - 1) >> 2;
            for (uintptr_t w = first; w <= last && k < (int)(sizeof words / sizeof *words); ++w) words[k++] = w;
        }
        std::sort(words, words + k);
        int distinct = (int)(std::unique(words, words + k) - words);
        int per_bank[32] = {0};
        int wavefronts = 0;
        for (int i = 0; i < distinct; ++i) wavefronts = std::max(wavefronts, ++per_bank[words[i] & 31]);
        int ideal = (distinct + 31) / 32;
        if (e0.write) { c.shared_stores += m; c.shared_store_requests++; }
        else { c.shared_loads += m; c.shared_load_requests++; }
        c.shared_wavefronts += wavefronts;
        c.shared_bank_conflicts += wavefronts - ideal;
    }
}

}  // namespace

// The accesses of each warp since the last barrier, grouped into warp-wide requests.
// Lane l's k-th execution of an instruction belongs with every other lane's k-th
// execution of it.  When all lanes run the same instructions in the same order (the
// common case) the logs line up entry by entry; otherwise they are matched by
// (instruction, occurrence).
void analyze_interval(Launch& L, std::vector<Thread>& th) {
    unsigned n = L.desc->block.x * L.desc->block.y * L.desc->block.z;
    if (!L.checking || !options().counters) {
        for (unsigned i = 0; i < n; ++i) th[i].log.clear();
        return;
    }
    Counters& c = L.record->counters;
    const LogEntry* group[32];
    for (unsigned w = 0; w * 32 < n; ++w) {
        unsigned lanes = std::min(32u, n - w * 32);
        size_t pos[32] = {0};
        bool aligned = true;
        for (;;) {
            int m = 0;
            const LogEntry* first = nullptr;
            for (unsigned l = 0; l < lanes; ++l) {
                Thread& t = th[w * 32 + l];
                if (pos[l] >= t.log.size()) continue;
                const LogEntry& e = t.log[pos[l]];
                if (!first) first = &e;
                else if (e.pc != first->pc || e.write != first->write || e.space != first->space) { aligned = false; break; }
                group[m++] = &e;
            }
            if (!aligned || !first) break;
            for (unsigned l = 0; l < lanes; ++l)
                if (pos[l] < th[w * 32 + l].log.size()) ++pos[l];
            count_group(c, group, m);
        }
        if (!aligned) {
            std::map<std::pair<uintptr_t, uint32_t>, std::vector<const LogEntry*>> groups;
            for (unsigned l = 0; l < lanes; ++l) {
                Thread& t = th[w * 32 + l];
                std::unordered_map<uintptr_t, uint32_t> seen;
                for (size_t i = pos[l]; i < t.log.size(); ++i) {
                    const LogEntry& e = t.log[i];
                    groups[{e.pc * 4 + e.write, seen[e.pc * 4 + e.write]++}].push_back(&e);
                }
            }
            for (auto& kv : groups) count_group(c, kv.second.data(), (int)kv.second.size());
        }
        for (unsigned l = 0; l < lanes; ++l) th[w * 32 + l].log.clear();
    }
}

}  // namespace mini_cuda

using namespace mini_cuda;

// ------------------------------------------------------------------------ the hooks
// (the names and signatures the compiler's -fsanitize=thread instrumentation calls)
#define MINI_CUDA_PC ((uintptr_t)__builtin_return_address(0))
#define MINI_CUDA_HOOKS(N)                                                                          \
    extern "C" void __tsan_read##N(void* a) { on_access((uintptr_t)a, N, 0, MINI_CUDA_PC); }         \
    extern "C" void __tsan_write##N(void* a) { on_access((uintptr_t)a, N, 1, MINI_CUDA_PC); }        \
    extern "C" void __tsan_unaligned_read##N(void* a) { on_access((uintptr_t)a, N, 0, MINI_CUDA_PC); } \
    extern "C" void __tsan_unaligned_write##N(void* a) { on_access((uintptr_t)a, N, 1, MINI_CUDA_PC); } \
    extern "C" void __tsan_volatile_read##N(void* a) { on_access((uintptr_t)a, N, 0, MINI_CUDA_PC); } \
    extern "C" void __tsan_volatile_write##N(void* a) { on_access((uintptr_t)a, N, 1, MINI_CUDA_PC); }
MINI_CUDA_HOOKS(1)
MINI_CUDA_HOOKS(2)
MINI_CUDA_HOOKS(4)
MINI_CUDA_HOOKS(8)
MINI_CUDA_HOOKS(16)
#undef MINI_CUDA_HOOKS

extern "C" void __tsan_read_range(void* a, unsigned long n) { if (n) on_access((uintptr_t)a, n, 0, MINI_CUDA_PC); }
extern "C" void __tsan_write_range(void* a, unsigned long n) { if (n) on_access((uintptr_t)a, n, 1, MINI_CUDA_PC); }
extern "C" void __tsan_init(void) {}
extern "C" void __tsan_func_entry(void*) {}
extern "C" void __tsan_func_exit(void) {}
extern "C" void __tsan_vptr_update(void**, void*) {}
extern "C" void __tsan_vptr_read(void**) {}
extern "C" void __tsan_ignore_thread_begin(void) {}
extern "C" void __tsan_ignore_thread_end(void) {}

// C++ atomics (std::atomic) in an instrumented module come here: do the operation, and
// in a kernel announce it as an atomic access.
#define MINI_CUDA_TSAN_ATOMICS(BITS, T)                                                              \
    extern "C" T __tsan_atomic##BITS##_load(const volatile T* a, int) {                              \
        if (in_kernel()) on_access((uintptr_t)a, sizeof(T), 2, MINI_CUDA_PC);                      \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                 \
    }                                                                                                \
    extern "C" void __tsan_atomic##BITS##_store(volatile T* a, T v, int) {                           \
        if (in_kernel()) on_access((uintptr_t)a, sizeof(T), 2, MINI_CUDA_PC);                      \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                    \
    }                                                                                                \
    extern "C" T __tsan_atomic##BITS##_exchange(volatile T* a, T v, int) {                           \
        if (in_kernel()) on_access((uintptr_t)a, sizeof(T), 2, MINI_CUDA_PC);                      \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                          \
    }                                                                                                \
    extern "C" T __tsan_atomic##BITS##_fetch_add(volatile T* a, T v, int) {                          \
        if (in_kernel()) on_access((uintptr_t)a, sizeof(T), 2, MINI_CUDA_PC);                      \
        return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                           \
    }                                                                                                \
    extern "C" T __tsan_atomic##BITS##_fetch_sub(volatile T* a, T v, int) {                          \
        if (in_kernel()) on_access((uintptr_t)a, sizeof(T), 2, MINI_CUDA_PC);                      \
        return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                           \
    }                                                                                                \
    extern "C" T __tsan_atomic##BITS##_fetch_and(volatile T* a, T v, int) {                          \
        if (in_kernel()) on_access((uintptr_t)a, sizeof(T), 2, MINI_CUDA_PC);                      \
        return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                           \
    }                                                                                                \
    extern "C" T __tsan_atomic##BITS##_fetch_or(volatile T* a, T v, int) {                           \
        if (in_kernel()) on_access((uintptr_t)a, sizeof(T), 2, MINI_CUDA_PC);                      \
        return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                            \
    }                                                                                                \
    extern "C" T __tsan_atomic##BITS##_fetch_xor(volatile T* a, T v, int) {                          \
        if (in_kernel()) on_access((uintptr_t)a, sizeof(T), 2, MINI_CUDA_PC);                      \
        return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                           \
    }                                                                                                \
    extern "C" T __tsan_atomic##BITS##_fetch_nand(volatile T* a, T v, int) {                         \
        if (in_kernel()) on_access((uintptr_t)a, sizeof(T), 2, MINI_CUDA_PC);                      \
        return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                          \
    }                                                                                                \
    extern "C" int __tsan_atomic##BITS##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) { \
        if (in_kernel()) on_access((uintptr_t)a, sizeof(T), 2, MINI_CUDA_PC);                      \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);      \
    }                                                                                                \
    extern "C" int __tsan_atomic##BITS##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) { \
        if (in_kernel()) on_access((uintptr_t)a, sizeof(T), 2, MINI_CUDA_PC);                      \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);      \
    }                                                                                                \
    extern "C" T __tsan_atomic##BITS##_compare_exchange_val(volatile T* a, T c, T v, int, int) {     \
        if (in_kernel()) on_access((uintptr_t)a, sizeof(T), 2, MINI_CUDA_PC);                      \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
        return c;                                                                                    \
    }
MINI_CUDA_TSAN_ATOMICS(8, char)
MINI_CUDA_TSAN_ATOMICS(16, short)
MINI_CUDA_TSAN_ATOMICS(32, int)
MINI_CUDA_TSAN_ATOMICS(64, long long)
#undef MINI_CUDA_TSAN_ATOMICS
extern "C" void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// atomicAdd and friends (the header) announce themselves here.
extern "C" void mini_cuda_atomic_access(void* address, size_t bytes, void* pc) {
    Launch* L = g_launch;
    if (L && L->current && L->checking && options().counters) L->record->counters.atomics++;
    on_access((uintptr_t)address, bytes, 2, (uintptr_t)pc);
}
