"""Issue 13 items 2 and 10: a client that never reads cannot grow the server's memory without bound, and
cannot stretch a drain past --drain-timeout. Real sockets on 127.0.0.1, fake engine."""

from __future__ import annotations

import asyncio
import json
import time

from websockets.asyncio.client import connect

from qtui.tools.client import Client

from .fake_engine import solo_reply
from .helpers import fake_server

FLOOD = 20_000  # info requests: ~20 MB of replies, more than the loopback socket buffers hold


async def _non_reader(url: str):
    """A protocol-v1 client that sends but never reads (max_queue=1: its library stops reading the socket)."""
    return await connect(url, proxy=None, max_queue=1, compression=None)


async def _flood(ws, n: int = FLOOD) -> None:
    frame = json.dumps({"op": "info"})
    for _ in range(n):
        await ws.send(frame)


async def _wait_for(predicate, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_non_reading_client_is_dropped_past_its_queue_bound_others_untouched():
    limit = 256 << 10
    async with fake_server(max_slots=4, step_delay_s=0.002, max_queued_bytes=limit) as srv:
        async with await Client.connect(srv.url) as good:
            (running,) = await good.submit_many([dict(tokens=[3, 4, 5], max_tokens=40, ignore_eos=True)])
            silent = await _non_reader(srv.url)
            await _wait_for(lambda: len(srv._connections) == 2, 5)
            conn = next(c for c in srv._connections if c.number != 1)
            try:
                await _flood(silent)
            except Exception:
                pass  # the server may abort the socket while we are still sending: that is the point
            await _wait_for(lambda: conn not in srv._connections, 10)
            assert conn.is_dropped and conn.peak_queued_bytes <= limit  # memory held for it stayed bounded
            assert conn.queued_bytes == 0  # and was released
            assert srv.metrics.dropped._value.get() == 1
            assert (await running).tokens == solo_reply([3, 4, 5], 40, eos=None)
            again = await good.generate(tokens=[7, 8], max_tokens=5, ignore_eos=True)
            assert again.tokens == solo_reply([7, 8], 5, eos=None)
            await silent.close()
            silent.transport.abort()


async def test_drain_with_non_reading_client_honours_drain_timeout():
    async with fake_server(max_slots=2, max_context=4096, step_delay_s=0.01, max_queued_bytes=256 << 20) as srv:
        silent = await _non_reader(srv.url)
        await silent.send(json.dumps({"op": "generate", "id": "s", "tokens": [3, 4], "max_tokens": 4000,
                                      "ignore_eos": True}))  # fmt: skip
        await _flood(silent)  # its sender is now blocked on a full socket
        reader = await Client.connect(srv.url)
        (other,) = await reader.submit_many([dict(tokens=[5, 6], max_tokens=4000, ignore_eos=True)])
        await _wait_for(lambda: srv.stats.active == 2, 10)
        t0 = time.monotonic()
        await srv.drain(timeout=0.5)
        took = time.monotonic() - t0
        assert took < 0.5 + 4.0, f"drain took {took:.1f} s with --drain-timeout 0.5"
        assert (await other).error["code"] == "shutting_down"  # the reading client still got its answer
        assert srv.engine.num_free_slots() == 2
        silent.transport.abort()
