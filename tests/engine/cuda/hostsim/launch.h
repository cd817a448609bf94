// The kernels of a ptx/*.cu file as launchable entries: each extern "C" kernel registers under its name a function
// that calls it with cuLaunchKernel's argument form (params[i] points at argument i), its parameter types
// deduced from its own declaration. hostsim/__init__.py generates one SIM_KERNEL line per kernel it finds.
#pragma once
#include <map>
#include <string>
#include <type_traits>
#include <utility>

using SimEntry = void (*)(void**);
inline std::map<std::string, SimEntry>& sim_kernels() {
    static std::map<std::string, SimEntry> table;
    return table;
}
template <class... A, size_t... I>
inline void sim_invoke(void (*fn)(A...), void** params, std::index_sequence<I...>) {
    fn(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(params[I])...);
}
template <class... A>
inline void sim_invoke(void (*fn)(A...), void** params) {
    sim_invoke(fn, params, std::index_sequence_for<A...>{});
}
struct SimRegister {
    SimRegister(const char* name, SimEntry entry) { sim_kernels()[name] = entry; }
};
#define SIM_KERNEL(name) static SimRegister sim_register_##name(#name, [](void** p) { sim_invoke(&name, p); });
