// Launches: how a grid of CUDA threads runs on one CPU thread.
//
// Blocks run one after another.  The threads of a block are fibers (ucontext): each
// has its own stack, runs until it blocks (at __syncthreads or a warp operation) or
// ends, and the scheduler then runs the next ready thread in the order of the current
// *schedule*.  When no thread is ready:
//   * every live thread waits at the same __syncthreads  -> all continue (a barrier);
//   * threads wait at different barriers, or some exited while others wait
//                                                        -> barrier divergence, reported;
//   * a warp operation waits for lanes that never come   -> a bad mask, reported.
// After a report the launch goes on (as lenient hardware would), so one mistake does not
// hide the next.
#include "runtime.h"

#include <sys/mman.h>
#include <unistd.h>

extern "C" {
mini_cuda_builtins mini_cuda_now;
}

namespace mini_cuda {

Launch* g_launch = nullptr;

namespace {
Fiber g_scheduler;                       // where a blocking thread returns to
std::vector<Thread> g_threads;
constexpr size_t STACK_BYTES = 256 * 1024;
constexpr unsigned MAX_THREADS = 1024;
uint64_t g_epoch = 0;
void* g_params = nullptr;
size_t g_params_size = 0;
size_t g_dynamic_shared_limit = 48 * 1024;   // raised by cudaFuncSetAttribute
constexpr size_t STATIC_SHARED_LIMIT = 48 * 1024;
constexpr size_t OPTIN_SHARED_LIMIT = 227 * 1024;

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void ensure_threads(unsigned n) {
    if (g_threads.capacity() < MAX_THREADS) g_threads.reserve(MAX_THREADS);   // never moves
    while (g_threads.size() < n) {
        g_threads.emplace_back();
        Thread& t = g_threads.back();
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        void* p = mmap(nullptr, STACK_BYTES + page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) { g_threads.pop_back(); return; }
        mprotect(p, page, PROT_NONE);          // guard page: an overflow faults at once
        t.stack = (char*)p + page;
        t.stack_size = STACK_BYTES;
    }
}


void switch_to(Launch& L, Thread& t) {
    L.current = &t;
    mini_cuda_now.thread_idx = t.idx;
    L.stack_lo = (uintptr_t)t.stack;
    L.stack_hi = (uintptr_t)t.stack + t.stack_size;
    fiber_switch(g_scheduler, t.fiber);
    L.current = nullptr;
}

// The current thread gives the CPU back to the scheduler.
void yield_thread() {
    Launch* L = g_launch;
    Thread* t = L->current;
    fiber_switch(t->fiber, g_scheduler);
    // resumed: the scheduler set L->current and the built-ins again
}

std::string lane_list(unsigned mask) {
    std::string s;
    int i = 0;
    while (i < 32) {
        if (!(mask >> i & 1)) { ++i; continue; }
        int j = i;
        while (j + 1 < 32 && (mask >> (j + 1) & 1)) ++j;
        if (!s.empty()) s += ", ";
        s += j == i ? std::to_string(i) : std::to_string(i) + "-" + std::to_string(j);
        i = j + 1;
    }
    return s.empty() ? "none" : s;
}

char hex_buf[16];
const char* hex(unsigned m) { std::snprintf(hex_buf, sizeof hex_buf, "0x%08x", m); return hex_buf; }

const char* warp_op_name(int op) {
    switch (op) {
        case SHFL_IDX: return "__shfl_sync";
        case SHFL_UP: return "__shfl_up_sync";
        case SHFL_DOWN: return "__shfl_down_sync";
        case SHFL_XOR: return "__shfl_xor_sync";
        case SYNCWARP: return "__syncwarp";
        case VOTE_ALL: return "__all_sync";
        case VOTE_ANY: return "__any_sync";
        case VOTE_BALLOT: return "__ballot_sync";
        default: return "__activemask";
    }
}

ThreadRef ref_of(Launch& L, const Thread& t, uintptr_t pc, const char* access) {
    ThreadRef r;
    r.block[0] = L.block_idx.x; r.block[1] = L.block_idx.y; r.block[2] = L.block_idx.z;
    r.thread[0] = t.idx.x; r.thread[1] = t.idx.y; r.thread[2] = t.idx.z;
    r.site = pc ? site_of(pc) : 0;
    r.access = access;
    r.valid = true;
    return r;
}

// All lanes `lanes` of warp `w` are at the same warp operation: exchange values.
void complete_warp_op(Launch& L, std::vector<Thread>& th, unsigned n, unsigned w, unsigned lanes,
                      bool report_sources) {
    unsigned base = w * 32;
    unsigned ballot = 0;
    bool all = true, any = false;
    for (unsigned l = 0; l < 32; ++l) {
        if (!(lanes >> l & 1)) continue;
        int p = th[base + l].wvalue != 0;
        all = all && p;
        any = any || p;
        if (p) ballot |= 1u << l;
    }
    for (unsigned l = 0; l < 32; ++l) {
        if (!(lanes >> l & 1) || base + l >= n) continue;
        Thread& t = th[base + l];
        int op = t.wop;
        if (op <= SHFL_XOR) {
            int width = t.wwidth;
            if (width <= 0 || width > 32 || (width & (width - 1)))
                width = 32;   // CUDA: width must be a power of two up to 32
            unsigned seg = l & ~unsigned(width - 1);
            unsigned src = l;
            if (op == SHFL_IDX) src = seg + (unsigned(t.warg) & unsigned(width - 1));
            else if (op == SHFL_UP) src = (int(l) - t.warg >= int(seg)) ? l - t.warg : l;
            else if (op == SHFL_DOWN) src = (l + t.warg < seg + width) ? l + t.warg : l;
            else {   // xor: a lane may read an earlier group of `width` lanes, not a later one
                unsigned x = l ^ unsigned(t.warg);
                src = x < seg + unsigned(width) ? x : l;
            }
            if (src != l && !(lanes >> src & 1)) {
                if (report_sources && options().synccheck && L.checking && !repeat(fast_key(5, t.wait_pc))) {
                    Report r;
                    r.kind = "shuffle_mask";
                    r.what = "reads a lane outside the mask";
                    r.a = ref_of(L, t, t.wait_pc, "shuffle");
                    if (base + src < n) r.b = ref_of(L, th[base + src], 0, "");
                    r.detail = std::string(warp_op_name(op)) + " with mask " + hex(t.wmask) + ": lane " +
                               std::to_string(l) + " reads lane " + std::to_string(src) +
                               ", which is not in the mask, so its value is undefined";
                    report(r, "shflsrc:" + std::to_string(r.a.site), fast_key(5, t.wait_pc));
                }
                src = l;   // undefined on a GPU; here: its own value
            }
            t.wresult = th[base + src].wvalue;
        } else if (op == VOTE_ALL) {
            t.wresult = all;
        } else if (op == VOTE_ANY) {
            t.wresult = any;
        } else if (op == VOTE_BALLOT) {
            t.wresult = ballot;
        }
        t.wepoch++;
        t.state = READY;
    }
    if (L.primary) L.record->counters.warp_ops++;
}

// Whether every lane named by `mask` is waiting at a warp operation with this mask.
bool warp_op_ready(std::vector<Thread>& th, unsigned n, unsigned w, unsigned mask) {
    for (unsigned l = 0; l < 32; ++l) {
        if (!(mask >> l & 1)) continue;
        unsigned i = w * 32 + l;
        if (i >= n || th[i].state != AT_WARP_OP || th[i].wmask != mask) return false;
    }
    return true;
}

const char* whereabouts(const Thread& t) {
    switch (t.state) {
        case DONE: return "exited";
        case AT_BARRIER: return "wait at __syncthreads";
        case AT_WARP_OP: return "wait at another warp operation";
        default: return "run elsewhere";
    }
}

// No thread is ready: release what can be released, reporting why it was stuck.
void resolve(Launch& L, std::vector<Thread>& th, unsigned n) {
    // 1. warp operations whose lanes never all arrive
    bool any_warp = false;
    for (unsigned i = 0; i < n; ++i) {
        Thread& t = th[i];
        if (t.state != AT_WARP_OP) continue;
        any_warp = true;
        unsigned mask = t.wmask, present = 0, missing = 0;
        unsigned w = t.warp;
        for (unsigned l = 0; l < 32; ++l) {
            if (!(mask >> l & 1)) continue;
            unsigned j = w * 32 + l;
            if (j < n && th[j].state == AT_WARP_OP && th[j].wmask == mask) present |= 1u << l;
            else missing |= 1u << l;
        }
        if (options().synccheck && L.checking) {
            Report r;
            r.kind = "shuffle_mask";
            r.what = "mask names lanes that do not take part";
            r.a = ref_of(L, t, t.wait_pc, "warp operation");
            std::string why;
            for (unsigned l = 0; l < 32; ++l) {
                if (!(missing >> l & 1)) continue;
                unsigned j = w * 32 + l;
                if (j >= n) why = "do not exist (the block has " + std::to_string(n) + " threads)";
                else {
                    if (!r.b.valid) r.b = ref_of(L, th[j], th[j].state == DONE ? 0 : th[j].wait_pc, "");
                    why = whereabouts(th[j]);
                }
                break;
            }
            r.detail = std::string(warp_op_name(t.wop)) + " with mask " + hex(mask) + " waits for lanes " +
                       lane_list(missing) + " of warp " + std::to_string(w) + ", which " + why +
                       "; every lane named in the mask must execute the same warp operation";
            report(r, "shflmiss:" + std::to_string(r.a.site));
        }
        complete_warp_op(L, th, n, w, present, false);
    }
    if (any_warp) return;

    // 2. a barrier
    uintptr_t pc0 = 0;
    int line0 = 0;
    int first = -1, other_barrier = -1, exited = -1;
    unsigned waiting = 0, done = 0;
    for (unsigned i = 0; i < n; ++i) {
        Thread& t = th[i];
        if (t.state == AT_BARRIER) {
            ++waiting;
            if (first < 0) { first = (int)i; pc0 = t.wait_pc; line0 = t.wait_line; }
            else if (t.wait_line != line0 && other_barrier < 0) other_barrier = (int)i;
        } else if (t.state == DONE) {
            ++done;
            if (exited < 0) exited = (int)i;
        }
    }
    if (first < 0) return;   // nothing waits (cannot happen: the caller checked)
    if ((other_barrier >= 0 || done > 0) && options().synccheck && L.checking) {
        Report r;
        r.kind = "barrier_divergence";
        r.a = ref_of(L, th[first], pc0, "__syncthreads");
        if (other_barrier >= 0) {
            r.what = "threads wait at different __syncthreads";
            r.b = ref_of(L, th[other_barrier], th[other_barrier].wait_pc, "__syncthreads");
            r.detail = "threads of one block wait at two different __syncthreads() calls; a barrier "
                       "must be reached by every thread of the block (is it inside a branch that "
                       "depends on threadIdx?)";
            report(r, "divb:" + std::to_string(r.a.site) + ":" + std::to_string(r.b.site));
        } else {
            r.what = "some threads exited before __syncthreads";
            r.b = ref_of(L, th[exited], 0, "exit");
            r.detail = std::to_string(waiting) + " thread(s) wait at __syncthreads() while " +
                       std::to_string(done) + " of the block's " + std::to_string(n) +
                       " threads have already returned; every thread must reach the barrier "
                       "(guard the work, not the barrier: no early return before __syncthreads)";
            report(r, "dive:" + std::to_string(r.a.site));
        }
    }
    // release everyone at a barrier
    int count = 0, all = 1, any = 0;
    for (unsigned i = 0; i < n; ++i) {
        if (th[i].state != AT_BARRIER) continue;
        count += th[i].predicate != 0;
        all = all && th[i].predicate != 0;
        any = any || th[i].predicate != 0;
    }
    for (unsigned i = 0; i < n; ++i) {
        Thread& t = th[i];
        if (t.state != AT_BARRIER) continue;
        t.block_result = t.wop == 1 ? count : (t.wop == 2 ? all : (t.wop == 3 ? any : 0));
        t.state = READY;
    }
    if (L.primary) {
        L.record->counters.barriers++;
        analyze_interval(L, th);
    }
    L.interval++;
}

void make_order(Launch& L, unsigned n, std::vector<unsigned>& order) {
    order.resize(n);
    for (unsigned i = 0; i < n; ++i) order[i] = i;
    if (L.schedule == REVERSE) {
        std::reverse(order.begin(), order.end());
    } else if (L.schedule == SHUFFLED) {
        uint64_t s = splitmix64(L.seed ^ splitmix64(L.block_linear + 1) ^ splitmix64(((uint64_t)L.interval << 32) + 7));
        for (unsigned i = n; i > 1; --i) {
            s = splitmix64(s);
            std::swap(order[i - 1], order[s % i]);
        }
    }
}

void run_block(Launch& L, unsigned n) {
    std::vector<Thread>& th = g_threads;
    const dim3 bd = L.desc->block;
    L.block_epoch = ++g_epoch;
    L.interval = 0;
    shared_memory().reset(L.desc->dynamic_shared, L.block_epoch);
    if (L.desc->dynamic_shared && !shared_memory().dynamic) {
        Report r;
        r.kind = "launch_error";
        r.what = "dynamic shared memory could not be provided";
        report(r, "dynshared");
        abort_launch(cudaErrorLaunchOutOfResources);
    }
    for (unsigned i = 0; i < n; ++i) {
        Thread& t = th[i];
        t.idx = dim3(i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y));
        t.linear = i;
        t.warp = i / 32;
        t.lane = i % 32;
        t.state = READY;
        t.wepoch = 0;
        t.wop = 0;
        t.predicate = 0;
        t.log.clear();
        fiber_prepare(t.fiber, t.stack, t.stack_size);
    }
    std::vector<unsigned> order;
    uint16_t order_interval = 0xffff;
    for (;;) {
        if (order_interval != L.interval || order.size() != n) {
            make_order(L, n, order);
            order_interval = L.interval;
        }
        bool ran = true;
        while (ran && !L.aborted) {
            ran = false;
            for (unsigned k = 0; k < n && !L.aborted; ++k) {
                Thread& t = th[order[k]];
                if (t.state != READY) continue;
                switch_to(L, t);
                ran = true;
            }
        }
        if (L.aborted) return;
        bool all_done = true;
        for (unsigned i = 0; i < n; ++i) all_done = all_done && th[i].state == DONE;
        if (all_done) break;
        resolve(L, th, n);
    }
    if (L.primary) {
        analyze_interval(L, th);
        L.record->counters.blocks++;
        L.record->counters.threads += n;
    }
}

bool config_ok(const mini_cuda_launch_desc* d, std::string& why) {
    const dim3 g = d->grid, b = d->block;
    auto s = [](const dim3& v) {
        return "(" + std::to_string(v.x) + ", " + std::to_string(v.y) + ", " + std::to_string(v.z) + ")";
    };
    if (b.x == 0 || b.y == 0 || b.z == 0) { why = "block " + s(b) + " has a zero dimension"; return false; }
    if (g.x == 0 || g.y == 0 || g.z == 0) { why = "grid " + s(g) + " has a zero dimension"; return false; }
    if ((uint64_t)b.x * b.y * b.z > MAX_THREADS) {
        why = "block " + s(b) + " has " + std::to_string((uint64_t)b.x * b.y * b.z) +
              " threads; at most 1024 threads per block";
        return false;
    }
    if (b.x > 1024 || b.y > 1024 || b.z > 64) { why = "block " + s(b) + " exceeds (1024, 1024, 64)"; return false; }
    if (g.x > 2147483647u || g.y > 65535 || g.z > 65535) {
        why = "grid " + s(g) + " exceeds (2147483647, 65535, 65535)";
        return false;
    }
    if (d->dynamic_shared > g_dynamic_shared_limit) {
        why = "the launch asks for " + std::to_string(d->dynamic_shared) + " bytes of dynamic shared memory; "
              "the limit is " + std::to_string(g_dynamic_shared_limit) +
              " (raise it with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes))";
        return false;
    }
    return true;
}

std::vector<std::string> split_names(const char* s, int n) {
    std::vector<std::string> out;
    std::string cur;
    for (const char* p = s ? s : ""; *p; ++p) {
        if (*p == '\x1f') { out.push_back(cur); cur.clear(); }
        else cur += *p;
    }
    if (!cur.empty() || !out.empty()) out.push_back(cur);
    out.resize(n);
    return out;
}

struct Snapshot {
    Region* region;
    std::vector<char> bytes;
};

std::vector<Snapshot> snapshot_memory() {
    std::vector<Snapshot> out;
    for_each_region([](Region* r, void* v) {
        if (r->space != GLOBAL || r->host_pinned) return;
        auto* vec = static_cast<std::vector<Snapshot>*>(v);
        vec->push_back({r, std::vector<char>((char*)r->base, (char*)r->base + r->size)});
    }, &out);
    return out;
}

void restore_memory(const std::vector<Snapshot>& snap) {
    for (const Snapshot& s : snap) std::memcpy((void*)s.region->base, s.bytes.data(), s.bytes.size());
}

const char* schedule_name(int s) { return s == FORWARD ? "forward" : (s == REVERSE ? "reverse" : "shuffled"); }

// Compares the memory after a later schedule with the first schedule's result.
void compare_results(Launch& L, const std::vector<Snapshot>& first, bool float_atomics, const std::string& label) {
    for (const Snapshot& s : first) {
        const char* now = (const char*)s.region->base;
        size_t n = s.bytes.size();
        if (std::memcmp(now, s.bytes.data(), n) == 0) continue;
        size_t diffs = 0, first_i = (size_t)-1;
        size_t elem = (n % 4 == 0) ? 4 : 1;
        const Region* reg = s.region;
        bool shadow = reg->shadow_epoch == L.primary_epoch && reg->shadow.size() == (reg->size + 3) / 4;
        for (size_t i = 0; i < n; i += elem) {
            if (std::memcmp(now + i, s.bytes.data() + i, elem) == 0) continue;
            // Which atomic comes last is up to the schedule (atomicExch, float atomicAdd):
            // words whose last write was atomic may differ.
            if (shadow && (reg->shadow[i / 4].write.flags & ACC_ATOMIC)) continue;
            if (!shadow && float_atomics && elem == 4) {
                // Float atomics add in schedule order: the last bits may differ.
                float a, b;
                std::memcpy(&a, s.bytes.data() + i, 4);
                std::memcpy(&b, now + i, 4);
                float scale = std::max(std::fabs(a), std::fabs(b));
                if (std::fabs(a - b) <= 1e-4f * scale || (a != a && b != b)) continue;
            }
            if (first_i == (size_t)-1) first_i = i;
            ++diffs;
        }
        if (!diffs) continue;
        Report r;
        r.kind = "schedule_dependent";
        r.what = "result depends on the thread schedule";
        r.space = "global";
        r.region = s.region;
        r.offset = (long long)first_i;
        r.index = (long long)(first_i / elem);
        r.bytes = elem;
        char buf[160];
        if (elem == 4) {
            float a, b;
            int ia, ib;
            std::memcpy(&a, s.bytes.data() + first_i, 4);
            std::memcpy(&b, now + first_i, 4);
            std::memcpy(&ia, &a, 4);
            std::memcpy(&ib, &b, 4);
            std::snprintf(buf, sizeof buf, "forward gives %.9g (int %d), %s gives %.9g (int %d)", a, ia,
                          label.c_str(), b, ib);
        } else {
            std::snprintf(buf, sizeof buf, "forward gives byte %d, %s gives %d", (int)(unsigned char)s.bytes[first_i],
                          label.c_str(), (int)(unsigned char)now[first_i]);
        }
        r.detail = std::to_string(diffs) + " element(s) differ between the forward schedule and the " + label +
                   " schedule (first at element " + std::to_string(first_i / elem) + ": " + buf +
                   "); a correct kernel gives the same result in any order of threads";
        report(r, "sched:" + std::to_string(s.region->id));
    }
}

void run_grid(Launch& L) {
    const mini_cuda_launch_desc* d = L.desc;
    unsigned n = d->block.x * d->block.y * d->block.z;
    L.launch_epoch = ++g_epoch;
    mini_cuda_now.block_dim = d->block;
    mini_cuda_now.grid_dim = d->grid;
    for (uint32_t z = 0; z < d->grid.z && !L.aborted; ++z)
        for (uint32_t y = 0; y < d->grid.y && !L.aborted; ++y)
            for (uint32_t x = 0; x < d->grid.x && !L.aborted; ++x) {
                L.block_idx = dim3(x, y, z);
                L.block_linear = x + d->grid.x * (y + d->grid.y * z);
                mini_cuda_now.block_idx = L.block_idx;
                run_block(L, n);
            }
    if (L.primary) L.record->static_shared = std::max(L.record->static_shared,
                                                      shared_memory().real_bytes);
}
}  // namespace

