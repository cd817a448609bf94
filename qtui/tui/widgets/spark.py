"""A bar sparkline on a fixed scale [0, top], newest value at the right. Textual's Sparkline scales to the
data's own min..max, so a steady m = 16 would draw as a flat floor and a small wobble in tok/s as a cliff."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.widget import Widget

EIGHTHS = " ▁▂▃▄▅▆▇█"  # index = eighths of one character cell filled, from the bottom


def bucket_max(values: Sequence[float], width: int) -> list[float]:
    """At most `width` columns: consecutive buckets of ceil(len / width) values, each shown by its max, so a
    short burst of a large m stays visible. Fewer values than columns: one column each."""
    if width <= 0 or not values:
        return []
    size = max(1, math.ceil(len(values) / width))
    start = len(values) % size  # the oldest partial bucket is dropped, so the newest bucket is always full
    return [max(values[i : i + size]) for i in range(start, len(values), size)][-width:]


def spark_rows(values: Sequence[float], width: int, height: int, top: float) -> list[str]:
    """`height` strings of `width` characters, top row first: each column a bar of values / top * height
    cells (at least one eighth for any value > 0, so small is not confused with none)."""
    columns = bucket_max(values, width)
    rows = [[" "] * width for _ in range(height)]
    offset = width - len(columns)  # right-aligned: newest at the right edge
    for x, value in enumerate(columns):
        fraction = min(max(value / top, 0.0), 1.0) if top > 0 else 0.0
        eighths = round(fraction * height * 8)
        if value > 0:
            eighths = max(eighths, 1)
        for row in range(height):  # row 0 = bottom
            filled = min(max(eighths - 8 * row, 0), 8)
            rows[height - 1 - row][offset + x] = EIGHTHS[filled]
    return ["".join(r) for r in rows]


class BarSpark(Widget):
    DEFAULT_CSS = """
    BarSpark { height: 3; }
    """

    def __init__(self, style: str = "magenta", **kwargs: Any) -> None:  # kwargs: Widget's (name, id, classes, ...)
        super().__init__(**kwargs)
        self.bar_style = style
        self.values: list[float] = []
        self.top = 1.0

    def show(self, values: Sequence[float], top: float) -> None:
        self.values, self.top = list(values), top
        self.refresh()

    def render(self) -> Text:
        rows = spark_rows(self.values, self.size.width, self.size.height, self.top)
        return Text("\n".join(rows), style=self.bar_style, no_wrap=True)
