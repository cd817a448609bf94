"""A dashboard pointed at nothing says so on screen (never a traceback) and keeps retrying; a malformed URL
is reported once and not retried."""

from __future__ import annotations

import asyncio
import socket

from qtui.tui.app import DashApp
from qtui.tui.feed import SocketFeed
from qtui.tui.widgets.status import StatusBar


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_text(app: DashApp) -> str:
    return str(app.query_one(StatusBar).render())


async def wait_for(predicate, timeout: float = 10.0) -> None:
    async def poll():
        while not predicate():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)


async def test_refused_connection_says_so_and_retries():
    url = f"ws://127.0.0.1:{free_port()}"  # nothing listens there
    app = DashApp(SocketFeed(url))
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(lambda: app.connection.state == "reconnecting")
        await pilot.pause(0.1)
        text = status_text(app)
        assert "reconnecting…" in text and "connection refused" in text and url in text
        assert "Traceback" not in text
        await asyncio.sleep(1.0)  # backoff 0.5 s, then a second attempt fails too: still running, still saying it
        assert app.connection.state == "reconnecting" and app.is_running


async def test_malformed_url_is_reported_once():
    app = DashApp(SocketFeed("localhost:8765"))  # no ws:// scheme
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(lambda: app.connection.state == "failed")
        await pilot.pause(0.1)
        assert "not a WebSocket URL" in status_text(app)
        assert app.is_running  # the app stays up, showing the message


class BrokenFeed:
    label = "broken"

    def __init__(self) -> None:
        from qtui.tui.state import DashState

        self.state = DashState()

    async def run(self, post) -> None:
        raise RuntimeError("feed bug")


async def test_a_feed_that_crashes_is_reported_not_raised():
    app = DashApp(BrokenFeed())
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(lambda: app.connection.state == "failed")
        await pilot.pause(0.1)
        assert "feed stopped: RuntimeError: feed bug" in status_text(app) and app.is_running
