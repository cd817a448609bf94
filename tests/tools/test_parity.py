"""`qtui parity` against a real `qtui serve` subprocess on the tiny model, and its failure detection."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from qtui.cli import main
from qtui.model.gguf_file import GGUFModel


def spawn_serve(model, *args: str) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "qtui", "serve", str(model), "--engine", "cpu", "--port", "0", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"qtui serve exited early with {proc.wait()}")
        if line.startswith("qtui serve: ws://"):
            return proc, line.split()[2]
    proc.kill()
    raise RuntimeError("qtui serve printed no URL")


def test_parity_ladder_passes_and_writes_witness(tiny_gguf, tmp_path, capsys):
    # a wide window so a burst forms one batch even on a loaded 2-core CI machine
    proc, url = spawn_serve(tiny_gguf, "--window-ms", "150", "--max-context", "512")
    try:
        out = tmp_path / "witness.json"
        code = main(["parity", "--url", url, "--ladder", "1,4,8,16", "--prompts", "6", "--max-tokens", "6",
                     "--out", str(out), "--seed", "3"])  # fmt: skip
        printed = capsys.readouterr().out
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert code == 0, printed
    witness = json.loads(out.read_text())
    with GGUFModel.open(tiny_gguf) as model:
        assert witness["sha256"] == model.sha256()
    assert witness["passed"] and witness["engine"] == "cpu" and witness["settings"]["ladder"] == [1, 4, 8, 16]
    assert [r["c"] for r in witness["rungs"]] == [1, 4, 8, 16]
    for rung in witness["rungs"]:
        assert rung["m_formed"] == [rung["c"]] * rung["c"] and rung["equal"] == rung["c"] and rung["diverged"] == []
        assert rung["agg_tok_s"] > 0
        if rung["c"] > 6:
            assert len(set(rung["prompts"])) == 6  # more requests than prompts: identical ones repeat
    assert len(witness["solo"]) == 6 and {s["kind"] for s in witness["solo"]} == {"text", "tokens"}
    assert "PASSED" in printed and "16/16" in printed


async def test_parity_detects_divergence_and_m_mismatch():
    """A server whose batched rows differ from solo rows, and one too small to form the batch, both fail."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1]))
    from qtui.tools.parity import format_table, run_ladder

    from serve.fake_engine import EOS
    from serve.helpers import fake_server

    # the fake tokenizer makes a token per character: a prefill budget above the 4 prompts' ~600 tokens puts
    # them all in the first step, so the first decode is at m=4 and every reply diverges at index 1
    async with fake_server(max_slots=4, max_context=512, window_ms=100, max_prefill_tokens=2048) as srv:
        real_decode = srv.engine.decode
        srv.engine.decode = lambda slots, toks: [
            (t + 1) % srv.engine.n_vocab if len(slots) > 2 and t != EOS else t for t in real_decode(slots, toks)
        ]
        witness = await run_ladder(srv.url, [1, 2, 4], n_prompts=4, max_tokens=5)
    assert not witness["passed"]
    by_c = {r["c"]: r for r in witness["rungs"]}
    assert by_c[1]["passed"] and by_c[2]["passed"]
    assert not by_c[4]["passed"] and all(d["index"] == 1 for d in by_c[4]["diverged"])
    assert "FAILED" in format_table(witness)
    async with fake_server(max_slots=2, max_context=512, window_ms=100) as srv:
        witness = await run_ladder(srv.url, [4], n_prompts=4, max_tokens=5)
    assert not witness["passed"] and not witness["rungs"][0]["m_ok"]


async def test_sampled_ladder_passes_and_replay_against_re_runs_seeded_requests(tmp_path):
    """`qtui parity --sampled` and `qtui replay --against` with seeded sampled requests (fake engine, whose
    sampled token hashes the seed with the slot's own history)."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1]))
    from qtui.tools import replay
    from qtui.tools.client import Client
    from qtui.tools.parity import format_table, run_ladder

    from serve.helpers import fake_server

    async with fake_server(max_slots=8, max_context=512, window_ms=100, record=tmp_path) as srv:
        sampled = await run_ladder(srv.url, [1, 4, 8], n_prompts=4, max_tokens=6, sampled=True)
        greedy = await run_ladder(srv.url, [1], n_prompts=4, max_tokens=6)
        async with await Client.connect(srv.url) as client:
            await client.generate(tokens=[3, 4], max_tokens=5, temperature=0.9, top_k=5)  # the server draws a seed
    assert sampled["passed"] and sampled["settings"]["sampling"]["temperature"] == 0.8, format_table(sampled)
    assert "sampled" in format_table(sampled)
    assert [r["prompt_tokens"] for r in sampled["solo"]] == [r["prompt_tokens"] for r in greedy["solo"]]
    (path,) = tmp_path.glob("session-*.jsonl")
    async with fake_server(max_slots=8, max_context=512) as again:
        requests = await replay.replay_against(str(path), again.url, speed=50)
    verdicts = [replay.compare(r)[0] for r in requests]
    assert verdicts and set(verdicts) == {"same"}
    assert any("seed" in r.params for r in requests)
