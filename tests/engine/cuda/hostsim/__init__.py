"""The host simulator: every kernel of ptx/*.cu compiled by g++ for the CPU and launched by name on host memory,
so that the kernel-level GPU tests run on machines without a GPU (CI's included; device.py's SimGpu is their
`gpu` fixture there). cuda_host.h stands in for CUDA's language and intrinsics, block.h runs each thread block
(each thread-block cluster) as fibers, isa_host.h is the C++ twin of ptx/isa.cuh's inline PTX (the MMAs as exact
sums, wgmma asynchronous, mbarriers and bulk copies), launch.h and sim_lib.cpp make the launchable library.

It checks what the kernels compute, index and synchronize, per thread; not the tensor cores' rounding inside one
MMA (here an exact sum, rounded once), nor timing.

Built once per content of its sources and the kernels (a cache under the temp dir), loaded once per process;
`defines` builds a variant (e.g. ("MMA_RING=0",): the GEMV without its shared-memory ring), `ptx_dir` and `only`
another copy of the kernels (the simulator's own tests: a mutated kernel must fail)."""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
PTX_DIR = HERE.parents[3] / "ptx"
# -fno-strict-aliasing: CUDA code reads registers through reinterpret_cast (nvcc allows it, g++ -O2 would not);
# -ffp-contract=off: no fused multiply-add the source does not write; -U_FORTIFY_SOURCE: no fortified checks
# across the fibers' stack switches (swapcontext, where fiber.h uses it). -fno-gnu-unique: a static inside an
# inline function (launch.h's kernel table, a kernel's __shared__ arrays) would otherwise be one object for every
# library loaded in the process, so a mutated or variant build's kernels replaced the plain build's by name.
CXX_FLAGS = [
    "-std=c++20",
    "-O2",
    "-pthread",
    "-ffp-contract=off",
    "-fno-strict-aliasing",
    "-Wno-unknown-pragmas",
    "-U_FORTIFY_SOURCE",
    "-fno-gnu-unique",
    "-DQTUI_HOSTSIM",
]
_KERNEL = re.compile(r'extern\s+"C"\s+void\s+(\w+)\s*\(')


class Unavailable(RuntimeError):
    """No C++ compiler here."""


def _cxx() -> str:
    cxx = shutil.which("g++")
    if cxx is None:
        raise Unavailable("g++ not found")
    return cxx


def _flags(defines: tuple[str, ...], ptx_dir: Path) -> list[str]:
    return [*CXX_FLAGS, *(f"-D{d}" for d in defines), "-include", str(HERE / "cuda_host.h")] + [
        f"-I{d}" for d in (HERE / "include", HERE, ptx_dir)
    ]


def _compile(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"hostsim build failed: {' '.join(cmd[-3:])}\n{done.stderr[-4000:]}")


def kernel_names(cu: Path, defines: tuple[str, ...] = ()) -> list[str]:
    """The extern "C" kernels a .cu file defines (its text after the preprocessor: macros expanded)."""
    cmd = [_cxx(), *_flags(defines, cu.parent), "-x", "c++", "-E", str(cu)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"hostsim: preprocessing {cu.name} failed\n{done.stderr[-4000:]}")
    return sorted(set(_KERNEL.findall(done.stdout)))


def _build(out_dir: Path, so: Path, units: list[Path], defines: tuple[str, ...], ptx_dir: Path) -> None:
    """Compile every kernel file and sim_lib.cpp into out_dir, and link them as `so`."""
    flags = [*_flags(defines, ptx_dir), "-fPIC", "-c"]
    objects = [out_dir / "sim_lib.o"]
    jobs = [[_cxx(), *flags, str(HERE / "sim_lib.cpp"), "-o", str(objects[0])]]
    for cu in units:  # one object per kernel file: each registers its kernels by name (launch.h)
        wrapper = out_dir / f"sim_{cu.stem}.cpp"
        lines = [
            f'#include "{cu}"',
            '#include "launch.h"',
            *(f"SIM_KERNEL({k})" for k in kernel_names(cu, defines)),
        ]
        wrapper.write_text("\n".join(lines) + "\n")
        objects.append(out_dir / f"sim_{cu.stem}.o")
        jobs.append([_cxx(), *flags, str(wrapper), "-o", str(objects[-1])])
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        list(pool.map(_compile, jobs))
    tmp = out_dir / f"libqtui_sim.{os.getpid()}.so"
    _compile([_cxx(), "-shared", "-pthread", *map(str, objects), "-o", str(tmp)])
    tmp.replace(so)  # atomic: whoever finds `so` finds it whole


_LIBS: dict[tuple, ctypes.CDLL] = {}


def library(defines: tuple[str, ...] = (), ptx_dir: Path = PTX_DIR, only: tuple[str, ...] = ()) -> ctypes.CDLL:
    """The kernels of ptx_dir/*.cu (or of the files named in `only`) for the CPU: sim_lib.cpp's qtui_sim_launch."""
    units = [ptx_dir / f for f in only] if only else sorted(ptx_dir.glob("*.cu"))
    key = (defines, str(ptx_dir), only)
    if key in _LIBS:
        return _LIBS[key]
    digest = hashlib.sha256()
    for part in [*CXX_FLAGS, *defines, *only]:
        digest.update(part.encode() + b"\0")
    sources = [*HERE.glob("*.h"), *HERE.glob("*.cpp"), *HERE.glob("include/*.h"), *ptx_dir.glob("*.cuh"), *units]
    for src in sorted(sources):
        digest.update(src.name.encode() + b"\0" + src.read_bytes())
    out_dir = Path(tempfile.gettempdir()) / "qtui-hostsim" / digest.hexdigest()[:16]
    so = out_dir / "libqtui_sim.so"
    if not so.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        with open(out_dir / "build.lock", "w") as lock:  # pytest-xdist's workers: one builds, the others wait
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not so.exists():
                _build(out_dir, so, units, defines, ptx_dir)
    lib = ctypes.CDLL(str(so))
    lib.qtui_sim_launch.restype = ctypes.c_int
    lib.qtui_sim_launch.argtypes = [ctypes.c_char_p, *[ctypes.c_uint] * 3, ctypes.c_int, ctypes.c_uint, ctypes.c_int]
    lib.qtui_sim_launch.argtypes += [ctypes.c_void_p]
    for conversion in (lib.qtui_sim_half_values, lib.qtui_sim_half_round):
        conversion.restype = None
        conversion.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
    lib.qtui_sim_error.restype = ctypes.c_char_p
    _LIBS[key] = lib
    return lib
