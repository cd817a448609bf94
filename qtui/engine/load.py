"""`load_engine`: pick the engine for a model — the CUDA engine where a driver answers, else the numpy one.

Before the CUDA engine allocates anything, `check_device_memory` compares what it will need (weights, the
per-slot state pools for `max_slots` x `max_context`, scratch) with the device's free memory and fails with a
typed error naming the shortfall: a clear message at start instead of a CUDA_ERROR_OUT_OF_MEMORY half-way
through the upload.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qtui.errors import EngineUnavailable, InsufficientDeviceMemory

if TYPE_CHECKING:
    from qtui.engine.base import BatchEngine
    from qtui.model.config import Qwen35Config
    from qtui.model.gguf_file import GGUFModel

ENGINE_KINDS = ("auto", "cpu", "cuda")
FALLBACK_NOTICE = "qtui: no CUDA driver found; using the numpy reference engine (cpu)"
# cuda: issue 11's 64 (~20 GB of state for the 4b at 4096 tokens); the engine steps up to 128 rows (engine.MAX_ROWS)
# for those who raise --max-slots
DEFAULT_MAX_SLOTS = {"cuda": 64, "cpu": 16}
DEVICE_HEADROOM_BYTES = 1 << 30  # context, PTX modules, graphs, the upload's staging buffer, allocator slack
GiB = float(1 << 30)


def cuda_available() -> bool:
    """True where the CUDA engine's modules import and a driver answers cuInit. Never raises."""
    try:
        from qtui.engine.cuda.driver import cuda_available as driver_available
    except ImportError:
        return False
    try:
        return bool(driver_available())
    except Exception:  # the contract says it never raises; a broken install still must not take us down
        return False


def resolve_kind(kind: str) -> str:
    """What `load_engine(kind)` will build: "cpu" or "cuda" ("auto": CUDA where a driver answers)."""
    if kind not in ENGINE_KINDS:
        raise ValueError(f"unknown engine {kind!r}; expected one of {', '.join(ENGINE_KINDS)}")
    return "cuda" if kind == "cuda" or (kind == "auto" and cuda_available()) else "cpu"


def load_engine(model: GGUFModel, kind: str = "auto", max_slots: int | None = None,
                max_context: int = 4096) -> BatchEngine:  # fmt: skip
    """Build the engine `kind` ("auto" | "cpu" | "cuda") over `model`; `max_slots` None: DEFAULT_MAX_SLOTS.

    "auto" uses CUDA when `cuda_available()`, else prints one line to stderr and uses the reference engine.
    "cuda" without a driver raises `EngineUnavailable`; a GPU too small raises `InsufficientDeviceMemory`.
    """
    resolved = resolve_kind(kind)
    slots = max_slots or DEFAULT_MAX_SLOTS[resolved]
    if kind == "cuda" and not cuda_available():
        raise EngineUnavailable("--engine cuda: no NVIDIA driver found (cuInit failed)")
    if resolved == "cuda":
        from qtui.engine.cuda.engine import CudaEngine
        from qtui.model.info import weight_bytes

        need = DeviceNeed.of(model.config, weight_bytes(model), slots, max_context)
        check_device_memory(need, free_device_bytes())
        return CudaEngine(model, max_slots=slots, max_context=max_context)
    if kind == "auto":
        print(FALLBACK_NOTICE, file=sys.stderr)
    from qtui.engine.reference import ReferenceEngine

    return ReferenceEngine(model, max_slots=slots, max_context=max_context)


@dataclass(frozen=True, slots=True)
class DeviceNeed:
    """Device bytes the CUDA engine allocates for a model at `max_slots` x `max_context` (float32 state)."""

    max_slots: int
    max_context: int
    weights: int  # the forward pass's tensors, as stored in the file (the tiled repack adds < 1%)
    per_slot: int  # KV cache + conv/delta-rule state + the sampler's two int32 [n_vocab] token counts
    scratch: int  # activations for one prefill chunk of rows, logits for one decode step

    @classmethod
    def of(cls, cfg: Qwen35Config, weights: int, max_slots: int, max_context: int) -> DeviceNeed:
        from qtui.engine.cuda.engine import MAX_ROWS, PREFILL_CHUNK
        from qtui.engine.cuda.kernels import ATTN_PIECE

        state = (cfg.kv_floats_per_token() * max_context + cfg.recurrent_floats() + 2 * cfg.n_vocab) * 4
        rows, head_rows = max(min(max_slots, MAX_ROWS), PREFILL_CHUNK), min(max_slots, MAX_ROWS)
        n_pieces = -(-max_context // ATTN_PIECE)
        # an upper estimate of engine/cuda/step.py's Activations: every per-row buffer of one step, twice over
        # for the split-format GEMV inputs, plus the attention partials (one per piece of the context)
        per_row = 2 * (2 * cfg.n_embd + 2 * cfg.conv_dim + 2 * cfg.value_dim + 2 * cfg.n_ff
                       + 4 * cfg.n_head * cfg.head_dim) + cfg.n_head * n_pieces * (cfg.head_dim + 2)  # fmt: skip
        scratch = 4 * (rows * per_row + head_rows * cfg.n_vocab)
        return cls(max_slots, max_context, weights, state, scratch)

    @property
    def fixed(self) -> int:
        return self.weights + self.scratch + DEVICE_HEADROOM_BYTES

    @property
    def total(self) -> int:
        return self.fixed + self.max_slots * self.per_slot

    def max_fitting_slots(self, free: int) -> int:
        return max(0, (free - self.fixed) // self.per_slot)


def check_device_memory(need: DeviceNeed, free: int) -> None:
    """Raise `InsufficientDeviceMemory` naming each part and the shortfall when `need` does not fit in `free`."""
    if need.total <= free:
        return
    fits = need.max_fitting_slots(free)
    if fits >= 1:
        hint = f"--max-slots {fits} would fit at this context, or lower --max-context"
    elif need.weights + DEVICE_HEADROOM_BYTES > free:
        hint = "the weights alone do not fit: use a smaller or more quantized model"
    else:
        hint = "not one slot fits at this context: lower --max-context"
    raise InsufficientDeviceMemory(
        f"the GPU has {free / GiB:.2f} GiB free but the engine needs {need.total / GiB:.2f} GiB: weights "
        f"{need.weights / GiB:.2f} + state pools for {need.max_slots} slots x {need.max_context} tokens "
        f"{need.max_slots * need.per_slot / GiB:.2f} + scratch {need.scratch / GiB:.2f} + headroom "
        f"{DEVICE_HEADROOM_BYTES / GiB:.2f} GiB; short by {(need.total - free) / GiB:.2f} GiB ({hint})",
        need=need.total, free=free)  # fmt: skip


def free_device_bytes() -> int:
    """Free memory on the engine's device (cuMemGetInfo; creates the primary context if needed)."""
    from cuda.bindings import driver as cu

    from qtui.engine.cuda import driver as drv

    drv.primary_context()
    free, _total = drv.check(cu.cuMemGetInfo(), "cuMemGetInfo")
    return int(free)