Launch* current_launch() { return g_launch; }
bool in_kernel() { return g_launch != nullptr && g_launch->current != nullptr; }

ThreadRef current_thread_ref(uintptr_t pc, const char* access) {
    Launch* L = g_launch;
    return ref_of(*L, *L->current, pc, access);
}

void abort_launch(cudaError_t error) {
    Launch* L = g_launch;
    L->aborted = true;
    L->record->error = error;
    if (L->current) {
        Thread* t = L->current;
        fiber_switch(t->fiber, g_scheduler);   // never resumed
    }
    std::abort();   // unreachable: only threads abort launches
}

void set_dynamic_shared_limit(size_t bytes) { g_dynamic_shared_limit = bytes; }
size_t optin_shared_limit() { return OPTIN_SHARED_LIMIT; }

}  // namespace mini_cuda

using namespace mini_cuda;

// Every CUDA thread starts here, on its own stack, and ends by switching back to the
// scheduler for good.
extern "C" void mini_cuda_fiber_main() {
    Launch* L = g_launch;
    L->desc->run_thread(L->desc->ctx);
    L->current->state = DONE;
    fiber_switch(L->current->fiber, g_scheduler);
}

extern "C" void* mini_cuda_param_buffer(size_t bytes, size_t align) {
    if (align < 16) align = 16;
    if (bytes > g_params_size || ((uintptr_t)g_params % align)) {
        std::free(g_params);
        g_params_size = bytes < 4096 ? 4096 : bytes;
        if (posix_memalign(&g_params, align < 64 ? 64 : align, g_params_size) != 0) g_params = nullptr;
    }
    return g_params;
}

