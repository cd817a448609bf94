"""`qtui bench`'s ladder rungs against an engine that queues steps ahead (as the CUDA engine): a rung that one
decode call holds is queued ahead, as the scheduler runs it; a rung of more slots than `max_rows` decodes in
several calls a step (decode_submit takes at most max_rows rows)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from qtui.tools import bench

from serve.fake_engine import FakeEngine


class AheadEngine(FakeEngine):
    """A FakeEngine whose decode splits more than max_rows rows into calls and whose decode_submit refuses them,
    as the CUDA engine's do."""

    config = SimpleNamespace(n_vocab=50)

    def decode(self, slots, tokens, sampling=None):
        out: list[int] = []
        for i in range(0, len(slots), self.max_rows):
            part = None if sampling is None else sampling[i : i + self.max_rows]
            out += super().decode(slots[i : i + self.max_rows], tokens[i : i + self.max_rows], part)
        return out

    def decode_submit(self, slots, tokens, sampling=None):
        assert len(slots) <= self.max_rows, f"decode_submit takes at most {self.max_rows} rows"
        return super().decode_submit(slots, tokens, sampling)


@pytest.mark.parametrize("c,ahead", [(2, True), (3, False), (5, False)])
def test_a_rung_is_queued_ahead_only_where_one_call_holds_it(c, ahead):
    engine = AheadEngine(max_slots=6, max_context=64, max_rows=2, ahead=True)
    rung = bench.ladder_rung(engine, c, 3, np.random.default_rng())
    assert rung["c"] == c and rung["queued_ahead"] is ahead
    assert engine.num_free_slots() == 6
