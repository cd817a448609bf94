"""The one encode / decode pair of recording lines: every recorded event comes back as itself, and a line
that cannot be an event says which field is wrong."""

from __future__ import annotations

import json

import pytest

from qtui.serve import events as ev
from qtui.serve import records
from qtui.serve.protocol import dumps

START = 1000.0
EVENTS = [
    ev.Arrived(START + 0.5, "c1:a", [3, 4], {"max_tokens": 4, "stop": ["x"], "ignore_eos": False}, 2),
    ev.Arrived(START + 0.5, "c1:long", None, {"max_tokens": 4, "stop": [], "ignore_eos": False}, 90_000),
    ev.Admitted(START + 0.6, "c1:a", 3),
    ev.Prefilled(START + 0.625, "c1:a", 3, 2, 1.25),
    ev.Step(START + 0.75, 2, 3.5, [3, 1], [7, 8], 1, 2),
    ev.Step(START + 0.75, 1, 0.5, [0], [9], 0, 0, verify=True),
    ev.Done(START + 1.0, "c1:a", 3, "ab", [7, 1], "stop", 2, 12.5, 40.25, 2, "pending"),
    ev.Done(START + 1.0, "c1:q", None, "", [], "cancelled", 5, None, 0.0, 0, None),
    ev.Error(START + 1.5, "c1:e", "cuda_error", "cuGraphLaunch failed: X", "cuGraphLaunch"),
    ev.Error(START + 1.5, "c1:f", "prompt_too_long", "too long"),
    ev.Cancelled(START + 2.0, "c1:q"),
    ev.ParityVerdict(START + 2.5, "c1:a", None),
    ev.ParityVerdict(START + 2.5, "c1:b", 7),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_decode_inverts_encode(event):
    line = json.loads(dumps(records.encode(event, START)))  # through JSON, as on disk
    back = records.decode(line)
    expected = {**{f: getattr(event, f) for f in event.__slots__}, "t": records.session_t(event.t, START)}
    assert back == type(event)(**expected)


def test_tokens_are_not_recorded_and_stats_lines_round_trip():
    assert records.encode(ev.Token(START, "c1:a", 0, 7, "x"), START) is None
    line = records.encode_stats({"op": "stats", "queue": 1}, START + 3.0000004, START)
    assert line["t"] == 3.0 and records.decode(line) == records.StatsLine(3.0, {"op": "stats", "queue": 1})


def test_older_v1_lines_decode_with_defaults():
    arrival = records.decode({"t": 1, "ev": "arrival", "id": "c1:a", "tokens": [5, 6], "params": {"max_tokens": 2}})
    assert arrival.num_tokens == 2 and arrival.tokens == [5, 6]
    step = records.decode({"t": 1.5, "ev": "step", "m": 1, "ms": 1.0, "slots": [0], "tokens": [4]})
    assert (step.queue, step.active, step.verify) == (0, 0, False)


BAD_LINES = [
    ({"t": 1, "ev": "arrival", "id": "a", "params": {}}, "without `tokens`"),
    ({"t": 1, "ev": "arrival", "id": "a", "tokens": [1, "x"]}, "`tokens` must be a list of integers"),
    ({"t": 1, "ev": "arrival", "id": "a", "tokens": None}, "`num_tokens` is missing"),
    ({"t": 1, "ev": "arrival", "id": "a", "tokens": [1], "params": [1]}, "`params` must be dict"),
    ({"t": 1, "ev": "arrival", "id": "a", "tokens": [1], "params": {"id": "x"}}, "`params` must be an object"),
    ({"t": 1, "ev": "stats"}, "stats line without `frame`"),
    ({"t": 1, "ev": "stats", "frame": 3}, "`frame` must be dict"),
    ({"t": 1, "ev": "step", "m": 2, "slots": [0], "tokens": [1]}, "`m` must be the number of `slots`"),
    ({"t": 1, "ev": "parity", "id": "a", "verdict": "diverged"}, "`verdict`"),
    ({"t": 1, "ev": "admit", "id": "a", "slot": True}, "`slot` must be int"),
    ({"t": "1", "ev": "admit"}, "numeric `t`"),
    ({"t": 1, "ev": "teleport"}, "unknown event kind 'teleport'"),
]


@pytest.mark.parametrize("line, needle", BAD_LINES)
def test_bad_lines_raise_a_record_error_naming_the_field(line, needle):
    with pytest.raises(records.RecordError) as info:
        records.decode(line)
    assert needle in info.value.message and info.value.code == "bad_request"
