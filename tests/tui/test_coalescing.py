"""However fast a feed delivers frames, the dashboard redraws at most ~10 times a second and ends up showing
the latest state."""

from __future__ import annotations

import asyncio
import random

from qtui.tui.app import REDRAW_INTERVAL_S, DashApp
from qtui.tui.messages import Connection, ConnectionChanged, StatsReceived
from qtui.tui.state import DashState
from qtui.tui.widgets.slots import SlotsTable


class BurstFeed:
    """Folds `n` random frames as fast as the loop allows, posting after each."""

    label = "burst"

    def __init__(self, n: int) -> None:
        self.n = n
        self.state = DashState()
        self.is_done = False

    async def run(self, post) -> None:
        rng = random.Random()
        post(ConnectionChanged(Connection("connected", self.label)))
        for i in range(self.n):
            slots = [
                {
                    "slot": s,
                    "id": f"r{i}-{s}",
                    "state": "decode",
                    "tokens": i,
                    "prompt_tokens": 3,
                    "tok_s": 1.0,
                    "m": 4,
                    "parity": None,
                }
                for s in range(rng.randint(1, 4))
            ]
            self.state.apply(
                {
                    "op": "stats",
                    "t": i * 0.001,
                    "max_batch": 4,
                    "slots": slots,
                    "steps": [[i * 0.001, len(slots), 1.0]],
                    "agg_tok_s": float(i),
                }
            )
            post(StatsReceived(self.state.num_frames))
            if i % 20 == 0:
                await asyncio.sleep(0.01)  # ~2000 frames/s
        self.is_done = True


async def test_many_frames_few_redraws():
    feed = BurstFeed(1000)
    app = DashApp(feed)
    async with app.run_test(size=(120, 34)) as pilot:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.wait_for(_until(lambda: feed.is_done), 30)
        elapsed = loop.time() - start
        await pilot.pause(3 * REDRAW_INTERVAL_S)
        assert app.num_redraws <= elapsed / REDRAW_INTERVAL_S + 3, (app.num_redraws, elapsed)
        table = app.query_one(SlotsTable)
        shown = [str(table.get_cell(k, "request")) for k in table.rows]
        latest = [s.request_id for s in feed.state.slots]
        assert shown[: len(latest)] == latest  # the last frame is what is on screen


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.01)
