"""`load_engine`: pick the engine for a model — the CUDA engine where a driver answers, else the numpy one."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from qtui.errors import EngineUnavailable

if TYPE_CHECKING:
    from qtui.engine.base import BatchEngine
    from qtui.model.gguf_file import GGUFModel

ENGINE_KINDS = ("auto", "cpu", "cuda")
FALLBACK_NOTICE = "qtui: no CUDA driver found; using the numpy reference engine (cpu)"


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


def load_engine(
    model: GGUFModel, kind: str = "auto", max_slots: int = 16, max_context: int = 4096
) -> BatchEngine:
    """Build the engine `kind` ("auto" | "cpu" | "cuda") over `model`.

    "auto" uses CUDA when `cuda_available()`, else prints one line to stderr and uses the reference engine.
    "cuda" without a driver raises `EngineUnavailable`.
    """
    if kind not in ENGINE_KINDS:
        raise ValueError(f"unknown engine {kind!r}; expected one of {', '.join(ENGINE_KINDS)}")
    use_cuda = kind != "cpu" and cuda_available()
    if kind == "cuda" and not use_cuda:
        raise EngineUnavailable("--engine cuda: no NVIDIA driver found (cuInit failed)")
    if use_cuda:
        from qtui.engine.cuda.engine import CudaEngine

        return CudaEngine(model, max_slots=max_slots, max_context=max_context)
    if kind == "auto":
        print(FALLBACK_NOTICE, file=sys.stderr)
    from qtui.engine.reference import ReferenceEngine

    return ReferenceEngine(model, max_slots=max_slots, max_context=max_context)
