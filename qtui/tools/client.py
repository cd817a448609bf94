"""A small async client for protocol v1 (docs/protocol.md), used by `qtui parity`, the demo, replay and tests.

    async with await Client.connect("ws://127.0.0.1:8765/") as client:
        reply = await client.generate(prompt="Hello", max_tokens=16)
        reply.tokens, reply.text, reply.done["max_m"]
        # a burst: every frame is sent before any reply is awaited, so the server can batch them together
        replies = await asyncio.gather(*client.submit_many([dict(tokens=[1, 2, 3]), dict(prompt="hi")]))

One reader task per connection routes `token` / `done` / `error` frames to the request with that id, so many
requests can share one socket. `stats` frames go to `client.stats` (an asyncio.Queue), `info` to `info()`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed


@dataclass(slots=True)
class Reply:
    """What one request got: streamed tokens/pieces in arrival order, then its `done` or `error` frame."""

    id: str
    tokens: list[int] = field(default_factory=list)  # from `token` frames
    pieces: list[str] = field(default_factory=list)  # `text` of each token frame
    indices: list[int] = field(default_factory=list)  # index of each token (0, 1, 2, ... when in order)
    frame_times: list[float] = field(default_factory=list)  # loop time each token frame arrived
    frame_sizes: list[int] = field(default_factory=list)  # tokens each token frame carried (> 1: coalesced)
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    sent_t: float = 0.0  # loop time the frame was sent
    first_token_t: float | None = None
    end_t: float | None = None

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def is_ok(self) -> bool:
        return self.done is not None


class ConnectionLost(Exception):
    """The socket closed before the request ended (the server drained or died)."""


class Client:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.hello: dict[str, Any] | None = None
        self.stats: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.unrouted_errors: list[dict[str, Any]] = []  # errors with id null (unparseable frames)
        self._pending: dict[str, tuple[Reply, asyncio.Future[Reply]]] = {}
        self._infos: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._hello_seen = asyncio.get_running_loop().create_future()
        self._ids = itertools.count()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, url: str, *, api_key: str | None = None, **kwargs: Any) -> Client:
        """Open a socket (environment proxies ignored) and wait for the server's `hello`."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        ws = await connect(url, proxy=None, additional_headers=headers, max_size=None, compression=None, **kwargs)
        client = cls(ws)
        client.hello = await asyncio.wait_for(asyncio.shield(client._hello_seen), 30)
        return client

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.ws.close()
        await asyncio.gather(self._reader, return_exceptions=True)

    # ---- requests ------------------------------------------------------------------------------------------
    def frame(self, id: str | None = None, **fields: Any) -> dict[str, Any]:
        """A `generate` frame; fields: prompt | tokens | messages, max_tokens, stop, ignore_eos."""
        given = {k: v for k, v in fields.items() if v is not None}
        return {"op": "generate", "id": id or f"r{next(self._ids)}", **given}

    async def submit_many(self, requests: list[dict[str, Any]]) -> list[asyncio.Future[Reply]]:
        """Send every request frame first, then return one future per request (resolves at done/error)."""
        frames = [self.frame(**r) for r in requests]
        futures = [self._expect(f["id"]) for f in frames]
        for f in frames:
            await self.ws.send(json.dumps(f))
        return futures

    async def generate(self, **request: Any) -> Reply:
        """Send one `generate` and wait for its `done` or `error` (raises ConnectionLost if the socket closes)."""
        (future,) = await self.submit_many([request])
        return await future

    async def cancel(self, id: str) -> None:
        await self.ws.send(json.dumps({"op": "cancel", "id": id}))

    async def send_raw(self, message: str | bytes) -> None:
        await self.ws.send(message)

    async def subscribe(self) -> None:
        await self.ws.send(json.dumps({"op": "subscribe"}))

    async def info(self) -> dict[str, Any]:
        await self.ws.send(json.dumps({"op": "info"}))
        return await asyncio.wait_for(self._infos.get(), 30)

    def _expect(self, rid: str) -> asyncio.Future[Reply]:
        assert rid not in self._pending, f"request id {rid!r} already pending on this client"
        future = asyncio.get_running_loop().create_future()
        self._pending[rid] = (Reply(rid, sent_t=asyncio.get_running_loop().time()), future)
        return future

    # ---- the reader ----------------------------------------------------------------------------------------
    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                self._on_frame(json.loads(raw))
        except ConnectionClosed:
            pass
        finally:
            if not self._hello_seen.done():
                self._hello_seen.set_exception(ConnectionLost("socket closed before hello"))
            for reply, future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionLost(f"socket closed before request {reply.id!r} ended"))
            self._pending.clear()

    def _on_frame(self, frame: dict[str, Any]) -> None:
        op, now = frame.get("op"), asyncio.get_running_loop().time()
        if op == "hello":
            self._hello_seen.set_result(frame)
        elif op == "stats":
            self.stats.put_nowait(frame)
        elif op == "info":
            self._infos.put_nowait(frame)
        elif op in ("token", "done", "error"):
            entry = self._pending.get(frame.get("id"))  # type: ignore[arg-type]  # no id: no entry
            if entry is None:
                if op == "error":
                    self.unrouted_errors.append(frame)
                return
            reply, future = entry
            if op == "token":  # one token, or several coalesced (`tokens`: all ids, `text`: all their text)
                ids = frame.get("tokens") or [frame["token"]]
                reply.tokens += ids
                reply.pieces.append(frame["text"])
                reply.indices += range(frame["index"], frame["index"] + len(ids))
                reply.frame_times.append(now)
                reply.frame_sizes.append(len(ids))
                reply.first_token_t = reply.first_token_t or now
                return
            if op == "done":
                reply.done = frame
            else:
                reply.error = frame
            reply.end_t = now
            del self._pending[reply.id]
            future.set_result(reply)
