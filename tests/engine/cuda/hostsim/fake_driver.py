"""`cuda.bindings.driver` as far as qtui uses it, over the host simulator: device memory is host memory, a launch
runs the kernel's C++ (hostsim.library()) at once, a stream is in-order and synchronous, stream capture records
the launches and copies and a graph replays them. With it installed (`installed()`), CudaEngine runs unchanged on
a machine without a GPU: the engine-level tests (batch == solo, graph == eager, prefill chunks) on the CPU.

Every call returns the driver's tuple (CUresult, *outs)."""

from __future__ import annotations

import contextlib
import ctypes
import sys
import time
from collections.abc import Iterator
from enum import Enum
from types import SimpleNamespace
from typing import Any

import numpy as np

from . import library
from .device import SimBuffer, SimError, host_view


class CUresult(Enum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_LAUNCH_FAILED = 719


S = CUresult.CUDA_SUCCESS


class _Names:
    """An enum namespace whose members are their own names (their values only need to be distinct)."""

    def __init__(self, *names: str) -> None:
        for n in names:
            setattr(self, n, SimpleNamespace(name=n, value=n))


CUjit_option = _Names("CU_JIT_ERROR_LOG_BUFFER", "CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES")
CUfunction_attribute = _Names(
    "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED"
)
CUlaunchAttributeID = _Names(
    "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION", "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION"
)
CUstream_flags = _Names("CU_STREAM_NON_BLOCKING")
CUstreamCaptureMode = _Names("CU_STREAM_CAPTURE_MODE_THREAD_LOCAL")
CUevent_flags = _Names("CU_EVENT_DEFAULT", "CU_EVENT_DISABLE_TIMING")
CUmemorytype = _Names("CU_MEMORYTYPE_DEVICE")
# an H200's, where a launch plan asks (kernels.py sizes its grids by the SM count)
_ATTRIBUTES = {"CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT": 132}
CUdevice_attribute = _Names(*_ATTRIBUTES)
MEMORY_BYTES = 16 << 30  # what cuMemGetInfo reports free: room for the test models' pools


class CUlaunchConfig:
    def __init__(self) -> None:
        self.gridDimX = self.gridDimY = self.gridDimZ = 1
        self.blockDimX = self.blockDimY = self.blockDimZ = 1
        self.sharedMemBytes = 0
        self.hStream: Any = None
        self.attrs: list[Any] = []
        self.numAttrs = 0


class CUlaunchAttribute:
    def __init__(self) -> None:
        self.id: Any = None
        self.value = SimpleNamespace(
            programmaticStreamSerializationAllowed=0, clusterDim=SimpleNamespace(x=1, y=1, z=1)
        )


class CUDA_MEMCPY2D:
    def __init__(self) -> None:
        self.srcMemoryType = self.dstMemoryType = None
        self.srcDevice = self.dstDevice = self.srcPitch = self.dstPitch = self.WidthInBytes = self.Height = 0


class Stream:
    def __init__(self) -> None:
        self.capture: list[Any] | None = None  # the ops recorded while capturing


_buffers: dict[int, SimBuffer] = {}  # address -> the host array behind a device (or pinned) allocation


def _alloc(nbytes: int) -> int:
    buf = SimBuffer(nbytes)
    _buffers[int(buf)] = buf
    return int(buf)


_queued: list[Any] | None = None  # deferred(): the stream work not yet run (it runs at the next synchronize)


def _do(stream: Any, op: Any) -> tuple[CUresult]:
    """Run `op` now, or record it if the stream is capturing, or queue it inside `deferred()`."""
    if isinstance(stream, Stream) and stream.capture is not None:
        stream.capture.append(op)
    elif _queued is not None:
        _queued.append(op)
    else:
        op()
    return (S,)


def _run_queued() -> None:
    while _queued:
        _queued.pop(0)()


def _do_eager_launch(stream: Any, op: Any) -> tuple[CUresult]:
    """A kernel launch: inside `deferred()` it runs at once, after the queued work, since its parameters live in
    host memory the caller may free on return (the driver copies them at the launch; a captured launch's stay with
    its graph)."""
    if _queued is not None and not (isinstance(stream, Stream) and stream.capture is not None):
        _run_queued()
        op()
        return (S,)
    return _do(stream, op)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Stream work (copies, launches, graph replays) runs only when the host synchronizes (a stream or an event),
    as on a GPU the host runs ahead of: a host buffer rewritten before the copy that reads it shows up."""
    global _queued
    _queued = []
    try:
        yield
    finally:
        _run_queued()
        _queued = None


def _launch(name: str, grid: tuple[int, int, int], block: int, shmem: int, cluster: int, params: int) -> None:
    rc = library().qtui_sim_launch(name.encode(), *grid, block, shmem, cluster, params)
    if rc != 0:
        raise SimError(library().qtui_sim_error().decode())


# ---- device and context ----
def cuInit(flags: int) -> tuple[CUresult]:
    return (S,)


def cuDeviceGetCount() -> tuple[CUresult, int]:
    return (S, 1)


def cuDeviceGet(i: int) -> tuple[CUresult, int]:
    return (S, i)


def cuDevicePrimaryCtxRetain(dev: int) -> tuple[CUresult, str]:
    return (S, "host simulator context")


def cuCtxSetCurrent(ctx: Any) -> tuple[CUresult]:
    return (S,)


def cuDeviceGetName(n: int, dev: int) -> tuple[CUresult, bytes]:
    return (S, b"qtui host simulator (CPU)")


def cuDeviceGetAttribute(attr: Any, dev: int) -> tuple[CUresult, int]:
    return (S, _ATTRIBUTES[attr.name])


def cuMemGetInfo() -> tuple[CUresult, int, int]:
    return (S, MEMORY_BYTES, MEMORY_BYTES)


# ---- modules and launches: a function is its name ----
def cuModuleLoadDataEx(image: bytes, n: int, opts: Any, vals: Any) -> tuple[CUresult, str]:
    return (S, "module")


def cuModuleGetFunction(module: Any, name: bytes) -> tuple[CUresult, str]:
    return (S, name.decode())


# Dynamic shared memory a function was allowed (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES). Stricter than the
# driver, which lets 48 KB less the kernel's static shared memory through undeclared: the simulator does not know the
# static part, so a launch with more dynamic bytes than declared fails as an undeclared one over the limit does.
_dynamic_smem: dict[str, int] = {}


def cuFuncSetAttribute(fn: Any, attr: Any, value: int) -> tuple[CUresult]:
    if attr is CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        _dynamic_smem[fn] = int(value)
    return (S,)


def cuLaunchKernelEx(cfg: CUlaunchConfig, fn: str, params: int, extra: int) -> tuple[CUresult]:
    if cfg.sharedMemBytes > _dynamic_smem.get(fn, 0):
        return (CUresult.CUDA_ERROR_INVALID_VALUE,)
    cluster = 1
    for a in cfg.attrs[: cfg.numAttrs]:
        if a.id is CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
            cluster = a.value.clusterDim.x
    grid = (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ)
    return _do_eager_launch(cfg.hStream, lambda: _launch(fn, grid, cfg.blockDimX, cfg.sharedMemBytes, cluster, params))


def cuLaunchKernel(fn: str, gx, gy, gz, bx, by, bz, shmem, stream, params, extra) -> tuple[CUresult]:
    if shmem > _dynamic_smem.get(fn, 0):
        return (CUresult.CUDA_ERROR_INVALID_VALUE,)
    return _do_eager_launch(stream, lambda: _launch(fn, (gx, gy, gz), bx, shmem, 1, params))


# ---- memory ----
def cuMemAlloc(nbytes: int) -> tuple[CUresult, int]:
    return (S, _alloc(nbytes))


def cuMemFree(ptr: int) -> tuple[CUresult]:
    _buffers.pop(int(ptr), None)
    return (S,)


cuMemHostAlloc = lambda nbytes, flags: (S, _alloc(nbytes))  # noqa: E731
cuMemFreeHost = cuMemFree


def _copy(dst: int, src: int, n: int) -> None:
    ctypes.memmove(int(dst), int(src), int(n))


def cuMemcpyHtoDAsync(dst: int, src: int, n: int, stream: Any) -> tuple[CUresult]:
    return _do(stream, lambda: _copy(dst, src, n))


cuMemcpyDtoHAsync = cuMemcpyHtoDAsync
cuMemcpyDtoDAsync = cuMemcpyHtoDAsync


def cuMemcpy2DAsync(c: CUDA_MEMCPY2D, stream: Any) -> tuple[CUresult]:
    """Device to device only (what qtui asks); the parameters are read now, as the driver copies them."""
    if c.srcMemoryType is not CUmemorytype.CU_MEMORYTYPE_DEVICE or c.dstMemoryType is not c.srcMemoryType:
        return (CUresult.CUDA_ERROR_INVALID_VALUE,)
    if c.WidthInBytes > min(c.srcPitch, c.dstPitch) and c.Height > 1:
        return (CUresult.CUDA_ERROR_INVALID_VALUE,)
    src, dst, sp, dp, w, h = (
        int(v) for v in (c.srcDevice, c.dstDevice, c.srcPitch, c.dstPitch, c.WidthInBytes, c.Height)
    )

    def copy_rows() -> None:
        for r in range(h):
            _copy(dst + r * dp, src + r * sp, w)

    return _do(stream, copy_rows)


def cuMemsetD32Async(ptr: int, value: int, count: int, stream: Any) -> tuple[CUresult]:
    def fill() -> None:
        host_view(int(ptr), np.uint32, (int(count),))[:] = value

    return _do(stream, fill)


def cuMemsetD32(ptr: int, value: int, count: int) -> tuple[CUresult]:
    return cuMemsetD32Async(ptr, value, count, None)


# ---- streams, graphs, events ----
def cuStreamCreate(flags: Any) -> tuple[CUresult, Stream]:
    return (S, Stream())


def cuStreamSynchronize(stream: Any) -> tuple[CUresult]:
    _run_queued()
    return (S,)


def cuStreamBeginCapture(stream: Stream, mode: Any) -> tuple[CUresult]:
    stream.capture = []
    return (S,)


def cuStreamEndCapture(stream: Stream) -> tuple[CUresult, list[Any]]:
    ops, stream.capture = stream.capture or [], None
    return (S, ops)


def cuGraphInstantiate(graph: list[Any], flags: int) -> tuple[CUresult, list[Any]]:
    return (S, graph)


def cuGraphUpload(gexec: Any, stream: Any) -> tuple[CUresult]:
    return (S,)


def cuGraphLaunch(gexec: list[Any], stream: Any) -> tuple[CUresult]:
    for op in gexec:
        _do(stream, op)
    return (S,)


def cuGraphExecDestroy(gexec: Any) -> tuple[CUresult]:
    return (S,)


cuGraphDestroy = cuGraphExecDestroy


def cuEventCreate(flags: Any) -> tuple[CUresult, list[float]]:
    return (S, [0.0])


def cuEventRecord(event: list[float], stream: Any) -> tuple[CUresult]:
    def stamp() -> None:
        event[0] = time.perf_counter()

    return _do(stream, stamp)


def cuEventSynchronize(event: Any) -> tuple[CUresult]:
    _run_queued()  # (all queued work: at least what came before the event)
    return (S,)


def cuEventElapsedTime(start: list[float], end: list[float]) -> tuple[CUresult, float]:
    return (S, (end[0] - start[0]) * 1e3)


@contextlib.contextmanager
def installed() -> Iterator[Any]:
    """cuda.bindings.driver replaced by this module while the block runs (the engine's driver calls included)."""
    import cuda.bindings  # the real package: its `driver` attribute is what `from cuda.bindings import driver` gets

    from qtui.engine.cuda import driver as drv

    me = sys.modules[__name__]
    saved_module, saved_attr = sys.modules.get("cuda.bindings.driver"), getattr(cuda.bindings, "driver", None)
    saved_primary = dict(drv._primary)
    sys.modules["cuda.bindings.driver"] = me
    cuda.bindings.driver = me  # type: ignore[attr-defined]
    drv._primary.clear()
    drv._state.ctx = None
    try:
        yield me
    finally:
        if saved_module is not None:
            sys.modules["cuda.bindings.driver"] = saved_module
        cuda.bindings.driver = saved_attr  # type: ignore[attr-defined]
        drv._primary.clear()
        drv._primary.update(saved_primary)
        drv._state.ctx = None
