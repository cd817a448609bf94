"""The uvicorn host: every accepted connection (WebSocket or HTTP) has TCP_NODELAY, so a token frame leaves
when it is written instead of waiting, under Nagle's algorithm, for the client's delayed ACK (~40 ms)."""

from __future__ import annotations

import asyncio
import socket

from qtui.tools.client import Client

from .helpers import fake_server


def server_sockets(srv) -> list[socket.socket]:
    conns = srv._host.server.server_state.connections
    return [c.transport.get_extra_info("socket") for c in conns]


async def test_accepted_sockets_have_tcp_nodelay():
    async with fake_server() as srv, await Client.connect(srv.url) as client:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)  # an HTTP keep-alive connection
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        await reader.readuntil(b"\r\n\r\n")
        socks = server_sockets(srv)
        assert len(socks) == 2
        assert all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in socks)
        assert (await client.generate(tokens=[3], max_tokens=2)).done
        writer.close()


async def test_a_stream_has_no_delayed_ack_stalls():
    """50 tokens at one per ~2 ms step: no gap between frames comes near the 40 ms of a delayed ACK."""
    async with fake_server(step_delay_s=0.002) as srv, await Client.connect(srv.url) as client:
        reply = await client.generate(tokens=[3, 4], max_tokens=50, ignore_eos=True)
    gaps = [b - a for a, b in zip(reply.frame_times, reply.frame_times[1:])]
    assert max(gaps) < 0.030, f"largest gap {max(gaps) * 1e3:.1f} ms"
