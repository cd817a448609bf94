"""Thin checked layer over `cuda.bindings.driver` (reference/python_stack.md §1–2). No cuda.core.

Every driver call returns a tuple `(CUresult, *outs)`; `check` turns a failure into `CudaError(call, name)`.
Python objects own no CUDA resources (nothing is freed by GC): the engine frees what it allocates in `close()`.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from qtui.errors import CudaError

PTX_DIR = Path(__file__).resolve().parents[3] / "ptx"
_state = threading.local()
_lock = threading.Lock()
_primary: dict[str, Any] = {}


def _cu() -> Any:
    from cuda.bindings import driver

    return driver


def check(result: tuple[Any, ...], call_name: str) -> Any:
    """Raise CudaError naming the call and the CUresult on failure; else return the outputs (None, one, or tuple)."""
    cu = _cu()
    err = result[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        # the enum's own name: no driver call, so this works even when the driver itself is the problem
        raise CudaError(call_name, getattr(err, "name", str(err)))
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def cuda_available() -> bool:
    """True where a driver answers cuInit and has a device. Never raises (cuInit raises without libcuda)."""
    try:
        cu = _cu()
        (err,) = cu.cuInit(0)
        if err != cu.CUresult.CUDA_SUCCESS:
            return False
        err, n = cu.cuDeviceGetCount()
        return bool(err == cu.CUresult.CUDA_SUCCESS and n > 0)  # cuda.bindings is untyped: its values are Any
    except Exception:
        return False


def primary_context(device: int = 0) -> Any:
    """Retain device `device`'s primary context once per process and make it current in this thread.

    Call it at the top of every public engine method: the scheduler runs the engine in its own thread, and a
    context is current per host thread.
    """
    cu = _cu()
    with _lock:
        if "ctx" not in _primary:
            check(cu.cuInit(0), "cuInit")
            dev = check(cu.cuDeviceGet(device), "cuDeviceGet")
            _primary["dev"] = dev
            _primary["ctx"] = check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    ctx = _primary["ctx"]
    if getattr(_state, "ctx", None) is not ctx:
        check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        _state.ctx = ctx
    return ctx


def device_name() -> str:
    primary_context()
    raw: bytes = check(_cu().cuDeviceGetName(128, _primary["dev"]), "cuDeviceGetName")
    return raw.split(b"\0")[0].decode()


def device_attribute(name: str) -> int:
    cu = _cu()
    attr = getattr(cu.CUdevice_attribute, name)
    return int(check(cu.cuDeviceGetAttribute(attr, _primary["dev"]), "cuDeviceGetAttribute"))


def ptx_path(stem: str) -> Path:
    """<stem>.ptx from the first directory of $QTUI_PTX_DIR that holds it, else ptx/<stem>.ptx (load_module)."""
    search = [Path(d) / f"{stem}.ptx" for d in os.environ.get("QTUI_PTX_DIR", "").split(os.pathsep) if d]
    return next((p for p in search if p.exists()), PTX_DIR / f"{stem}.ptx")


def load_module(stem: str) -> Any:
    """Load ptx/<stem>.ptx (JIT for this GPU), or <stem>.ptx from the first directory of $QTUI_PTX_DIR (a search
    path, os.pathsep between directories) that holds it (kernel experiments: variants built elsewhere, same entry
    points; a variant of a few modules can sit in front of a whole build). On failure the CudaError carries the
    JIT error log."""
    cu = _cu()
    image = ptx_path(stem).read_bytes() + b"\0"
    log = bytearray(8192)
    opts = [cu.CUjit_option.CU_JIT_ERROR_LOG_BUFFER, cu.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
    err, module = cu.cuModuleLoadDataEx(image, 2, opts, [log, len(log)])
    if err != cu.CUresult.CUDA_SUCCESS:
        detail = bytes(log).split(b"\0")[0].decode(errors="replace")
        raise CudaError(f"cuModuleLoadDataEx({stem}.ptx)", getattr(err, "name", str(err)), detail)
    return module


KernelArg = tuple[int | float, type[np.generic]]  # (value, numpy dtype): see Kernel


class Kernel:
    """One launch site: a kernel function, grid/block and a prepacked argument array (python_stack.md §1.7
    Form B). Arguments are fixed at construction (pointers to fixed buffers), so the same object serves eager
    launches and graph capture. `args` are (value, numpy dtype): np.uint64 for pointers, np.int32, np.int64,
    np.float32. `pdl`: launch with Programmatic Dependent Launch (cuLaunchKernelEx with programmatic stream
    serialization; captured into graphs as programmatic edges): the kernel may start while the one before it
    drains, and must follow the griddepcontrol contract of ptx/common.cuh. `fn` None: a dry site (the CPU ABI
    test builds every site without a GPU).
    """

    __slots__ = ("fn", "grid", "block", "shmem", "cells", "params", "name", "pdl", "cluster", "_config")

    def __init__(
        self,
        fn: Any,
        name: str,
        grid: tuple[int, int, int],
        block: int,
        args: list[KernelArg],
        shmem: int = 0,
        pdl: bool = True,
        cluster: int = 1,
    ) -> None:
        assert all(g > 0 for g in grid) and 0 < block <= 1024, (name, grid, block)
        assert cluster >= 1 and grid[0] % cluster == 0, (name, grid, cluster)
        self.fn, self.name, self.grid, self.block, self.shmem, self.pdl = fn, name, grid, block, shmem, pdl
        self.cluster = cluster
        self.cells = [np.array([int(v) if t == np.uint64 else v], dtype=t) for v, t in args]
        self.params = np.array([c.ctypes.data for c in self.cells], dtype=np.uint64)
        self._config: Any = None

    @property
    def arg_types(self) -> list[np.dtype]:
        return [c.dtype for c in self.cells]

    def _launch_config(self) -> Any:
        cu = _cu()
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = self.grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = self.block, 1, 1
        cfg.sharedMemBytes = self.shmem
        attrs = []
        if self.pdl:
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            attrs.append(attr)
        if self.cluster > 1:  # blocks [c * cluster, (c + 1) * cluster) of x form thread-block cluster c
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = self.cluster, 1, 1
            attrs.append(attr)
        cfg.attrs = attrs
        cfg.numAttrs = len(attrs)
        return cfg

    def launch(self, stream: Any) -> None:
        assert self.fn is not None, f"{self.name}: a dry launch site cannot run"
        if self.pdl or self.cluster > 1:
            if self._config is None:
                self._config = self._launch_config()
            self._config.hStream = stream
            check(
                _cu().cuLaunchKernelEx(self._config, self.fn, self.params.ctypes.data, 0),
                f"cuLaunchKernelEx({self.name})",
            )
            return
        g = self.grid
        check(
            _cu().cuLaunchKernel(
                self.fn, g[0], g[1], g[2], self.block, 1, 1, self.shmem, stream, self.params.ctypes.data, 0
            ),
            f"cuLaunchKernel({self.name})",
        )


class DeviceBuffer:
    """A device allocation of `nbytes` (int(ptr) is the address)."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = max(int(nbytes), 4)
        self.ptr = check(_cu().cuMemAlloc(self.nbytes), f"cuMemAlloc({self.nbytes})")

    def __int__(self) -> int:
        return int(self.ptr)

    def upload(self, host: np.ndarray, stream: Any, offset: int = 0) -> None:
        host = np.ascontiguousarray(host)
        assert offset + host.nbytes <= self.nbytes
        DeviceBuffer.upload_to(int(self.ptr) + offset, host, stream)

    @staticmethod
    def upload_to(dst: int, host: np.ndarray, stream: Any) -> None:
        """Copy a host array to device address dst (inside an allocation the caller sized)."""
        host = np.ascontiguousarray(host)
        check(_cu().cuMemcpyHtoDAsync(dst, host.ctypes.data, host.nbytes, stream), "cuMemcpyHtoDAsync")

    def download(self, out: np.ndarray, stream: Any, offset: int = 0) -> np.ndarray:
        assert out.flags.c_contiguous and offset + out.nbytes <= self.nbytes
        check(_cu().cuMemcpyDtoHAsync(out.ctypes.data, int(self.ptr) + offset, out.nbytes, stream), "cuMemcpyDtoHAsync")
        return out

    def zero(self, stream: Any, offset: int = 0, nbytes: int | None = None) -> None:
        n = self.nbytes - offset if nbytes is None else nbytes
        assert offset % 4 == 0 and n % 4 == 0
        check(_cu().cuMemsetD32Async(int(self.ptr) + offset, 0, n // 4, stream), "cuMemsetD32Async")

    def free(self) -> None:
        if self.ptr is not None:
            check(_cu().cuMemFree(self.ptr), "cuMemFree")
            self.ptr = None


class PinnedArray:
    """Page-locked host memory seen as a numpy array (async copies need pinned memory; a captured copy reads
    the pinned buffer at replay time, python_stack.md §2.1)."""

    def __init__(self, shape: tuple[int, ...], dtype: Any) -> None:
        dtype = np.dtype(dtype)
        nbytes = max(int(np.prod(shape)) * dtype.itemsize, 4)
        self.ptr = int(check(_cu().cuMemHostAlloc(nbytes, 0), "cuMemHostAlloc"))
        raw = (ctypes.c_uint8 * nbytes).from_address(self.ptr)
        self.array = (
            np.frombuffer(raw, dtype=np.uint8)[: int(np.prod(shape)) * dtype.itemsize].view(dtype).reshape(shape)
        )

    def free(self) -> None:
        if self.ptr:
            check(_cu().cuMemFreeHost(self.ptr), "cuMemFreeHost")
            self.ptr = 0


class RowGather:
    """A step's site that is a copy, not a kernel: `rows` rows of `row_bytes` each, taken every `src_pitch` bytes
    from `src`, packed at `dst`. One cuMemcpy2DAsync, so it launches and is captured (one graph node) as a Kernel
    is, and the kernel after it simply waits for it (no PDL edge)."""

    __slots__ = ("name", "dst", "src", "row_bytes", "src_pitch", "rows", "pdl")

    def __init__(self, name: str, dst: int, src: int, row_bytes: int, src_pitch: int, rows: int) -> None:
        assert rows >= 1 and 0 < row_bytes <= src_pitch, (name, rows, row_bytes, src_pitch)
        self.name, self.dst, self.src, self.rows = name, int(dst), int(src), rows
        self.row_bytes, self.src_pitch, self.pdl = row_bytes, src_pitch, False

    def launch(self, stream: Any) -> None:
        cu = _cu()
        c = cu.CUDA_MEMCPY2D()
        c.srcMemoryType = c.dstMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
        c.srcDevice, c.srcPitch, c.dstDevice, c.dstPitch = self.src, self.src_pitch, self.dst, self.row_bytes
        c.WidthInBytes, c.Height = self.row_bytes, self.rows
        check(cu.cuMemcpy2DAsync(c, stream), f"cuMemcpy2DAsync({self.name})")


Site = Kernel | RowGather  # what a step's launch list holds


def copy_on_device(dst: int, src: int, nbytes: int, stream: Any) -> None:
    """Stream-ordered copy between two device addresses."""
    check(_cu().cuMemcpyDtoDAsync(dst, src, nbytes, stream), "cuMemcpyDtoDAsync")


def new_stream() -> Any:
    cu = _cu()
    return check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value), "cuStreamCreate")


def sync(stream: Any) -> None:
    check(_cu().cuStreamSynchronize(stream), "cuStreamSynchronize")


class Event:
    def __init__(self, timing: bool = True) -> None:
        cu = _cu()
        flags = cu.CUevent_flags.CU_EVENT_DEFAULT if timing else cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
        self.event = check(cu.cuEventCreate(flags.value), "cuEventCreate")

    def record(self, stream: Any) -> None:
        check(_cu().cuEventRecord(self.event, stream), "cuEventRecord")

    def synchronize(self) -> None:
        check(_cu().cuEventSynchronize(self.event), "cuEventSynchronize")

    def elapsed_ms(self, start: Event) -> float:
        return float(check(_cu().cuEventElapsedTime(start.event, self.event), "cuEventElapsedTime"))