extern "C" void mini_cuda_launch(const mini_cuda_launch_desc* d) {
    if (g_launch) {
        Report r;
        r.kind = "launch_error";
        r.what = "kernel launched from a kernel";
        r.detail = std::string("kernel ") + d->kernel_name + " was launched from inside a kernel; "
                   "dynamic parallelism is not supported by the emulator";
        report(r, "nested");
        g_launch->record->error = cudaErrorNotSupported;
        return;
    }
    LaunchRecord* rec = new_launch_record();
    rec->kernel = d->kernel_name ? d->kernel_name : "kernel";
    rec->line = d->line;
    rec->grid = d->grid;
    rec->block = d->block;
    rec->dynamic_shared = d->dynamic_shared;
    rec->checked = d->checked != 0;
    Launch L;
    L.desc = d;
    L.threads = &g_threads;
    L.record = rec;
    L.arg_names = split_names(d->arg_names, d->n_args);
    L.params_lo = (uintptr_t)g_params;
    L.params_hi = (uintptr_t)g_params + g_params_size;

    std::string why;
    if (!config_ok(d, why)) {
        Report r;
        r.kind = "launch_error";
        r.what = "invalid launch configuration";
        r.detail = "kernel " + rec->kernel + " was not run: " + why +
                   " (cudaErrorInvalidConfiguration; check cudaGetLastError() after a launch)";
        g_launch = &L;   // so the report goes to this launch
        report(r, "config");
        g_launch = nullptr;
        rec->error = cudaErrorInvalidConfiguration;
        set_last_error(rec->error);
        return;
    }
    // Name the allocations the kernel receives after the argument expressions.
    for (int i = 0; i < d->n_args; ++i) {
        const void* p = d->arg_pointers[i];
        if (!p) continue;
        Region* r = find_global((uintptr_t)p);
        if (r && r->name.empty() && r->space == GLOBAL && !L.arg_names[i].empty()) r->name = L.arg_names[i];
    }
    unsigned n = d->block.x * d->block.y * d->block.z;
    ensure_threads(n);
    if (g_threads.size() < n) {
        rec->error = cudaErrorMemoryAllocation;
        set_last_error(rec->error);
        return;
    }

    std::vector<std::pair<int, uint64_t>> schedules = options().schedules;
    if (schedules.empty() || !d->checked) schedules.assign(1, schedules.empty() ? std::make_pair(0, (uint64_t)0) : schedules[0]);
    for (size_t i = 0; i < schedules.size(); ++i) {
        if (i) rec->schedules += ",";
        rec->schedules += schedule_name(schedules[i].first);
        if (schedules[i].first == SHUFFLED) rec->schedules += ":" + std::to_string(schedules[i].second);
    }
    std::vector<Snapshot> before, first_result;
    if (schedules.size() > 1) before = snapshot_memory();

    g_launch = &L;
    for (size_t s = 0; s < schedules.size(); ++s) {
        L.schedule = schedules[s].first;
        L.seed = schedules[s].second;
        L.primary = s == 0;
        L.checking = d->checked && L.primary;
        if (s > 0) restore_memory(before);
        run_grid(L);
        if (L.primary) L.primary_epoch = L.launch_epoch;
        if (L.aborted) break;
        if (schedules.size() > 1) {
            if (s == 0) {
                first_result = snapshot_memory();
            } else {
                std::string label = schedule_name(L.schedule);
                if (L.schedule == SHUFFLED) label += " (seed " + std::to_string(L.seed) + ")";
                bool float_atomics = rec->counters.atomics > 0;
                compare_results(L, first_result, float_atomics, label);
            }
        }
    }
    if (!first_result.empty() && !L.aborted) restore_memory(first_result);   // the forward result
    g_launch = nullptr;
    if (rec->error != cudaSuccess) set_last_error(rec->error);
    // An unchecked launch that went well has nothing to tell Python (no counters either).
    if (!rec->checked && rec->reports.empty() && rec->error == cudaSuccess) discard_launch_record(rec);
}

