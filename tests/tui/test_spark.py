"""The fixed-scale bar sparkline: bucketing keeps every burst's max, bars are proportional to value / top."""

from __future__ import annotations

import random

from qtui.tui.widgets.spark import EIGHTHS, bucket_max, spark_rows


def column_eighths(rows: list[str], x: int) -> int:
    return sum(EIGHTHS.index(row[x]) for row in rows)


def test_bucket_max_keeps_peaks_and_the_newest_value():
    rng = random.Random()
    for _ in range(200):
        values = [rng.randint(1, 16) for _ in range(rng.randint(1, 300))]
        width = rng.randint(1, 60)
        cols = bucket_max(values, width)
        assert 1 <= len(cols) <= width
        if len(values) <= width:
            assert cols == values
        size = -(-len(values) // width)
        assert cols[-1] == max(values[-size:])  # the newest bucket is full and last
        assert max(cols) == max(values[len(values) % size :])


def test_bars_are_proportional_and_right_aligned():
    rng = random.Random()
    for _ in range(100):
        height, width, top = rng.randint(1, 4), rng.randint(5, 40), rng.choice([1, 4, 16, 250.0])
        values = [rng.uniform(0, top) for _ in range(rng.randint(1, width))]
        values[0] = 0.0
        rows = spark_rows(values, width, height, top)
        assert len(rows) == height and all(len(r) == width for r in rows)
        offset = width - len(values)
        assert all(column_eighths(rows, x) == 0 for x in range(offset))  # empty left of the oldest
        for i, v in enumerate(values):
            got = column_eighths(rows, offset + i)
            want = round(v / top * height * 8)
            assert got == (max(want, 1) if v > 0 else 0)
    full = spark_rows([16, 16], 2, 3, 16)
    assert full == ["██", "██", "██"]  # a steady m at max_slots draws full bars, not a floor
