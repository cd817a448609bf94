"""Shared fixtures. Synthetic models are written once per test session (same seed, same bytes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Textual snapshots change with these set (reference/python_stack.md §5): keep the suite independent of them.
os.environ.pop("NO_COLOR", None)
os.environ.pop("TEXTUAL_THEME", None)


def cuda_driver_available() -> bool:
    """True where an NVIDIA driver answers cuInit. On CPU machines cuInit raises (no libcuda)."""
    try:
        from cuda.bindings import driver as cu

        (err,) = cu.cuInit(0)
        return err == cu.CUresult.CUDA_SUCCESS
    except Exception:
        return False


def pytest_configure(config: pytest.Config) -> None:
    """QTUI_HOSTSIM_DRIVER=1: the CUDA driver is the host simulator's (tests/engine/cuda/hostsim/fake_driver.py) for
    the whole session, so GPU tests run on the CPU: `QTUI_HOSTSIM_DRIVER=1 pytest -m gpu -k ...` (slowly: the
    GPU's sizes; pick tests with -k)."""
    if os.environ.get("QTUI_HOSTSIM_DRIVER") == "1":
        from engine.cuda.hostsim import fake_driver

        installed = fake_driver.installed()
        installed.__enter__()
        config.stash[_HOSTSIM] = installed


def pytest_unconfigure(config: pytest.Config) -> None:
    installed = config.stash.get(_HOSTSIM, None)
    if installed is not None:
        installed.__exit__(None, None, None)


_HOSTSIM = pytest.StashKey[object]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any("gpu" in item.keywords for item in items) and not cuda_driver_available():
        skip = pytest.mark.skip(reason="no NVIDIA driver here (cuInit failed): GPU tests run on the GPU machine")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


_MODEL_CACHE: dict[tuple[str, str, int], Path] = {}


@pytest.fixture(scope="session")
def make_model(tmp_path_factory: pytest.TempPathFactory):
    """make_model(preset, quant="f32", seed=0, **write_model kwargs) -> Path of a synthetic GGUF, written once per
    session; preset is a PRESETS name or a Preset."""
    from qtui.model.synthetic import write_model

    def _make(preset, quant: str = "f32", seed: int = 0, **kwargs) -> Path:
        key = (preset, quant, seed) + tuple(sorted(kwargs.items()))
        if key not in _MODEL_CACHE:
            label = preset if isinstance(preset, str) else "custom"  # a Preset object: a test's own shape
            out = tmp_path_factory.mktemp("models") / f"{label}-{quant}-s{seed}.gguf"
            write_model(out, preset=preset, quant=quant, seed=seed, progress=False, **kwargs)
            _MODEL_CACHE[key] = out
        return _MODEL_CACHE[key]

    return _make


@pytest.fixture(scope="session")
def tiny_gguf(make_model) -> Path:
    """The tiny preset with H_v == H_k, float32 weights."""
    return make_model("tiny", "f32")


@pytest.fixture(scope="session")
def tiny_tiled_gguf(make_model) -> Path:
    """The tiny preset with H_v == 2*H_k (tiled value heads), float32 weights."""
    return make_model("tiny-tiled", "f32")