// ------------------------------------------------------------------------ barriers and warps

extern "C" int mini_cuda_barrier(int kind, int predicate, int line) {
    Launch* L = g_launch;
    if (!L || !L->current) return predicate != 0;    // host code: nothing to wait for
    Thread* t = L->current;
    t->state = AT_BARRIER;
    t->wait_pc = (uintptr_t)__builtin_return_address(0);
    t->wait_line = line;
    t->wop = kind;
    t->predicate = predicate;
    yield_thread();
    return t->block_result;
}
extern "C" void __threadfence(void) {}
extern "C" void __threadfence_block(void) {}

extern "C" void mini_cuda_warp_op(int op, unsigned mask, const void* value, void* result, size_t bytes,
                                  int arg, int width, void* pc_) {
    Launch* L = g_launch;
    uintptr_t pc = (uintptr_t)pc_;
    if (!L || !L->current) {    // host code: a warp of one
        if (result && value && op <= SHFL_XOR) std::memcpy(result, value, bytes);
        else if (result && op == ACTIVEMASK) *(unsigned*)result = 1;
        else if (result && value) *(int*)result = op == VOTE_BALLOT ? (*(const int*)value != 0) : (*(const int*)value != 0);
        return;
    }
    Thread* t = L->current;
    std::vector<Thread>& th = *L->threads;
    unsigned n = L->desc->block.x * L->desc->block.y * L->desc->block.z;
    if (op == ACTIVEMASK) {
        unsigned m = 0;
        for (unsigned l = 0; l < 32; ++l) {
            unsigned j = t->warp * 32 + l;
            if (j < n && th[j].state != DONE) m |= 1u << l;
        }
        *(unsigned*)result = m;
        return;
    }
    if (!(mask >> t->lane & 1)) {
        if (options().synccheck && L->checking && !repeat(fast_key(6, pc))) {
            Report r;
            r.kind = "shuffle_mask";
            r.what = "the mask leaves out a lane that executes it";
            r.a = ref_of(*L, *t, pc, "warp operation");
            r.detail = std::string(warp_op_name(op)) + " with mask " + hex(mask) + " is executed by lane " +
                       std::to_string(t->lane) + ", which the mask leaves out; the mask must name every "
                       "lane that executes the call (0xffffffff for a full warp)";
            report(r, "shflomit:" + std::to_string(r.a.site), fast_key(6, pc));
        }
        // Undefined on a GPU.  Here the lane takes part in nothing: it keeps its own value.
        if (result && value && bytes) std::memcpy(result, value, bytes);
        else if (result && op == VOTE_BALLOT) *(unsigned*)result = 0;
        else if (result) std::memset(result, 0, bytes);
        return;
    }
    t->wop = op;
    t->wmask = mask;
    t->warg = arg;
    t->wwidth = width;
    t->wbytes = bytes;
    t->wvalue = 0;
    if (value && bytes) std::memcpy(&t->wvalue, value, bytes);
    t->wait_pc = pc;
    t->state = AT_WARP_OP;
    if (warp_op_ready(th, n, t->warp, mask)) complete_warp_op(*L, th, n, t->warp, mask, true);
    else yield_thread();
    if (result && bytes) std::memcpy(result, &t->wresult, bytes);
}

