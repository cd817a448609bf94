"""The CUDA engine's start-up memory check, as arithmetic on CPU: what weights + per-slot state pools + scratch
need, the typed error naming the shortfall, and that `load_engine` refuses before the engine allocates."""

from __future__ import annotations

import pytest

from qtui.engine import load
from qtui.engine.load import DEVICE_HEADROOM_BYTES, DeviceNeed, check_device_memory
from qtui.errors import EngineUnavailable, InsufficientDeviceMemory
from qtui.model import info
from qtui.model.gguf_file import GGUFModel


@pytest.fixture(scope="module")
def model(tiny_gguf):
    with GGUFModel.open(tiny_gguf) as m:
        yield m


def test_per_slot_state_is_the_pools_plus_the_sampler_counts(model) -> None:
    cfg = model.config
    need = DeviceNeed.of(cfg, info.weight_bytes(model), max_slots=3, max_context=100)
    pools = info.cache_bytes(model, 3, 100)
    assert 3 * need.per_slot == pools["kv_cache"] + pools["recurrent_state"] + 3 * 2 * cfg.n_vocab * 4
    assert need.total == need.weights + need.scratch + DEVICE_HEADROOM_BYTES + 3 * need.per_slot
    longer = DeviceNeed.of(cfg, need.weights, max_slots=3, max_context=200)
    assert longer.per_slot - need.per_slot == cfg.kv_floats_per_token() * 100 * 4  # KV grows with the context


def test_a_shortfall_is_a_typed_error_naming_it_and_a_slot_count_that_fits(model) -> None:
    cfg = model.config
    need = DeviceNeed.of(cfg, 10 << 30, max_slots=64, max_context=65536)
    check_device_memory(need, need.total)  # exactly enough: fine
    free = need.fixed + 20 * need.per_slot + need.per_slot // 2
    with pytest.raises(InsufficientDeviceMemory) as info_:
        check_device_memory(need, free)
    err = info_.value
    assert isinstance(err, EngineUnavailable) and err.code == "device_memory"
    assert (err.need, err.free) == (need.total, free)
    assert "64 slots x 65536 tokens" in err.message and "short by" in err.message and "--max-slots 20 " in err.message
    assert DeviceNeed.of(cfg, 10 << 30, 20, 65536).total <= free < DeviceNeed.of(cfg, 10 << 30, 21, 65536).total
    with pytest.raises(InsufficientDeviceMemory, match="the weights alone do not fit"):
        check_device_memory(need, 4 << 30)


class _NeverBuilt:
    def __init__(self, *args, **kwargs) -> None:
        raise AssertionError("the engine was built (and would have allocated) although it cannot fit")


class _Recorded:
    def __init__(self, model, max_slots: int, max_context: int) -> None:
        self.max_slots, self.max_context = max_slots, max_context


def _pretend_gpu(monkeypatch, free: int, engine_cls) -> None:
    import qtui.engine.cuda.engine as cuda_engine

    monkeypatch.setattr(load, "cuda_available", lambda: True)
    monkeypatch.setattr(load, "free_device_bytes", lambda: free)
    monkeypatch.setattr(cuda_engine, "CudaEngine", engine_cls)


def test_load_engine_refuses_before_allocating(model, monkeypatch) -> None:
    _pretend_gpu(monkeypatch, 2 << 30, _NeverBuilt)
    with pytest.raises(InsufficientDeviceMemory, match="not one slot fits at this context"):
        load.load_engine(model, "cuda", max_context=1 << 20)
    with pytest.raises(InsufficientDeviceMemory, match="--max-slots 3 would fit"):
        load.load_engine(model, "cuda", max_context=1 << 17)


def test_cuda_defaults_to_64_slots_cpu_to_16(model, monkeypatch) -> None:
    assert load.load_engine(model, "cpu", max_context=8).max_slots == 16
    _pretend_gpu(monkeypatch, 80 << 30, _Recorded)
    assert load.load_engine(model, "cuda", max_context=4096).max_slots == 64
    assert load.load_engine(model, "auto", max_slots=8, max_context=4096).max_slots == 8
