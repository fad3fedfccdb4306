// Fibers: switching the CPU from one CUDA thread's stack to another's.
//
// A switch saves the registers a function call must preserve on the current stack,
// stores the stack pointer, loads the other fiber's stack pointer and restores its
// registers.  On x86-64 Linux that is the dozen instructions below; elsewhere
// ucontext's swapcontext does the same job, more slowly (it also saves the signal
// mask, a system call per switch).
#include "runtime.h"

namespace mini_cuda {

#if defined(__x86_64__) && defined(__linux__) && !defined(MINI_CUDA_USE_UCONTEXT)

extern "C" void mini_cuda_switch_stack(void** save_sp, void* load_sp);
extern "C" void mini_cuda_fiber_start();

// mini_cuda_switch_stack(save_sp, load_sp): push the callee-saved registers (and the
// floating-point control words), save rsp in *save_sp, switch to load_sp, pop.
asm(R"(
    .text
    .globl mini_cuda_switch_stack
    .hidden mini_cuda_switch_stack
    .type mini_cuda_switch_stack, @function
mini_cuda_switch_stack:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size mini_cuda_switch_stack, .-mini_cuda_switch_stack

    .globl mini_cuda_fiber_start
    .hidden mini_cuda_fiber_start
    .type mini_cuda_fiber_start, @function
mini_cuda_fiber_start:
    andq $-16, %rsp
    call mini_cuda_fiber_main@PLT
    ud2
    .size mini_cuda_fiber_start, .-mini_cuda_fiber_start
)");

void fiber_prepare(Fiber& f, char* stack, size_t size) {
    // A stack that looks as if mini_cuda_switch_stack had saved it: control words, six
    // registers, and a return address that enters mini_cuda_fiber_start.
    uintptr_t top = ((uintptr_t)(stack + size)) & ~uintptr_t(15);
    void** sp = (void**)top;
    *--sp = nullptr;                              // padding (alignment)
    *--sp = (void*)&mini_cuda_fiber_start;        // return address
    for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp rbx r12 r13 r14 r15
    uint32_t control[2];
    asm volatile("stmxcsr %0" : "=m"(control[0]));
    asm volatile("fnstcw %0" : "=m"(control[1]));
    --sp;
    std::memcpy(sp, control, 8);
    f.sp = sp;
}

void fiber_switch(Fiber& from, Fiber& to) { mini_cuda_switch_stack(&from.sp, to.sp); }

#else

extern "C" void mini_cuda_fiber_main();

void fiber_prepare(Fiber& f, char* stack, size_t size) {
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = stack;
    f.uc.uc_stack.ss_size = size;
    f.uc.uc_link = nullptr;       // mini_cuda_fiber_main never returns
    makecontext(&f.uc, mini_cuda_fiber_main, 0);
}

void fiber_switch(Fiber& from, Fiber& to) { swapcontext(&from.uc, &to.uc); }

#endif

}  // namespace mini_cuda
