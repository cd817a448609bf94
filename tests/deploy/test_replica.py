"""Two `ReplicaServer`s in this process sharing one in-process `ClusterView` as their hub: the replica side of
the deployment without Ray (each app hosted on its own uvicorn socket here; Ray Serve's proxy in production)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

from qtui.deploy.aggregate import ClusterView, metric_total
from qtui.deploy.replica import ReplicaServer, open_replica
from qtui.serve.host import UvicornHost
from qtui.tools.client import Client
from qtui.tui.state import fold


async def start_pair(tiny_gguf, view: ClusterView) -> list[tuple[ReplicaServer, UvicornHost]]:
    async def report(replica: str, frame: dict, metrics: str) -> dict:
        view.report(replica, frame, metrics, time.monotonic())
        return view.frame(time.monotonic())

    async def metrics() -> str:
        return view.metrics(time.monotonic())

    pair = []
    for name in ("a", "b"):
        srv = await open_replica(str(tiny_gguf), {"engine": "cpu", "max_slots": 4, "max_context": 128,
                                                  "stats_interval": 0.05}, replica=name, reporter=report,
                                 cluster_metrics=metrics)  # fmt: skip
        host = UvicornHost(srv.build_app(), "127.0.0.1", 0, ws_max_size=1 << 22, ping_interval=20, ping_timeout=60)
        await host.start()
        pair.append((srv, host))
    return pair


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.read().decode()


async def test_replicas_name_themselves_and_serve_the_merged_view(tiny_gguf):
    view = ClusterView()
    pair = await start_pair(tiny_gguf, view)
    try:
        urls = [f"ws://127.0.0.1:{host.port}/" for _, host in pair]
        replies = []
        for url, name in zip(urls, ("a", "b")):
            async with await Client.connect(url) as client:
                assert client.hello["replica"] == name and client.hello["max_slots"] == 4
                replies.append(await client.generate(prompt="same prompt", max_tokens=6, ignore_eos=True))
        assert replies[0].tokens == replies[1].tokens  # the same request on another replica: the same reply
        text = await asyncio.to_thread(get, f"http://127.0.0.1:{pair[1][1].port}/metrics")
        assert metric_total(text, "qtui_replicas") == 2 and metric_total(text, "qtui_requests_total") == 2
        assert metric_total(text, "qtui_generation_tokens_total", replica="a") == 6
        frame = json.loads(await asyncio.to_thread(get, f"http://127.0.0.1:{pair[0][1].port}/cluster"))
        assert frame["max_slots"] == 8 and frame["requests_done"] == 2
        async with await Client.connect(urls[0]) as dash:
            await dash.subscribe()
            frames = [await asyncio.wait_for(dash.stats.get(), 5) for _ in range(3)]
        assert [r["replica"] for r in frames[-1]["replicas"]] == ["a", "b"]
        state = fold(frames, dash.hello)  # what the dashboard makes of it: every replica's slots
        assert state.max_slots == 8 and state.requests_done == 2 and len(state.slot_rows()) == 8
    finally:
        for srv, host in pair:
            await host.stop()
            await srv.close()


async def test_hub_drain_lets_in_flight_finish_then_closes_with_1001(tiny_gguf):
    view = ClusterView()
    pair = await start_pair(tiny_gguf, view)
    try:
        client = await Client.connect(f"ws://127.0.0.1:{pair[0][1].port}/")
        (running,) = await client.submit_many([{"prompt": "drain me", "max_tokens": 100, "ignore_eos": True}])
        view.is_draining = True  # what StatsHub.drain() sets when `qtui serve --replicas` gets SIGTERM
        reply = await asyncio.wait_for(running, 30)
        assert reply.done is not None and len(reply.tokens) == 100  # in-flight work finishes
        await asyncio.wait_for(client.ws.wait_closed(), 10)
        assert client.ws.close_code == 1001
        assert all(srv.is_draining for srv, _ in pair)  # every replica drains, not only the busy one
    finally:
        for srv, host in pair:
            await host.stop()
            await srv.close()


async def test_paced_frames_carry_several_steps_tokens(tiny_gguf):
    view = ClusterView()

    async def report(replica: str, frame: dict, metrics: str) -> dict:
        return view.frame(time.monotonic())

    async def metrics() -> str:
        return ""

    options = {"engine": "cpu", "max_slots": 4, "max_context": 128, "frame_interval_ms": 200}
    srv = await open_replica(str(tiny_gguf), options, replica="a", reporter=report, cluster_metrics=metrics)
    host = UvicornHost(srv.build_app(), "127.0.0.1", 0, ws_max_size=1 << 22, ping_interval=20, ping_timeout=60)
    await host.start()
    try:
        async with await Client.connect(f"ws://127.0.0.1:{host.port}/") as client:
            reply = await client.generate(prompt="pace me", max_tokens=20, ignore_eos=True)
        assert len(reply.tokens) == 20 and reply.indices == list(range(20))
        assert len(reply.frame_sizes) < 20 and sum(reply.frame_sizes) == 20  # several steps per frame
    finally:
        await host.stop()
        await srv.close()
