"""The demo's load driver against an in-process server, the `--no-tui` path end to end, and the model cache."""

from __future__ import annotations

import argparse
import json
import shutil

from qtui.model.gguf_file import GGUFModel
from qtui.serve.main import start_server
from qtui.tools import demo
from qtui.tools.load import climb, request_params


async def test_climb_completes_every_level_and_batches_form(tiny_gguf):
    async with start_server(tiny_gguf, engine="cpu", port=0, max_slots=8, max_context=256, window_ms=20.0) as srv:
        results = await climb(srv.url, levels=(1, 4, 8), rounds=2, max_tokens=12)
    assert [r.clients for r in results] == [1, 4, 8]
    for r in results:
        assert r.num_sent == r.num_done == 2 * r.clients and r.num_errors == 0, r
        assert r.completion_tokens > 0 and r.tok_s > 0 and r.ttft_p50_ms is not None
    assert results[0].max_m == 1  # one client alone is never batched
    assert results[1].max_m > 1 and results[2].max_m > 1  # concurrent clients are


def test_request_params_vary():
    params = [request_params(c, r, 32) for c in range(8) for r in range(3)]
    assert len({p["prompt"] for p in params}) > 4 and len({p["max_tokens"] for p in params}) > 4
    assert all(1 <= p["max_tokens"] <= 32 for p in params)


def demo_args(cache_dir, **kw) -> argparse.Namespace:
    base = dict(
        no_tui=True,
        duration=None,
        engine="cpu",
        quant="f32",
        levels="1,4",
        rounds=1,
        max_tokens=8,
        port=0,
        cache_dir=cache_dir,
        record=None,
    )
    return argparse.Namespace(**{**base, **kw})


def test_no_tui_demo_uses_the_cached_model_and_prints_a_summary(tiny_gguf, tmp_path, capsys):
    cached = tmp_path / "tiny-f32.gguf"
    shutil.copy(tiny_gguf, cached)
    before = cached.stat().st_mtime_ns
    assert demo.run(demo_args(tmp_path, record=tmp_path / "rec")) == 0
    out = capsys.readouterr().out
    assert "concurrency climb" in out and "tiny-f32.gguf" in out
    assert cached.stat().st_mtime_ns == before  # not rewritten
    (recording,) = (tmp_path / "rec").glob("session-*.jsonl")
    events = [json.loads(line) for line in recording.read_text().splitlines()]
    assert sum(e["ev"] == "done" for e in events) == 1 + 4  # the --record option reached the server


def test_model_is_written_once_when_absent(tmp_path):
    path = demo.ensure_tiny_model(tmp_path / "cache", "f32")
    assert path.exists() and GGUFModel.open(path).config.n_layer == 8
    mtime = path.stat().st_mtime_ns
    assert demo.ensure_tiny_model(tmp_path / "cache", "f32") == path and path.stat().st_mtime_ns == mtime
    assert not list((tmp_path / "cache").glob(".*partial"))


def test_no_tui_duration_bounds_the_run(tiny_gguf, tmp_path, capsys):
    import time

    shutil.copy(tiny_gguf, tmp_path / "tiny-f32.gguf")
    start = time.monotonic()
    assert demo.run(demo_args(tmp_path, duration=1.0, levels="1,2")) == 0
    assert time.monotonic() - start < 15  # two 0.5 s levels (+ the last requests, server start and stop)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│")]
    sent = [int(row.split("│")[2]) for row in rows]
    assert len(rows) == 2 and sent[0] >= 2  # the lone client kept sending until its 0.5 s were up
