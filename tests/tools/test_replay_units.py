"""The pure parts of `qtui replay --against`: which requests a recording holds, and how two replies compare."""

from __future__ import annotations

from qtui.serve.records import decode
from qtui.tools.replay import Replayed, compare, requests_of


def test_requests_of_pairs_arrivals_with_outcomes_and_cancels():
    events = [
        {"t": 0.1, "ev": "arrival", "id": "c1:r1", "tokens": [1, 2], "params": {"max_tokens": 4}},
        {"t": 0.2, "ev": "arrival", "id": "c1:r2", "tokens": [3], "params": {"max_tokens": 9}},
        {"t": 0.2, "ev": "arrival", "id": "c2:r1", "tokens": [4] * 9000, "params": {}},
        {"t": 0.2, "ev": "error", "id": "c2:r1", "code": "prompt_too_long", "message": "..."},
        {"t": 0.3, "ev": "step", "m": 2, "ms": 1.0, "slots": [0, 1], "tokens": [5, 6]},
        {"t": 0.4, "ev": "cancel", "id": "c1:r2"},
        {"t": 0.5, "ev": "done", "id": "c1:r2", "tokens": [6], "finish_reason": "cancelled"},
        {"t": 0.6, "ev": "done", "id": "c1:r1", "tokens": [5, 7, 8, 9], "finish_reason": "length"},
        {"t": 0.7, "ev": "arrival", "id": "c3:big", "tokens": None, "num_tokens": 90000, "params": {}},
        {"t": 0.7, "ev": "error", "id": "c3:big", "code": "prompt_too_long", "message": "..."},
    ]
    reqs = {r.rid: r for r in requests_of([decode(e) for e in events])}
    assert list(reqs) == ["c1:r1", "c1:r2", "c2:r1", "c3:big"]
    assert reqs["c1:r1"].recorded.tokens == [5, 7, 8, 9] and reqs["c1:r1"].cancel_t is None
    assert reqs["c1:r2"].cancel_t == 0.4 and reqs["c2:r1"].recorded.code == "prompt_too_long"
    assert [r.connection for r in reqs.values()] == ["c1", "c1", "c2", "c3"]  # one socket per connection
    assert compare(reqs["c3:big"]) == ("skipped", None)  # its prompt was recorded by its size only


def done(tokens, reason="length"):
    return {"op": "done", "tokens": tokens, "finish_reason": reason}


def test_compare_verdicts():
    rec = decode({"t": 1, "ev": "done", "id": "a", "tokens": [5, 7, 8, 9], "finish_reason": "length"})
    r = Replayed("a", 0.0, [1], {}, recorded=rec)
    assert compare(r) == ("no reply", None)
    r.live = done([5, 7, 8, 9])
    assert compare(r) == ("same", None)
    r.live = done([5, 7, 0, 9])
    assert compare(r) == ("differs", 2)
    r.live = done([5, 7], "stop")
    assert compare(r) == ("differs", 2)
    r.live = done([5, 7], "cancelled")  # a cancel cuts short: compare the common prefix only
    assert compare(r) == ("same", None)
    r.live = done([5, 1], "cancelled")
    assert compare(r) == ("differs", 1)
    err = Replayed("b", 0.0, [1], {}, recorded=decode({"t": 1, "ev": "error", "id": "b", "code": "prompt_too_long"}))
    err.live = {"op": "error", "code": "prompt_too_long"}
    assert compare(err) == ("same", None)
    err.live = done([1])
    assert compare(err) == ("differs", None)
