"""SIGTERM on a real `qtui serve` subprocess (tiny model, reference engine) with 16 requests in flight."""

from __future__ import annotations

import asyncio
import signal

from websockets.exceptions import InvalidStatus

from qtui.tools.client import Client

from .helpers import ServeProcess, aget


async def _start_16(url: str, max_tokens: int) -> tuple[list[Client], list[asyncio.Future]]:
    clients = [await Client.connect(url) for _ in range(16)]
    futures = [
        f
        for i, c in enumerate(clients)
        for f in await c.submit_many([dict(tokens=[5, 6, 7 + i], max_tokens=max_tokens, ignore_eos=True)])
    ]
    return clients, futures


async def _wait_streaming(clients: list[Client]) -> None:
    """Until every request has streamed at least one token (all 16 admitted and running)."""
    for _ in range(2000):
        if all(p[0].tokens for c in clients for p in c._pending.values()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("requests did not start streaming")


async def _refused(url: str) -> bool:
    try:
        await Client.connect(url, open_timeout=5)
    except (InvalidStatus, OSError):
        return True
    return False


async def test_sigterm_lets_16_in_flight_finish_refuses_new_exits_0(tiny_gguf, tmp_path):
    srv = ServeProcess(tiny_gguf, "--max-context", "512", "--drain-timeout", "60", log_path=tmp_path / "serve.log")
    try:
        clients, futures = await _start_16(srv.url, max_tokens=60)
        await _wait_streaming(clients)
        srv.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.2)
        port = srv.url.rsplit(":", 1)[1].strip("/")
        assert await _refused(srv.url)
        status, _, _ = await aget(f"http://127.0.0.1:{port}/health")
        assert status == 503
        replies = await asyncio.gather(*futures)
        assert all(r.done and r.done["finish_reason"] == "length" and len(r.tokens) == 60 for r in replies)
        assert all(r.done["max_m"] == 16 for r in replies)
        for c in clients:
            await asyncio.wait_for(c._reader, 10)
            assert c.ws.close_code == 1001
        assert await asyncio.to_thread(srv.proc.wait, 60) == 0  # exits by itself after the drain
    finally:
        srv.close()


async def test_sigterm_drain_timeout_errors_the_rest_exits_0(tiny_gguf, tmp_path):
    srv = ServeProcess(tiny_gguf, "--max-context", "4096", "--drain-timeout", "0.5", log_path=tmp_path / "serve.log")
    try:
        clients, futures = await _start_16(srv.url, max_tokens=4000)
        await _wait_streaming(clients)
        srv.proc.send_signal(signal.SIGTERM)
        replies = await asyncio.gather(*futures)
        assert [r.error["code"] for r in replies] == ["shutting_down"] * 16
        assert await asyncio.to_thread(srv.proc.wait, 60) == 0
    finally:
        srv.close()


async def test_second_sigterm_cuts_the_drain_short(tiny_gguf, tmp_path):
    srv = ServeProcess(tiny_gguf, "--max-context", "4096", "--drain-timeout", "120", log_path=tmp_path / "serve.log")
    try:
        clients, futures = await _start_16(srv.url, max_tokens=4000)
        await _wait_streaming(clients)
        srv.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        assert srv.proc.poll() is None  # still draining
        srv.proc.send_signal(signal.SIGTERM)
        replies = await asyncio.wait_for(asyncio.gather(*futures), 30)
        assert [r.error["code"] for r in replies] == ["shutting_down"] * 16
        assert await asyncio.to_thread(srv.proc.wait, 60) == 0
    finally:
        srv.close()
