"""`load_engine`: auto falls back to the reference engine with one line on stderr; cuda without a driver is a
typed error. These run where no NVIDIA driver answers (CI, the dev box); on the GPU machine they skip."""

from __future__ import annotations

import sys

import pytest

from qtui.engine import load
from qtui.engine.load import FALLBACK_NOTICE, load_engine
from qtui.engine.reference import ReferenceEngine
from qtui.errors import EngineUnavailable
from qtui.model.gguf_file import GGUFModel

from conftest import cuda_driver_available

pytestmark = pytest.mark.skipif(cuda_driver_available(), reason="a CUDA driver answers here: auto picks CUDA")


@pytest.fixture(scope="module")
def model(tiny_gguf):
    with GGUFModel.open(tiny_gguf) as m:
        yield m


def test_auto_falls_back_to_cpu_with_one_line(model, capsys: pytest.CaptureFixture[str]) -> None:
    engine = load_engine(model, "auto", max_slots=2, max_context=16)
    captured = capsys.readouterr()
    assert isinstance(engine, ReferenceEngine)
    assert (engine.max_slots, engine.max_context) == (2, 16)
    assert captured.err.splitlines() == [FALLBACK_NOTICE]
    assert captured.out == ""


def test_cpu_is_silent(model, capsys: pytest.CaptureFixture[str]) -> None:
    assert isinstance(load_engine(model, "cpu", max_slots=1, max_context=8), ReferenceEngine)
    assert capsys.readouterr().err == ""


def test_cuda_without_driver_raises(model) -> None:
    with pytest.raises(EngineUnavailable, match="no NVIDIA driver found"):
        load_engine(model, "cuda")


def test_missing_cuda_modules_count_as_unavailable(model, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "qtui.engine.cuda.driver", None)  # import now raises ImportError
    assert load.cuda_available() is False
    with pytest.raises(EngineUnavailable):
        load_engine(model, "cuda")


def test_unknown_kind_is_rejected(model) -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        load_engine(model, "tpu")
