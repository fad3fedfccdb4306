// The emulator's runtime: what the header (mini_cuda_emulator.h) calls into.
//
//   memory.cpp     device memory: allocations with red zones, what was written, copies
//   scheduler.cpp  launches: blocks, threads as fibers, barriers, warp operations
//   checks.cpp     the access hooks: bounds, uninitialised reads, races, counters
//   api.cpp        the CUDA runtime API, errors, and the C API Python reads reports from
//
// One copy of this library is loaded per process; every compiled module links to it,
// so they share one device memory, one error state and one list of reports.
#pragma once

#if defined(__APPLE__) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700     // macOS hides the (deprecated) ucontext functions without it
#endif
#define MINI_CUDA_RUNTIME 1
#include "../mini_cuda_emulator.h"

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <ucontext.h>

namespace mini_cuda {

// ------------------------------------------------------------------------ options
struct Options {
    bool races = true;          // report data races (shadow memory, needs checked modules)
    bool memcheck = true;       // report out-of-bounds and invalid addresses
    bool initcheck = true;      // report reads of memory nobody wrote
    bool synccheck = true;      // report barrier divergence and bad shuffle masks
    bool counters = true;       // count loads, stores, sectors and bank conflicts
    int max_reports = 100;      // distinct reports kept per launch
    // schedules a launch runs under; more than one compares the results
    std::vector<std::pair<int, uint64_t>> schedules{{0, 0}};
};
enum Schedule { FORWARD = 0, REVERSE = 1, SHUFFLED = 2 };
Options& options();

// ------------------------------------------------------------------------ memory
enum Space : uint8_t { GLOBAL = 0, SHARED = 1, CONSTANT = 2 };
enum AccessFlags : uint16_t { ACC_VALID = 1, ACC_WRITE = 2, ACC_ATOMIC = 4 };

// One access remembered by the race checker: who touched a 4-byte word, when.
struct Access {
    uint32_t site = 0;       // index into the site table (the instruction)
    uint32_t block = 0;      // linear block index
    uint16_t thread = 0;     // linear thread index in the block
    uint16_t interval = 0;   // barriers the block had passed
    uint16_t wepoch = 0;     // warp-level syncs the thread had passed
    uint8_t flags = 0;       // AccessFlags
    uint8_t bytes = 0;       // which bytes of the word (bit mask)
};
struct Shadow {
    Access write, read1, read2;  // last write; the two most recent readers of different threads
};

struct Region {
    uintptr_t base = 0;       // first byte the program may use
    size_t size = 0;          // bytes it may use
    uintptr_t lo = 0, hi = 0; // the region with its red zones: [lo, hi)
    Space space = GLOBAL;
    bool managed = false;     // host code may touch it (cudaMallocManaged, mini's cuda device)
    bool host_pinned = false; // cudaMallocHost: host memory, not device memory
    uint32_t id = 0;          // allocation number, counted from 1
    int line = 0;             // declaration line (shared variables)
    std::string name;         // a launch argument's expression, or the variable's name
    std::vector<uint8_t> written;  // per byte: 1 once written
    std::vector<Shadow> shadow;    // per 4-byte word, for the current launch/block
    uint64_t shadow_epoch = 0;     // launch (global) or block (shared) the shadow is for
    void* raw = nullptr;           // what to free
    size_t raw_size = 0;
    std::string describe() const;  // "d_out (cudaMalloc #3, 148 bytes)"
};

// Device memory: allocations, the constant banks, and the shared memory of the block
// that runs now.
Region* find_global(uintptr_t addr);     // cudaMalloc'd, managed or constant region containing addr
Region* find_shared(uintptr_t addr);     // shared variable of the current block containing addr
Region* allocation_starting_at(uintptr_t addr);
Region* new_allocation(size_t size, bool managed, bool host_pinned);
bool free_allocation(void* ptr);
void register_constant_bank(uintptr_t begin, uintptr_t end, Space space);  // a module's variables
void mark_written(Region* r, uintptr_t addr, size_t n);

// The shared memory of one block: variables placed with red zones in one mapping.
struct SharedMemory {
    char* base = nullptr;
    size_t capacity = 0;       // mapped bytes
    size_t used = 0;           // bytes placed so far (with red zones)
    size_t real_bytes = 0;     // bytes a GPU would need (no red zones)
    std::vector<std::unique_ptr<Region>> vars;  // index: declaration order in this block
    std::unordered_map<int, Region*> by_decl;
    Region* dynamic = nullptr;
    void reset(size_t dynamic_bytes, uint64_t block_epoch);
    Region* place(size_t bytes, size_t align, const char* name, int line);
};
SharedMemory& shared_memory();

// ------------------------------------------------------------------------ sites and reports
// A site is an instruction of a kernel: its address, resolved to a file line by Python.
uint32_t site_of(uintptr_t pc);
uintptr_t site_pc(uint32_t site);

struct ThreadRef {
    uint32_t block[3] = {0, 0, 0}, thread[3] = {0, 0, 0};
    uint32_t site = 0;
    const char* access = "";    // "read", "write", "atomic"
    bool valid = false;
};
struct Report {
    std::string kind;      // race, out_of_bounds, invalid_address, uninitialized_read,
                           // barrier_divergence, shuffle_mask, schedule_dependent,
                           // launch_error, api_error, host_access, assert
    std::string what;      // read-after-write, ... or a short phrase
    std::string space;     // "global", "shared", "constant" or ""
    const Region* region = nullptr;    // copied into the fields below when reported
    std::string alloc_name;
    uint32_t alloc_id = 0;
    size_t alloc_bytes = 0;
    int alloc_line = 0;
    long long index = -1;  // element index (offset / access size), -1 when none
    long long offset = -1; // byte offset from the allocation's start
    size_t bytes = 0;      // access size
    ThreadRef a, b;        // the thread(s) involved
    std::string detail;    // free text (a count, a mask, a value)
    uint64_t count = 1;    // occurrences folded into this report
};
// Adds a report to the current launch (or the host list), folding it into an earlier one
// with the same key.  Returns false once the per-launch limit is reached.
void report(Report r, const std::string& key, uint64_t fast_key = 0);
// For checks that can fire at every access: a numeric key looked up before any report
// is built.  repeat(k) counts one more occurrence and returns true when k was reported.
uint64_t fast_key(uint64_t tag, uint64_t a, uint64_t b = 0, uint64_t c = 0);
bool repeat(uint64_t fast_key);

// ------------------------------------------------------------------------ threads and launches
enum ThreadState : uint8_t { READY, AT_BARRIER, AT_WARP_OP, DONE };

// A paused computation with its own stack (fiber.cpp).
struct Fiber {
    void* sp = nullptr;     // the saved stack pointer (x86-64 Linux)
    ucontext_t uc;          // the saved context (everywhere else)
};
void fiber_prepare(Fiber& f, char* stack, size_t size);   // to run mini_cuda_fiber_main
void fiber_switch(Fiber& from, Fiber& to);

// One access a thread made, kept until the end of the barrier interval, when the
// accesses of a warp are grouped into warp-wide requests for the counters.
struct LogEntry {
    uintptr_t addr;
    uintptr_t pc;
    uint32_t bytes;
    uint8_t write;    // 0 read, 1 write, 2 atomic
    uint8_t space;
};

struct Thread {
    Fiber fiber;
    char* stack = nullptr;
    size_t stack_size = 0;
    dim3 idx;
    uint32_t linear = 0, warp = 0, lane = 0;
    ThreadState state = READY;
    uintptr_t wait_pc = 0;         // where it waits (barrier or warp operation)
    int wait_line = 0;             // the source line of the barrier it waits at
    uint16_t wepoch = 0;
    // a warp operation in progress
    int wop = 0, warg = 0, wwidth = 32;
    unsigned wmask = 0;
    size_t wbytes = 0;
    uint64_t wvalue = 0, wresult = 0;
    // __syncthreads_count / _and / _or
    int predicate = 0, block_result = 0;
    std::vector<LogEntry> log;
};

struct Counters {
    uint64_t global_loads = 0, global_stores = 0, global_load_bytes = 0, global_store_bytes = 0;
    uint64_t global_load_requests = 0, global_store_requests = 0;
    uint64_t global_load_sectors = 0, global_store_sectors = 0;
    uint64_t shared_loads = 0, shared_stores = 0, shared_load_requests = 0, shared_store_requests = 0;
    uint64_t shared_wavefronts = 0, shared_bank_conflicts = 0;
    uint64_t atomics = 0, barriers = 0, warp_ops = 0, threads = 0, blocks = 0;
};

struct LaunchRecord {
    uint64_t id = 0;
    std::string kernel;
    int line = 0;
    dim3 grid, block;
    size_t dynamic_shared = 0;
    size_t static_shared = 0;
    bool checked = false;
    cudaError_t error = cudaSuccess;
    std::string schedules;
    Counters counters;
    std::vector<Report> reports;
    std::unordered_map<std::string, size_t> report_index;
    std::unordered_map<uint64_t, size_t> fast_index;   // fast key -> report (or SIZE_MAX: dropped)
    uint64_t dropped_reports = 0;
};

// The launch that runs now (null between launches).
struct Launch {
    const mini_cuda_launch_desc* desc = nullptr;
    LaunchRecord* record = nullptr;
    std::vector<std::string> arg_names;
    int schedule = FORWARD;
    uint64_t seed = 0;
    bool primary = true;           // the first schedule: the one that checks and counts
    bool checking = false;         // accesses are checked in this run
    bool aborted = false;          // a fatal error stopped the launch
    uint32_t block_linear = 0;
    dim3 block_idx;
    uint16_t interval = 0;
    uint64_t block_epoch = 0;      // unique per block run (shared shadow epochs)
    uint64_t launch_epoch = 0;     // unique per launch run (global shadow epochs)
    uint64_t primary_epoch = 0;    // launch_epoch of the first schedule's run
    std::vector<Thread>* threads = nullptr;
    Thread* current = nullptr;
    uintptr_t stack_lo = 0, stack_hi = 0;   // the current thread's stack
    uintptr_t params_lo = 0, params_hi = 0; // the parameter buffer
};
extern Launch* g_launch;         // the launch that runs now, or null
Launch* current_launch();
bool in_kernel();

// Stops the whole launch at once (a fatal error in a thread: the access cannot happen).
[[noreturn]] void abort_launch(cudaError_t error);
ThreadRef current_thread_ref(uintptr_t pc, const char* access);

void analyze_interval(Launch& L, std::vector<Thread>& threads);   // checks.cpp: counters
void set_last_error(cudaError_t e);
LaunchRecord* new_launch_record();
void discard_launch_record(LaunchRecord* rec);   // the newest one only
void for_each_region(void (*fn)(Region*, void*), void* arg);
void set_dynamic_shared_limit(size_t bytes);
size_t optin_shared_limit();
LaunchRecord* host_record();     // reports made outside kernels (API misuse)
void count_transfer(int kind, size_t bytes);

}  // namespace mini_cuda
