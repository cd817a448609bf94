"""Batch sizes formed: a sparkline of m over the most recent decode steps and a histogram m -> steps."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from qtui.tui.state import DashState
from qtui.tui.widgets.spark import BarSpark

BAR_WIDTH = 22  # characters of the longest histogram bar


def bucket_label(lo: int, hi: int) -> str:
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def histogram_buckets(batch_hist: dict[int, int], max_slots: int) -> list[tuple[str, int]]:
    """Steps per m bucket: 1, 2, 3-4, 5-8, 9-16, ... up to max(max_slots, largest m seen). Empty buckets kept,
    so the rows do not jump around while the histogram fills."""
    top = max([max_slots, *batch_hist.keys(), 1])
    buckets, lo = [], 1
    while lo <= top:
        hi = 1 if lo == 1 else 2 * (lo - 1)
        count = sum(n for m, n in batch_hist.items() if lo <= m <= hi)
        buckets.append((bucket_label(lo, hi), count))
        lo = hi + 1
    return buckets


def histogram_text(batch_hist: dict[int, int], max_slots: int) -> Text:
    buckets = histogram_buckets(batch_hist, max_slots)
    total = sum(n for _, n in buckets)
    biggest = max([n for _, n in buckets] + [1])
    lines = []
    for label, n in buckets:
        bar = "█" * round(BAR_WIDTH * n / biggest) if n else ""
        share = f"{100 * n / total:3.0f}%" if total else "  —"
        lines.append(Text.assemble((f"m {label:>5} ", "bold"), (f"{bar:<{BAR_WIDTH}}", "magenta"), f" {share} {n}"))
    return Text("\n").join(lines)


class BatchPanel(Vertical):
    DEFAULT_CSS = """
    BatchPanel { height: auto; border: round $primary; }
    BatchPanel BarSpark { height: 3; margin: 0 0 1 0; }
    BatchPanel #m-now { height: 1; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="m-now")
        yield BarSpark("magenta", id="m-spark")
        yield Static(id="m-hist")

    def on_mount(self) -> None:
        self.border_title = "batch size m per decode step (0 .. max batch)"

    def show(self, state: DashState) -> None:
        last = state.m_history[-1] if state.m_history else 0
        self.query_one("#m-now", Static).update(
            Text.assemble(
                "last ",
                (str(last), "bold magenta"),
                f"  mean {state.mean_m:.2f}",
                f"  steps {sum(state.batch_hist.values())}",
            )
        )
        top = max([state.max_slots, *state.m_history, 1])  # bars on the scale 0..max_slots
        self.query_one("#m-spark", BarSpark).show(state.m_history, top)
        self.query_one("#m-hist", Static).update(histogram_text(state.batch_hist, state.max_slots))
