"""The recorder (JSON Lines per docs/protocol.md), the stats feed and --verify-parity over a live server."""

from __future__ import annotations

import asyncio
import json

from qtui.serve.records import StatsLine
from qtui.tools.client import Client

from .fake_engine import EOS, solo_reply
from .helpers import aget, fake_server, parse_prometheus


async def test_recording_has_every_request_and_step(tmp_path):
    async with fake_server(max_slots=2, record=tmp_path, step_delay_s=0.004) as srv:
        path = srv.recorder.path
        async with await Client.connect(srv.url) as client:
            futures = await client.submit_many(
                [dict(id=f"r{i}", tokens=[3, 4 + i], max_tokens=5 + i, ignore_eos=True) for i in range(5)]
                + [dict(id="long", tokens=[3] * 64)]
            )
            (cx,) = await client.submit_many([dict(id="cx", tokens=[9], max_tokens=60, ignore_eos=True)])
            replies = await asyncio.gather(*futures)
            await asyncio.sleep(0.02)  # cx has a slot and is streaming
            await client.cancel("cx")
            assert (await cx).done["finish_reason"] == "cancelled"
            await asyncio.sleep(0.3)  # at least one stats frame
        decode_calls = list(srv.engine.decode_calls)
    lines = path.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    header, events = records[0], records[1:]
    assert header["ev"] == "header" and header["format"] == "qtui-recording" and header["version"] == 1
    for key in ("model", "sha256", "config", "engine", "device", "commit", "settings", "created"):
        assert key in header
    assert header["settings"]["max_batch"] == 2 and header["engine"] == "fake"
    assert all(isinstance(e["t"], float) and e["t"] >= 0 for e in events)
    for kind_is_stats in (True, False):  # each kind is in time order (see docs/protocol.md on stats lines)
        times = [e["t"] for e in events if (e["ev"] == "stats") == kind_is_stats]
        assert times == sorted(times)
    by_kind: dict[str, list] = {}
    for e in events:
        by_kind.setdefault(e["ev"], []).append(e)
    arrivals = {e["id"] for e in by_kind["arrival"]}
    assert len(arrivals) == 7
    ended = {e["id"] for e in by_kind["done"]} | {e["id"] for e in by_kind["error"]}
    assert ended == arrivals  # every request has its end
    assert {e["id"] for e in by_kind["error"]} == {"c1:long"} and by_kind["error"][0]["code"] == "prompt_too_long"
    assert [e["id"] for e in by_kind["cancel"]] == ["c1:cx"]
    # every engine decode call is one step line, in order, with its slots
    assert [e["slots"] for e in by_kind["step"]] == decode_calls
    assert all(e["m"] == len(e["slots"]) == len(e["tokens"]) for e in by_kind["step"])
    done = {e["id"]: e for e in by_kind["done"]}
    for i in range(5):
        assert done[f"c1:r{i}"]["tokens"] == replies[i].tokens == solo_reply([3, 4 + i], 5 + i, eos=None)
        arrival = next(e for e in by_kind["arrival"] if e["id"] == f"c1:r{i}")
        assert arrival["tokens"] == [3, 4 + i] and arrival["params"]["max_tokens"] == 5 + i
    assert {e["id"] for e in by_kind["admit"]} == arrivals - {"c1:long"}
    assert by_kind["stats"][-1]["frame"]["requests_done"] == 6
    # the dashboard's reader accepts it and rebuilds the same counts
    from qtui.tui.recording import derive_frames, load_recording, rebuild_frames

    rec = load_recording(path)
    assert derive_frames(rec) and not rec.problems
    rebuilt = rebuild_frames(rec.header, [e for e in rec.events if not isinstance(e, StatsLine)])
    assert rebuilt[-1].frame["requests_done"] == 6 and rebuilt[-1].frame["errors"] == 1


