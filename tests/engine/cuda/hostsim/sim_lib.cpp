// The simulator as a shared library (hostsim/__init__.py library()): every kernel of ptx/*.cu by name, launched
// on host memory with cuLaunchKernel's arguments. Pointers are host addresses; a launch runs to completion.
#include "launch.h"

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
