// The simulator as a shared library (hostsim/__init__.py library()): every kernel of ptx/*.cu by name, launched
// on host memory with cuLaunchKernel's arguments. Pointers are host addresses; a launch runs to completion.
#include "launch.h"

#if defined(__x86_64__)
// fiber.h's switch: push the registers the System V ABI says a callee keeps (rbp, rbx, r12 - r15), store the stack
// pointer in *save_sp (rdi), load load_sp (rsi), pop the other fiber's, return into it. The x87 and SSE control words
// stay as they are: nothing here changes the rounding mode, and ldmxcsr / fldcw cost more than the rest together.
asm(R"(
    .text
    .p2align 4
    .globl qtui_sim_switch
    .hidden qtui_sim_switch
    .type qtui_sim_switch, @function
qtui_sim_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size qtui_sim_switch, .-qtui_sim_switch
)");
#endif

static std::string last_error;

// 0 on success; -1: no kernel of that name; -2: the launch failed (qtui_sim_error() says why).
extern "C" int qtui_sim_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, int block, unsigned smem,
                               int cluster, void** params) {
    const auto it = sim_kernels().find(name);
    if (it == sim_kernels().end()) {
        last_error = std::string("no kernel ") + name;
        return -1;
    }
    const SimEntry entry = it->second;
    try {
        run_grid([&] { entry(params); }, {gx, gy, gz}, block, smem, cluster);
    } catch (const SimError& e) {
        last_error = std::string(name) + ": " + e.what();
        return -2;
    }
    return 0;
}
extern "C" const char* qtui_sim_error() { return last_error.c_str(); }
extern "C" int qtui_sim_kernel_count() { return (int)sim_kernels().size(); }
extern "C" void qtui_sim_grid_reversed(int on) { g_grid_reversed = on != 0; }
// The simulator's binary16 conversions (cuda_host.h), for their test against numpy.
extern "C" void qtui_sim_half_values(const uint16_t* h, double* out, long n) {
    for (long i = 0; i < n; i++) out[i] = half_value(h[i]);
}
extern "C" void qtui_sim_half_round(const double* v, uint16_t* out, long n) {
    for (long i = 0; i < n; i++) out[i] = half_rn(v[i]);
}
