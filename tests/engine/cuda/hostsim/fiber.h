// A CUDA thread's fiber (block.h): its own stack, and a switch that saves only what a function call must keep.
// On x86-64 the switch is sim_lib.cpp's qtui_sim_switch (the callee-saved registers, then the stack pointer):
// glibc's _longjmp unwinds cancellation handlers on every jump, and fibers switch at every barrier, shuffle and
// MMA, so it was a sixth of the simulator's time. Elsewhere ucontext's swapcontext does it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
extern "C" void qtui_sim_switch(void** save_sp, void* load_sp);  // sim_lib.cpp

struct SimFiber {
    void* sp = nullptr;  // where its registers lie, pushed by qtui_sim_switch
};
// A fiber that starts at `entry` (which must never return) on the stack [stack, stack + size).
inline void sim_fiber_make(SimFiber& f, char* stack, size_t size, void (*entry)()) {
    // The frame qtui_sim_switch pops: r15 .. r12, rbx, rbp, then `ret` into entry. Aligned so that entry starts as
    // if called (rsp + 8 a multiple of 16), with a null return address above it.
    auto** sp = reinterpret_cast<void**>((reinterpret_cast<uintptr_t>(stack + size) & ~uintptr_t{15}) - 64);
    std::memset(sp, 0, 64);
    sp[6] = reinterpret_cast<void*>(entry);
    f.sp = sp;
}
inline void sim_fiber_switch(SimFiber& from, SimFiber& to) { qtui_sim_switch(&from.sp, to.sp); }
#else
#include <ucontext.h>

struct SimFiber {
    ucontext_t uc;
};
inline void sim_fiber_make(SimFiber& f, char* stack, size_t size, void (*entry)()) {
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = stack;
    f.uc.uc_stack.ss_size = size;
    f.uc.uc_link = nullptr;  // entry never returns
    makecontext(&f.uc, entry, 0);
}
inline void sim_fiber_switch(SimFiber& from, SimFiber& to) { swapcontext(&from.uc, &to.uc); }
#endif
