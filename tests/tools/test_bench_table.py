"""`qtui bench`'s table: each ladder rung against its memory floor (qtui.model.info.step_bytes at the measured
read bandwidth), '-' where there is no floor (the CPU engine measures no bandwidth)."""

from __future__ import annotations

from qtui.tools import bench

_RUNG = {"per_request_tok_s": 100.0, "host_us_per_step": 50.0}
_RESULT = {
    "model": "/tmp/4b.gguf",
    "engine": {"device": "NVIDIA H200"},
    "read_bandwidth_B_s": 4.5e12,
    "copy_bandwidth_B_s": 4.2e12,
    "weight_bytes_per_token": 2.7e9,
    "floor_tok_s": 1666.0,
    "decode_tok_s": 800.0,
    "pct_of_floor": 48.0,
    "ladder": [
        {**_RUNG, "c": 1, "aggregate_tok_s": 800.0, "step_ms": 1.25, "floor_step_ms": 0.6, "pct_of_floor": 48.0},
        {**_RUNG, "c": 64, "aggregate_tok_s": 6400.0, "step_ms": 10.0, "floor_step_ms": 1.3, "pct_of_floor": 13.0},
        {**_RUNG, "c": 4, "aggregate_tok_s": 3000.0, "step_ms": 1.3, "pct_of_floor": float("nan")},
    ],
    "prefill": {"prompt_tokens": 512, "ttft_ms": 41.0, "prefill_tok_s": 12400.0},
}


def test_each_rung_shows_its_share_of_the_memory_floor():
    lines = bench.format_table(_RESULT).splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["c"])
    assert lines[head].split()[-2:] == ["%", "floor"]
    cells = {int(ln.split()[0]): ln.split()[-1] for ln in lines[head + 1 : head + 4]}
    assert cells == {1: "48.0%", 64: "13.0%", 4: "-"}


def test_a_ladder_rung_queued_ahead_runs_and_reads_each_step_once():
    """Against an engine that queues steps ahead, the rung submits `steps` timed steps after its warm-up, reads every
    one (none left in flight), and the slots decode what the synchronous rung decodes."""
    from types import SimpleNamespace

    import numpy as np

    from serve.fake_engine import FakeEngine

    for sampled in (False, True):
        tokens = {}
        for ahead in (False, True):
            eng = FakeEngine(max_slots=4, max_context=64, ahead=ahead)
            eng.config = SimpleNamespace(n_vocab=eng.n_vocab)
            outs, real = [], eng._decode  # every step's tokens, whichever path ran it
            eng._decode = lambda *a, real=real, outs=outs: outs.append(real(*a)) or outs[-1]
            row = bench.ladder_rung(eng, 3, 6, np.random.default_rng(1), sampled=sampled)
            assert row["queued_ahead"] == ahead and row["c"] == 3
            assert [len(c) for c in eng.decode_calls] == [3] * (bench.LADDER_WARMUP + 6)
            assert eng.uncollected == 0 and eng.num_free_slots() == 4
            tokens[ahead] = outs
        assert tokens[True] == tokens[False] and len(set(map(tuple, tokens[True]))) > 1


def test_the_burst_row_times_one_call_each_and_one_batch_and_frees_its_slots():
    """The burst rung feeds its prompts both ways (once untimed, once timed each), frees every slot, and leaves the
    batch figure out for an engine without prefill_batch; the table prints the ratio."""
    from types import SimpleNamespace

    import numpy as np

    from serve.fake_engine import BatchPrefillFakeEngine, FakeEngine

    for cls in (BatchPrefillFakeEngine, FakeEngine):
        engine = cls(max_slots=8, max_context=64)
        engine.config = SimpleNamespace(n_vocab=engine.n_vocab)
        row = bench.burst_rung(engine, 6, np.random.default_rng(), shortest=2, longest=5)
        assert engine.num_free_slots() == 8 and row["prompts"] == 6 and 12 <= row["prompt_tokens"] <= 30
        assert len(engine.prefill_calls) == 12 and row["one_call_each_ms"] >= 0
        if cls is BatchPrefillFakeEngine:
            assert [len(call) for call in engine.batch_calls] == [6, 6] and row["prefill_batch_ms"] >= 0
        else:
            assert "prefill_batch_ms" not in row
    burst = {"prompts": 64, "shortest": 8, "longest": 40, "prompt_tokens": 1500}
    result = {**_RESULT, "burst": {**burst, "one_call_each_ms": 250.0, "prefill_batch_ms": 100.0}}
    assert "one prefill call each 250.0 ms, prefill_batch 100.0 ms = 2.50x" in bench.format_table(result)


def test_a_failed_burst_row_is_named_in_the_table():
    assert "burst row failed: CudaError: boom" in bench.format_table({**_RESULT, "burst": {"error": "CudaError: boom"}})
