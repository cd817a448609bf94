"""`qtui serve`'s process-wide settings (qtui/serve/main.py run), without starting a server."""

from __future__ import annotations

import argparse
import sys

import pytest

from qtui.serve import main as serve_main


def test_serve_sets_a_short_gil_switch_interval_for_its_process(monkeypatch):
    """The engine thread waits on the GIL after each step while the event loop sends frames: `qtui serve` shortens
    CPython's 5 ms switch interval (the serving process only; the in-process server leaves the host's setting)."""
    seen = []
    monkeypatch.setattr(
        serve_main.asyncio, "run", lambda coro: (coro.close(), seen.append(sys.getswitchinterval()), 0)[2]
    )
    monkeypatch.setattr(serve_main.signal, "signal", lambda *a: None)
    before = sys.getswitchinterval()
    try:
        assert serve_main.run(argparse.Namespace(model="unused.gguf")) == 0
        assert (
            seen == [pytest.approx(serve_main.GIL_SWITCH_INTERVAL_S)]
            and serve_main.GIL_SWITCH_INTERVAL_S < 1e-3 < before
        )
    finally:
        sys.setswitchinterval(before)
