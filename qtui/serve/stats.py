"""The stats feed: folds scheduler events into the `stats` frame of docs/protocol.md.

`StatsFeed.consume(events)` runs on the asyncio thread (events arrive via call_soon_threadsafe);
`frame(now)` builds one frame and resets the per-frame lists (`steps`, `verdicts`). Pure bookkeeping: no I/O.

Replay runs this same code over a recording's decoded events (qtui/serve/records.py), so it reads only what a
recording keeps: token counts come from `Prefilled` (the chunk that completes the prompt yields the first
token) and `Step` (one token per slot), never from `Token` events, and every time is first turned into session
seconds the way the recorder writes them (`records.session_t`). Given the same events and frame times, a
replay's frames are the live frames, field for field.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any

from qtui.serve import events as ev
from qtui.serve.records import round_ms, session_t

RATE_WINDOW_S = 1.0  # agg_tok_s counts tokens over the last second: (now - 1 s, now]
TTFT_WINDOW = 100  # p50 over the last 100 requests
MAX_PENDING_ITEMS = 4096  # steps / verdicts kept between frames (bounded when nobody asks for frames)


@dataclass(slots=True)
class _SlotRow:
    slot: int
    rid: str
    prompt_tokens: int
    state: str = "prefill"
    tokens: int = 0
    num_prefilled: int = 0
    first_t: float | None = None  # session seconds of the first token
    m: int = 0


class StatsFeed:
    def __init__(self, identity: dict[str, Any], start_t: float) -> None:
        """`start_t`: the scheduler-clock time of session second 0 (0.0 when fed a recording's events)."""
        self.identity = identity  # model, engine, device, max_slots, max_rows (+ max_batch, the v1 name of max_slots)
        self.start_t = start_t
        self.queue: set[str] = set()
        self.rows: dict[str, _SlotRow] = {}  # rid -> busy slot row
        self._prompt_len: dict[str, int] = {}  # rid -> prompt tokens, until admitted
        self._by_slot: dict[int, str] = {}
        self._steps: deque[list[float]] = deque(maxlen=MAX_PENDING_ITEMS)
        self._verdicts: deque[dict[str, Any]] = deque(maxlen=MAX_PENDING_ITEMS)
        self._token_times: deque[float] = deque()  # session seconds of each token of the last second
        self._ttfts: deque[float] = deque(maxlen=TTFT_WINDOW)
        self.batch_hist: dict[int, int] = {}
        self.requests_done = 0
        self.errors = 0
        self.parity = {"equal": 0, "diverged": 0, "pending": 0}
        self.num_events = 0  # events consumed so far (the recorder skips stats frames when nothing happened)

    def consume(self, events: list[ev.Event]) -> None:
        for e in events:
            self.num_events += 1
            self._consume_one(e)

    def _consume_one(self, e: ev.Event) -> None:
        if isinstance(e, ev.Arrived):
            self.queue.add(e.rid)
            self._prompt_len[e.rid] = e.num_tokens
        elif isinstance(e, ev.Admitted):
            self.queue.discard(e.rid)
            self.rows[e.rid] = _SlotRow(e.slot, e.rid, self._prompt_len.pop(e.rid, 0))
            self._by_slot[e.slot] = e.rid
        elif isinstance(e, ev.Prefilled):
            row = self.rows.get(e.rid)
            if row is not None:
                row.num_prefilled += e.n
                if row.num_prefilled >= row.prompt_tokens:  # the last chunk yields the first token
                    self._count_token(row, session_t(e.t, self.start_t))
        elif isinstance(e, ev.Step):
            self._on_step(e)
        elif isinstance(e, ev.Done):
            self._end(e.rid)
            self.requests_done += 1
            if e.ttft_ms is not None:
                self._ttfts.append(round_ms(e.ttft_ms))
            if e.parity == "pending":
                self.parity["pending"] += 1
        elif isinstance(e, ev.Error):
            self._end(e.rid)
            self.errors += 1
        elif isinstance(e, ev.ParityVerdict):
            self.parity[e.verdict] += 1
            self.parity["pending"] = max(0, self.parity["pending"] - 1)
            verdict: dict[str, Any] = {"id": e.rid, "verdict": e.verdict}
            if e.index is not None:
                verdict["index"] = e.index
            self._verdicts.append(verdict)

    def _on_step(self, e: ev.Step) -> None:
        if e.verify:
            return  # solo re-runs are not client batches
        t = session_t(e.t, self.start_t)
        self._steps.append([round(t, 4), e.m, round_ms(e.ms)])
        self.batch_hist[e.m] = self.batch_hist.get(e.m, 0) + 1
        for slot in e.slots:  # one token per row
            rid = self._by_slot.get(slot)
            if rid in self.rows:
                self.rows[rid].m = e.m
                self._count_token(self.rows[rid], t)

    def _count_token(self, row: _SlotRow, t: float) -> None:
        row.state, row.tokens = "decode", row.tokens + 1
        row.first_t = t if row.first_t is None else row.first_t
        self._token_times.append(t)
        while self._token_times[0] <= t - RATE_WINDOW_S:  # bounded even when no frame is asked for
            self._token_times.popleft()

    def _end(self, rid: str) -> None:
        self.queue.discard(rid)
        self._prompt_len.pop(rid, None)
        row = self.rows.pop(rid, None)
        if row is not None and self._by_slot.get(row.slot) == rid:
            del self._by_slot[row.slot]

    @property
    def active(self) -> int:
        return len(self.rows)

    def frame(self, now: float) -> dict[str, Any]:
        """One `stats` frame (docs/protocol.md); `steps` and `verdicts` cover the time since the last frame."""
        frame = self.snapshot(now)
        frame["steps"], frame["verdicts"] = list(self._steps), list(self._verdicts)
        self._steps.clear()
        self._verdicts.clear()
        return frame

    def snapshot(self, now: float) -> dict[str, Any]:
        """The frame as of `now` with empty `steps` / `verdicts`, leaving those for the next `frame` (a new
        subscriber's first frame: the next broadcast, and the recording, still get every step)."""
        t = session_t(now, self.start_t)
        while self._token_times and self._token_times[0] <= t - RATE_WINDOW_S:
            self._token_times.popleft()
        ttfts = list(self._ttfts)
        return {
            "op": "stats",
            "t": round(t, 4),
            **self.identity,
            "slots": [self._row_json(r, t) for r in sorted(self.rows.values(), key=lambda r: r.slot)],
            "steps": [],
            "agg_tok_s": round(len(self._token_times) / RATE_WINDOW_S, 2),
            "queue": len(self.queue),
            "active": self.active,
            "requests_done": self.requests_done,
            "errors": self.errors,
            "ttft_ms": {
                "last": round(ttfts[-1], 3) if ttfts else None,
                "p50": round(statistics.median(ttfts), 3) if ttfts else None,
            },
            "batch_hist": {str(m): n for m, n in sorted(self.batch_hist.items())},
            "parity": dict(self.parity),
            "verdicts": [],
        }

    @staticmethod
    def _row_json(r: _SlotRow, t: float) -> dict[str, Any]:
        span = t - r.first_t if r.first_t is not None else 0.0
        tok_s = (r.tokens - 1) / span if r.tokens > 1 and span > 0 else 0.0
        return {
            "slot": r.slot, "id": r.rid, "state": r.state, "tokens": r.tokens,
            "prompt_tokens": r.prompt_tokens, "tok_s": round(tok_s, 2), "m": r.m, "parity": None,
        }  # fmt: skip