async def test_replayed_stats_frames_equal_the_live_ones(tmp_path):
    """Replay feeds a recording's events to the live server's own StatsFeed: every frame it builds at a
    recorded stats line is that frame, field for field, and so is every frame a subscriber received then.
    The session has split steps (max_rows < slots), a queue, a cancel, an error and parity verdicts."""
    from qtui.tui.recording import load_recording, rebuild_frames

    async with fake_server(max_slots=4, max_rows=3, record=tmp_path, step_delay_s=0.003, stats_interval=0.02,
                           verify_parity=True) as srv:  # fmt: skip
        path = srv.recorder.path
        async with await Client.connect(srv.url) as watcher, await Client.connect(srv.url) as client:
            await watcher.subscribe()
            first = await client.submit_many(
                [dict(tokens=[3, i + 2], max_tokens=12, ignore_eos=True) for i in range(6)]
            )
            (cx,) = await client.submit_many([dict(id="cx", tokens=[9], max_tokens=60, ignore_eos=True)])
            (long,) = await client.submit_many([dict(tokens=[3] * 64)])
            await asyncio.gather(*first, long)
            await client.cancel("cx")
            await cx
            async with asyncio.timeout(10):
                while srv.stats.parity["equal"] < 6:  # the parity re-runs of an idle server
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
    live = []
    while not watcher.stats.empty():
        live.append(watcher.stats.get_nowait())
    rec = load_recording(path)
    recorded = [line for line in rec.events if isinstance(line, StatsLine)]
    replayed = rebuild_frames(rec.header, rec.events)
    assert len(replayed) == len(recorded) > 10 and not rec.problems
    for line, mine in zip(recorded, replayed):
        assert mine.t == line.t and mine.frame == line.frame, f"frame at t={line.t}"
    by_t = {line.frame["t"]: line.frame for line in recorded}
    matched = [f for f in live[1:] if f["t"] in by_t]  # live[0]: the subscribe-time snapshot
    assert len(matched) > 5 and all(f == by_t[f["t"]] for f in matched)
    final = recorded[-1].frame
    assert final["batch_hist"].get("3", 0) > 0 and final["errors"] == 1 and final["parity"]["equal"] == 6


async def test_stats_feed_frames_while_serving():
    async with fake_server(max_slots=4, step_delay_s=0.01, stats_interval=0.05) as srv:
        async with await Client.connect(srv.url) as watcher, await Client.connect(srv.url) as client:
            await watcher.subscribe()
            first = await asyncio.wait_for(watcher.stats.get(), 5)
            for key in ("t", "model", "engine", "device", "max_batch", "slots", "steps", "agg_tok_s", "queue", "active",
                        "requests_done", "errors", "ttft_ms", "batch_hist", "parity", "verdicts"):  # fmt: skip
                assert key in first
            futures = await client.submit_many(
                [dict(tokens=[3, i + 2], max_tokens=20, ignore_eos=True) for i in range(6)]
            )
            seen_busy = None
            while not all(f.done() for f in futures):
                frame = await asyncio.wait_for(watcher.stats.get(), 5)
                if len(frame["slots"]) == 4:
                    seen_busy = frame
            await asyncio.sleep(0.15)
            last = watcher.stats.get_nowait() if not watcher.stats.empty() else await watcher.stats.get()
            while not watcher.stats.empty():
                last = watcher.stats.get_nowait()
        assert seen_busy is not None and seen_busy["active"] == 4 and seen_busy["queue"] == 2
        row = seen_busy["slots"][0]
        assert set(row) >= {"slot", "id", "state", "tokens", "prompt_tokens", "tok_s", "m", "parity"}
        assert all(r["m"] in (0, 4) for r in seen_busy["slots"])
        assert last["requests_done"] == 6 and last["active"] == 0 and last["batch_hist"].get("4", 0) > 0
        assert last["ttft_ms"]["p50"] > 0


async def test_verify_parity_reports_verdicts_to_feed_metrics_and_done():
    async with fake_server(max_slots=4, verify_parity=True, stats_interval=0.05) as srv:
        real_decode = srv.engine.decode
        # rows decoded in a batch of 3+ come out different from solo rows: the live check must catch it
        srv.engine.decode = lambda slots, toks: [
            (t + 1) % srv.engine.n_vocab if len(slots) >= 3 and t != EOS else t for t in real_decode(slots, toks)
        ]
        async with await Client.connect(srv.url) as watcher, await Client.connect(srv.url) as client:
            await watcher.subscribe()
            pair = await asyncio.gather(
                *await client.submit_many([dict(tokens=[3, i + 2], max_tokens=6, ignore_eos=True) for i in range(2)])
            )
            triple = await asyncio.gather(
                *await client.submit_many([dict(tokens=[7, i + 2], max_tokens=6, ignore_eos=True) for i in range(3)])
            )
            assert all(r.done["parity"] == "pending" for r in pair + triple)
            verdicts: dict[str, dict] = {}
            while len(verdicts) < 5:
                frame = await asyncio.wait_for(watcher.stats.get(), 10)
                verdicts.update({v["id"]: v for v in frame["verdicts"]})
                counts = frame["parity"]
        assert {v["verdict"] for k, v in verdicts.items() if k.endswith(("r0", "r1"))} >= {"equal"}
        diverged = [v for v in verdicts.values() if v["verdict"] == "diverged"]
        assert len(diverged) == 3 and all(v["index"] == 1 for v in diverged)
        assert counts == {"equal": 2, "diverged": 3, "pending": 0}
        metrics = parse_prometheus((await aget(f"http://127.0.0.1:{srv.port}/metrics"))[2])
        assert metrics["qtui_parity_verdicts_total"] == {'{verdict="equal"}': 2, '{verdict="diverged"}': 3}
