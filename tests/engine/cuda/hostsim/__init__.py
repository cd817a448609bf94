"""The host simulator of the tensor-core kernels: ptx/mma.cuh's GEMV warp (mma_warp) and embedding lookup and
ptx/gemm.cuh's 64-token GEMM (gemm_stage_x + gemm_body) compiled by g++ for the CPU (kernel_sim.cpp, with
cuda_host.h standing in for CUDA, block.h running each thread block as fibers, and isa_host.h for ptx/isa.cuh's
inline PTX), so that the kernels' per-thread arithmetic is checked against gguf.quants on machines without a GPU,
CI's included.

Built once per content of its sources and the kernel headers (a cache under the temp dir); `defines` builds a
variant (e.g. ("MMA_RING=0",) for the GEMV without its shared-memory ring)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PTX_DIR = HERE.parents[3] / "ptx"
CXX_FLAGS = ["-std=c++20", "-O1", "-pthread", "-ffp-contract=off", "-Wno-unknown-pragmas", "-DQTUI_HOSTSIM"]


class Unavailable(RuntimeError):
    """No C++ compiler here."""


def _sources() -> list[Path]:
    return sorted([*HERE.glob("*.h"), *HERE.glob("*.cpp"), *HERE.glob("include/*.h"), *PTX_DIR.glob("*.cuh")])


def binary(defines: tuple[str, ...] = ()) -> Path:
    """The simulator's executable for these -D defines, compiled if this content was not built before."""
    cxx = shutil.which("g++")
    if cxx is None:
        raise Unavailable("g++ not found")
    key = hashlib.sha256()
    for part in [*CXX_FLAGS, *defines]:
        key.update(part.encode() + b"\0")
    for src in _sources():
        key.update(src.name.encode() + b"\0" + src.read_bytes())
    out_dir = Path(tempfile.gettempdir()) / "qtui-hostsim" / key.hexdigest()[:16]
    exe = out_dir / "kernel_sim"
    if exe.exists():
        return exe
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f"kernel_sim.{os.getpid()}"
    cmd = [cxx, *CXX_FLAGS, *(f"-D{d}" for d in defines), "-include", str(HERE / "cuda_host.h")]
    cmd += ["-I", str(HERE / "include"), "-I", str(PTX_DIR), str(HERE / "kernel_sim.cpp"), "-o", str(tmp)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"hostsim build failed:\n{done.stderr[-4000:]}")
    tmp.replace(exe)  # atomic: a concurrent build of the same content ends the same
    return exe


def _run(args: list[str], defines: tuple[str, ...]) -> None:
    done = subprocess.run([str(binary(defines)), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"kernel_sim {' '.join(args[:8])} failed ({done.returncode}): {done.stderr[-2000:]}")


def gemv(
    qtype: str,
    tiles: np.ndarray,
    n_out: int,
    n_in: int,
    xs: np.ndarray,
    xsum: np.ndarray,
    m: int,
    nt: int,
    parts: int = 1,
    serial: bool = False,
    defines: tuple[str, ...] = (),
) -> np.ndarray:
    """y [m][n_out] float32 of the repacked weight `tiles` times the split rows (xs, xsum): every 16-row tile and
    token pass of nt tiles, K in `parts` parts (one warp each, added in order, or one warp walking them: serial)."""
    with tempfile.TemporaryDirectory() as d:
        paths = [os.path.join(d, n) for n in ("tiles", "xs", "xsum", "y")]
        for arr, path, dt in zip((tiles, xs, xsum), paths, (np.uint8, np.uint32, np.float32), strict=False):
            np.ascontiguousarray(arr, dt).tofile(path)
        _run(["gemv", qtype, str(n_out), str(n_in), str(m), str(nt), str(parts), str(int(serial)), *paths], defines)
        return np.fromfile(paths[3], np.float32).reshape(m, n_out)


def gemm(
    qtype: str,
    tiles: np.ndarray,
    n_out: int,
    n_in: int,
    xs: np.ndarray,
    xsum: np.ndarray,
    m: int,
    parts: int = 1,
    blocks: int = 1,
    defines: tuple[str, ...] = (),
) -> np.ndarray:
    """The same y by the 64-token GEMM (stager + gemm_body) on `blocks` blocks, K in `parts` parts."""
    with tempfile.TemporaryDirectory() as d:
        paths = [os.path.join(d, n) for n in ("tiles", "xs", "xsum", "y")]
        for arr, path, dt in zip((tiles, xs, xsum), paths, (np.uint8, np.uint32, np.float32), strict=False):
            np.ascontiguousarray(arr, dt).tofile(path)
        _run(["gemm", qtype, str(n_out), str(n_in), str(m), str(parts), str(blocks), *paths], defines)
        return np.fromfile(paths[3], np.float32).reshape(m, n_out)


def embed(qtype: str, tiles: np.ndarray, n_out: int, n_in: int, tokens: np.ndarray, defines: tuple[str, ...] = ()):
    """Rows `tokens` of the repacked weight, dequantized by the embedding kernel's body: float32 [len][n_in]."""
    with tempfile.TemporaryDirectory() as d:
        paths = [os.path.join(d, n) for n in ("tiles", "tokens", "out")]
        np.ascontiguousarray(tiles, np.uint8).tofile(paths[0])
        np.ascontiguousarray(tokens, np.int32).tofile(paths[1])
        _run(["embed", qtype, str(n_out), str(n_in), str(len(tokens)), *paths], defines)
        return np.fromfile(paths[2], np.float32).reshape(len(tokens), n_in)
