"""One HTTP call's requests (its `n` choices × prompts) in flight: their events in one queue, cancellation
when the client goes away, and the server-sent-event response that streams them."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from qtui.serve import events as ev
from qtui.serve.request import GenerateParams

if TYPE_CHECKING:
    from qtui.serve.server import QtuiServer

Job = tuple[list[int], GenerateParams]  # one choice to generate: (prompt token ids, its parameters)
Received = tuple[int, ev.Token | ev.Done | ev.Error | None]  # (choice index, event); None: client gone


@dataclass(slots=True)
class _QueueRoute:
    index: int
    queue: asyncio.Queue[Received]

    def deliver(self, e: ev.Token | ev.Done | ev.Error) -> None:
        self.queue.put_nowait((self.index, e))


class Run:
    """Submits every job at once (so they can share a batch) and hands their events out in arrival order."""

    def __init__(self, srv: QtuiServer, jobs: list[Job]) -> None:
        self.srv = srv
        self.queue: asyncio.Queue[Received] = asyncio.Queue()
        number = srv.next_number()
        self.rids = [f"h{number}:{i}" for i in range(len(jobs))]
        self.open = set(range(len(jobs)))  # choices without their Done / Error yet
        arrival_t = time.monotonic()
        for i, (tokens, params) in enumerate(jobs):
            srv.submit(self.rids[i], _QueueRoute(i, self.queue), tokens, params, arrival_t)

    async def next(self) -> Received:
        index, e = await self.queue.get()
        if e is not None and not isinstance(e, ev.Token):
            self.open.discard(index)
        return index, e

    def cancel(self) -> None:
        """Stop every choice still running (the client left or another choice failed); frees their slots."""
        for i in list(self.open):
            self.srv.cancel(self.rids[i])
        self.open.clear()

    def client_gone(self) -> None:
        self.cancel()
        self.queue.put_nowait((-1, None))

    async def watch(self, receive: Callable[[], Any]) -> None:
        """Until the client disconnects (ASGI http.disconnect), then cancel: a dropped call frees its slots."""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.client_gone()
                return


class EventStream:
    """A `text/event-stream` ASGI response over `chunks` (each already `data: ...\\n\\n`), watching for the
    client's disconnect the whole time (not only when a write fails), so a dropped stream frees its slot."""

    def __init__(self, run: Run, chunks: AsyncGenerator[str, None]) -> None:
        self.run, self.chunks = run, chunks

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
                   (b"x-accel-buffering", b"no")]  # fmt: skip
        watcher = asyncio.create_task(self.run.watch(receive))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            async for chunk in self.chunks:
                await send({"type": "http.response.body", "body": chunk.encode(), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away mid-write
            pass
        finally:
            watcher.cancel()
            self.run.cancel()
            with contextlib.suppress(BaseException):
                await self.chunks.aclose()
