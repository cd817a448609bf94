"""One connection's outgoing side without a server: token frames coalesce while they wait (and only then),
a request's frames stay in order, the direct write path and the sender task take turns, the byte bound holds."""

from __future__ import annotations

import asyncio
import json

from qtui.engine.sampling import Choice
from qtui.serve import events as ev
from qtui.serve.connection import Connection, Writer
from qtui.tools.client import Client


def token(rid: str, index: int, tok: int, text: str, choice: Choice | None = None) -> ev.Token:
    return ev.Token(0.0, rid, index, tok, text, choice)


class Socket:
    """A transport: `can_write` toggles flow control; `write` records each write (one per flush)."""

    def __init__(self) -> None:
        self.writes: list[list[str]] = []
        self.open = True
        self.gate = asyncio.Event()
        self.gate.set()
        self.slow: list[str] = []  # frames the sender task sent (the ASGI path)

    def writer(self) -> Writer:
        return Writer(lambda: self.open, lambda texts: self.writes.append(list(texts)))

    async def send_text(self, text: str) -> None:
        await self.gate.wait()
        self.slow.append(text)


def frames(texts: list[str]) -> list[dict]:
    return [json.loads(t) for t in texts]


async def test_tokens_queued_in_one_pass_become_one_frame_per_request_in_one_write():
    sock = Socket()
    conn = Connection(sock, 1, writer=sock.writer())
    for i, (tok, text) in enumerate([(5, "he"), (6, "llo"), (7, " w")]):
        conn.send_token("a", token("c1:a", i, tok, text))
        conn.send_token("b", token("c1:b", i, 10 + i, "x"))
    conn.send({"op": "done", "id": "b"})
    conn.send_token("b", token("c1:b", 0, 20, "new"))  # the id reused after its done: a frame of its own
    await asyncio.sleep(0)  # the flush runs right after this loop pass
    (write,) = sock.writes
    assert frames(write) == [
        {"op": "token", "id": "a", "index": 0, "token": 5, "text": "hello w", "tokens": [5, 6, 7]},
        {"op": "token", "id": "b", "index": 0, "token": 10, "text": "xxx", "tokens": [10, 11, 12]},
        {"op": "done", "id": "b"},
        {"op": "token", "id": "b", "index": 0, "token": 20, "text": "new"},  # one token: exactly a v1 frame
    ]
    assert conn.queued_bytes == 0 and await conn.flushed(0.1)


async def test_a_client_that_keeps_up_gets_one_frame_per_token_and_logprob_tokens_never_merge():
    sock = Socket()
    conn = Connection(sock, 1, writer=sock.writer())
    for i in range(3):
        conn.send_token("a", token("c1:a", i, 5 + i, "t"))
        await asyncio.sleep(0)
    conn.send_token("a", token("c1:a", 3, 9, "u", Choice(9, -0.5, ())))
    conn.send_token("a", token("c1:a", 4, 9, "v", Choice(9, -0.5, ())))
    await asyncio.sleep(0)
    sent = [frames(w) for w in sock.writes]
    assert [len(w) for w in sent] == [1, 1, 1, 2] and all("tokens" not in f for w in sent for f in w)
    assert [f["logprob"] for f in sent[-1]] == [-0.5, -0.5]


async def test_while_the_socket_is_busy_the_sender_writes_in_order_and_tokens_coalesce():
    sock = Socket()
    conn = Connection(sock, 1, writer=sock.writer())
    sender = asyncio.create_task(conn.run_sender())
    sock.open, sock.gate = False, asyncio.Event()  # flow control: the transport is over its high-water mark
    conn.send_token("a", token("c1:a", 0, 5, "a"))
    await asyncio.sleep(0.01)  # the sender has the first frame and waits on the socket
    for i in range(1, 6):
        conn.send_token("a", token("c1:a", i, 5 + i, "b"))
    conn.send({"op": "done", "id": "a"})
    sock.open = True  # writable again, but the sender is mid-write: the direct path must not overtake it
    conn.send_token("z", token("c1:z", 0, 1, "z"))
    await asyncio.sleep(0)
    assert sock.writes == []
    sock.gate.set()
    assert await conn.flushed(1)
    sender.cancel()
    got = frames(sock.slow)
    assert [(f["op"], f["id"], f.get("tokens")) for f in got] == [
        ("token", "a", None),
        ("token", "a", [6, 7, 8, 9, 10]),
        ("done", "a", None),
        ("token", "z", None),
    ]


async def test_the_byte_bound_counts_merged_tokens_and_drops():
    sock = Socket()
    dropped = []
    conn = Connection(sock, 1, max_queued_bytes=400, abort=lambda: dropped.append(1))
    for i in range(40):
        conn.send_token("a", token("c1:a", i, i, "0123456789"))
    assert conn.is_dropped and dropped == [1] and conn.queued_bytes == 0


async def test_the_client_reads_coalesced_frames_as_their_tokens():
    client = Client.__new__(Client)
    client._pending, client.unrouted_errors = {}, []
    future = client._expect("a")
    client._on_frame({"op": "token", "id": "a", "index": 0, "token": 5, "text": "he"})
    client._on_frame({"op": "token", "id": "a", "index": 1, "token": 6, "text": "llo", "tokens": [6, 7]})
    client._on_frame({"op": "done", "id": "a", "tokens": [5, 6, 7], "text": "hello"})
    reply = await future
    assert reply.tokens == [5, 6, 7] and reply.indices == [0, 1, 2] and reply.text == "hello"
    assert reply.frame_sizes == [1, 2]


async def test_a_server_loop_that_falls_behind_catches_up_with_coalesced_frames():
    """Block the event loop while the engine thread steps: the steps' events wait, are then dispatched in one
    pass, and each reply's late tokens arrive as one frame; streams still equal their `done`."""
    import time

    from .fake_engine import solo_reply
    from .helpers import fake_server

    async with fake_server(max_slots=4, max_context=256, step_delay_s=0.001) as srv:
        async with await Client.connect(srv.url) as client:
            replies = await client.submit_many([dict(tokens=[3, i + 2], max_tokens=120, ignore_eos=True)
                                                for i in range(4)])  # fmt: skip
            await asyncio.sleep(0.05)
            time.sleep(0.1)  # the loop is stuck (as under load) while ~100 steps run
            done = await asyncio.gather(*replies)
    for i, reply in enumerate(done):
        assert reply.tokens == reply.done["tokens"] == solo_reply([3, i + 2], 120, eos=None)
        assert reply.text == reply.done["text"] and reply.indices == list(range(120))
        assert max(reply.frame_sizes) > 10  # the steps done while the loop was stuck came as one frame
