"""The dashboard against a real in-process server (reference engine, tiny model, --verify-parity) under a
small load: slots fill, batch sizes and tok/s update, parity verdicts appear, the server going away shows as
reconnecting and its return as connected."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from qtui.serve.main import start_server
from qtui.tools.load import climb
from qtui.tui.app import DashApp
from qtui.tui.feed import SocketFeed
from qtui.tui.widgets.batches import BatchPanel
from qtui.tui.widgets.slots import SlotsTable
from qtui.tui.widgets.status import StatusBar

SIZE = (120, 34)


async def wait_for(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}") from None


def cells(app: DashApp, column: str) -> list[str]:
    table = app.query_one(SlotsTable)
    return [str(table.get_cell(key, column)) for key in table.rows]


async def test_live_dashboard_under_load(tiny_gguf):
    async with start_server(
        tiny_gguf, engine="cpu", port=0, max_slots=8, max_context=512, verify_parity=True, window_ms=20.0
    ) as srv:
        app = DashApp(SocketFeed(srv.url))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(lambda: app.connection.state == "connected", what="connected")
            load = asyncio.create_task(climb(srv.url, levels=(4, 8), rounds=2, max_tokens=24, pause_s=1.0))
            state = app.feed.state
            await wait_for(lambda: any(s == "decode" for s in cells(app, "state")), what="a decoding slot")
            await wait_for(lambda: state.agg_tok_s > 0, what="tok/s > 0")
            await wait_for(lambda: max(state.m_history, default=0) > 1, what="a batch with m > 1")
            await asyncio.wait_for(load, 120)
            await wait_for(lambda: any("equal" in c for c in cells(app, "parity")), what="a parity verdict")
            await pilot.pause(0.3)
            assert state.engine == "cpu" and state.max_slots == 8 and "tiny" in state.model
            assert state.requests_done == 4 * 2 + 8 * 2 and state.errors == 0
            assert sum(state.batch_hist.values()) > 0 and max(state.batch_hist) > 1
            assert state.parity["diverged"] == 0 and state.parity["equal"] > 0
            spark = app.query_one(BatchPanel).query_one("#m-spark")
            assert spark.values == list(state.m_history)  # the widget shows what the feed folded
            assert str(app.query_one(SlotsTable).get_cell("0", "slot")) == "0"


async def test_reconnects_when_the_server_comes_back(tiny_gguf):
    async with start_server(tiny_gguf, engine="cpu", port=0, max_slots=2, max_context=256) as srv:
        port = srv.port
        app = DashApp(SocketFeed(srv.url))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(lambda: app.connection.state == "connected", what="connected")
            await srv.close()
            await wait_for(lambda: app.connection.state == "reconnecting", what="reconnecting")
            await pilot.pause(0.2)
            assert "reconnecting…" in str(app.query_one(StatusBar).render())
            async with start_server(tiny_gguf, engine="cpu", port=port, max_slots=2, max_context=256):
                await wait_for(lambda: app.connection.state == "connected", timeout=20, what="reconnected")
                await pilot.pause(0.2)
                assert "connected" in str(app.query_one(StatusBar).render())
