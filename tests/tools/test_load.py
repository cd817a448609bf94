"""`qtui load`: the load-driver row against a live fake-engine server, and the paced-engine overhead tool."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from qtui.tools.stream_load import stream_row

from serve.helpers import fake_server


async def test_stream_row_counts_every_token_of_every_client():
    async with fake_server(max_slots=8, max_context=128, step_delay_s=0.002) as srv:
        row = await stream_row(srv.url, clients=8, max_tokens=20, rounds=2, prompt_tokens=4)
    data = row.to_json()
    assert data["requests"] == 16 and data["errors"] == [] and data["tokens"] == 16 * 20
    assert 0 < data["frames"] <= data["tokens"] and data["agg_tok_s"] > 0 and data["max_m"] == 8
    assert data["ttft_ms_p50"] is not None and data["gap_ms_p99"] >= data["gap_ms_p50"]


def test_load_command_prints_one_json_row(capsys):
    """The CLI as run against a GPU server, here against a fake-engine server in a background thread."""
    import asyncio
    import threading

    from qtui.cli import main

    ready, stop = threading.Event(), None
    url: list[str] = []

    async def serve() -> None:
        nonlocal stop
        stop = asyncio.Event()
        async with fake_server(max_slots=4, max_context=64) as srv:
            url.append(srv.url)
            ready.set()
            await stop.wait()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        assert main(["load", url[0], "--clients", "4", "--max-tokens", "6", "--json"]) == 0
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
    row = json.loads(capsys.readouterr().out)
    assert row["clients"] == 4 and row["tokens"] == 24 and row["errors"] == []


def test_overhead_tool_reports_a_row_per_step_time():
    import asyncio

    from qtui.tools.overhead import measure

    row = asyncio.run(measure(clients=4, max_tokens=16, step_ms=2.0))
    assert row["tokens"] == 64 and row["errors"] == [] and 0 < row["device_busy"] <= 1.05


async def test_long_prompt_reports_the_gaps_streaming_clients_saw_during_its_prefill():
    """A 1,000-token prompt fed 64 tokens a step (the budget) while 4 clients stream: its TTFT spans ~16
    steps, and the streaming clients kept getting frames through it."""
    async with fake_server(max_slots=5, max_context=1100, step_delay_s=0.002, max_prefill_tokens=64) as srv:
        row = await stream_row(srv.url, clients=4, max_tokens=150, prompt_tokens=4, long_prompt=1000,
                               long_after_s=0.05)  # fmt: skip
    data = row.to_json()
    assert data["long_prompt_tokens"] == 1000 and data["long_error"] is None and data["long_ttft_ms"] > 0
    assert data["gap_ms_p50_during_long"] is not None and data["gap_ms_max_during_long"] < data["long_ttft_ms"]
