// Device memory of the emulator.
//
// An allocation is ordinary host memory with a *red zone* on each side: bytes the
// program must not touch.  An access that lands in a red zone is reported as out of
// bounds (and is harmless: the red zone is ours); one that lands nowhere known is an
// invalid address and stops the launch before it happens.  cudaMalloc'd bytes start
// as 0xff (a float NaN, an int -1) and are marked unwritten until something writes them.
#include "runtime.h"

#include <cstdlib>
#include <sys/mman.h>

namespace mini_cuda {

namespace {
constexpr size_t ALIGN = 256;                    // cudaMalloc's alignment
constexpr size_t LEFT_RED = 256;
std::map<uintptr_t, std::unique_ptr<Region>> g_regions;   // by lo
Region* g_last = nullptr;                         // the region found last (a cache)
uint32_t g_next_id = 1;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

size_t right_red_zone(size_t size) {
    // Large enough to catch an index that runs a whole row past the end.
    size_t r = size < 4096 ? 4096 : (size > (1u << 20) ? (1u << 20) : size);
    return round_up(r, ALIGN);
}
}  // namespace

std::string Region::describe() const {
    std::string who = name.empty() ? std::string("allocation") : name;
    std::string kind;
    if (space == SHARED) kind = "__shared__";
    else if (space == CONSTANT) kind = "__constant__ memory";
    else if (managed) kind = "managed allocation #" + std::to_string(id);
    else kind = "cudaMalloc #" + std::to_string(id);
    return who + " (" + kind + ", " + std::to_string(size) + " bytes)";
}

Region* new_allocation(size_t size, bool managed, bool host_pinned) {
    size_t body = round_up(size ? size : 1, ALIGN);
    size_t raw_size = LEFT_RED + body + right_red_zone(body);
    void* raw = nullptr;
    if (posix_memalign(&raw, ALIGN, raw_size) != 0) return nullptr;
    auto r = std::make_unique<Region>();
    r->raw = raw;
    r->raw_size = raw_size;
    r->lo = (uintptr_t)raw;
    r->hi = r->lo + raw_size;
    r->base = r->lo + LEFT_RED;
    r->size = size;
    r->managed = managed;
    r->host_pinned = host_pinned;
    r->space = GLOBAL;
    r->id = g_next_id++;
    if (!managed && !host_pinned) {
        std::memset(raw, 0xff, raw_size);       // poison: uninitialised floats read as NaN
        r->written.assign(size, 0);
    } else {
        // Like malloc: contents undefined, but host code writes it without telling us,
        // so it counts as written.  Only the red zones are poisoned.
        std::memset(raw, 0xff, LEFT_RED);
        std::memset((char*)raw + LEFT_RED + size, 0xff, raw_size - LEFT_RED - size);
    }
    Region* out = r.get();
    g_regions[out->lo] = std::move(r);
    return out;
}

Region* allocation_starting_at(uintptr_t addr) {
    Region* r = find_global(addr);
    return (r && r->base == addr && r->space == GLOBAL) ? r : nullptr;
}

bool free_allocation(void* ptr) {
    Region* r = allocation_starting_at((uintptr_t)ptr);
    if (!r) return false;
    if (g_last == r) g_last = nullptr;
    void* raw = r->raw;
    g_regions.erase(r->lo);
    std::free(raw);
    return true;
}

void register_constant_bank(uintptr_t begin, uintptr_t end, Space space) {
    if (find_global(begin)) return;
    auto r = std::make_unique<Region>();
    r->lo = r->base = begin;
    r->hi = end;
    r->size = end - begin;
    r->space = space;
    r->managed = true;   // initialised by the module's loader
    r->name = space == CONSTANT ? "__constant__ variables" : "__device__ variables";
    r->id = g_next_id++;
    g_regions[begin] = std::move(r);
}

void for_each_region(void (*fn)(Region*, void*), void* arg) {
    for (auto& kv : g_regions) fn(kv.second.get(), arg);
}

Region* find_global(uintptr_t addr) {
    Region* last = g_last;
    if (last && addr - last->lo < last->hi - last->lo) return last;
    auto it = g_regions.upper_bound(addr);
    if (it == g_regions.begin()) return nullptr;
    --it;
    Region* r = it->second.get();
    if (addr >= r->hi) return nullptr;
    g_last = r;
    return r;
}

void mark_written(Region* r, uintptr_t addr, size_t n) {
    if (r->written.empty()) return;
    uintptr_t a = addr < r->base ? r->base : addr;
    uintptr_t b = addr + n > r->base + r->size ? r->base + r->size : addr + n;
    if (a < b) std::memset(&r->written[a - r->base], 1, b - a);
}

// ------------------------------------------------------------------------ shared memory
namespace {
constexpr size_t SHARED_MAP_BYTES = size_t(256) << 20;   // reserved; pages appear when touched
SharedMemory g_shared;
}

SharedMemory& shared_memory() { return g_shared; }

void SharedMemory::reset(size_t dynamic_bytes, uint64_t) {
    if (!base) {
        void* p = mmap(nullptr, SHARED_MAP_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) { base = nullptr; return; }
        base = (char*)p;
        capacity = SHARED_MAP_BYTES;
    }
    vars.clear();
    by_decl.clear();
    used = 0;
    real_bytes = 0;
    dynamic = nullptr;
    if (dynamic_bytes) dynamic = place(dynamic_bytes, 16, "extern __shared__", 0);
}

Region* SharedMemory::place(size_t bytes, size_t align, const char* name, int line) {
    size_t red = right_red_zone(bytes * 8);
    size_t start = round_up(used, ALIGN);
    if (align > ALIGN) start = round_up(start, align);
    if (!base || start + bytes + red > capacity) return nullptr;
    auto r = std::make_unique<Region>();
    r->lo = (uintptr_t)base + start;
    r->base = r->lo;
    r->size = bytes;
    r->hi = r->base + round_up(bytes ? bytes : 1, ALIGN) + red;
    r->space = SHARED;
    r->name = name ? name : "";
    r->line = line;
    r->written.assign(bytes, 0);
    std::memset(base + start, 0xff, r->hi - r->lo);   // poison the variable and its red zone
    used = r->hi - (uintptr_t)base;
    real_bytes = round_up(real_bytes, align) + bytes;
    Region* out = r.get();
    vars.push_back(std::move(r));
    return out;
}

Region* find_shared(uintptr_t addr) {
    SharedMemory& s = g_shared;
    if (!s.base || addr - (uintptr_t)s.base >= s.used) return nullptr;
    // Few variables per block: a linear scan from the last one placed.
    for (auto it = s.vars.rbegin(); it != s.vars.rend(); ++it) {
        Region* r = it->get();
        if (addr >= r->lo && addr < r->hi) return r;
    }
    return nullptr;
}

}  // namespace mini_cuda
