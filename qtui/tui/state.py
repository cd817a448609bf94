"""What the dashboard shows, as plain data: `DashState` folds `stats` frames (docs/protocol.md) into the
latest values plus bounded histories. Pure Python, no Textual: the feeds fold frames into it and the widgets
only read it, so it is unit-testable and the display can be rebuilt at any point (replay seek)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

MAX_STEP_HISTORY = 2048  # batch sizes (m) of the most recent decode steps (the m sparkline shows bucket maxima)
MAX_RATE_HISTORY = 120  # aggregate tok/s, one sample per stats frame (~4/s -> ~30 s)
MAX_VERDICTS = 8  # most recent parity verdicts kept for display


@dataclass(slots=True)
class SlotView:
    """One busy slot as the stats frame reports it."""

    slot: int
    request_id: str
    state: str  # "prefill" | "decode"
    tokens: int  # completion tokens so far
    prompt_tokens: int
    tok_s: float  # this slot's decode rate, tokens/s
    m: int  # batch size of the step it was last decoded in (0 before its first decode step)
    parity: str | None  # None (not checked) | "pending" | "equal" | "diverged@N"

    @classmethod
    def from_frame(cls, d: dict[str, Any]) -> SlotView:
        return cls(
            slot=int(d["slot"]),
            request_id=str(d.get("id", "")),
            state=str(d.get("state", "decode")),
            tokens=int(d.get("tokens", 0)),
            prompt_tokens=int(d.get("prompt_tokens", 0)),
            tok_s=float(d.get("tok_s") or 0.0),
            m=int(d.get("m") or 0),
            parity=d.get("parity"),
        )


@dataclass
class DashState:
    """Latest values of the feed plus histories. `apply(frame)` is the only writer besides `clear_history`."""

    model: str = "?"
    engine: str = "?"
    device: str = "?"
    max_slots: int = 0
    t: float = 0.0  # seconds since server start, of the latest frame
    num_frames: int = 0
    slots: list[SlotView] = field(default_factory=list)
    agg_tok_s: float = 0.0
    queue: int = 0
    active: int = 0
    requests_done: int = 0
    errors: int = 0
    ttft_last_ms: float | None = None
    ttft_p50_ms: float | None = None
    batch_hist: dict[int, int] = field(default_factory=dict)  # m -> steps decoded at that m, since start
    parity: dict[str, int] = field(default_factory=lambda: {"equal": 0, "diverged": 0, "pending": 0})
    m_history: deque[int] = field(default_factory=lambda: deque(maxlen=MAX_STEP_HISTORY))
    step_ms_history: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_STEP_HISTORY))
    rate_history: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_RATE_HISTORY))
    verdicts: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_VERDICTS))
    # slot -> the last request that left it (state "idle"), so a verdict reached after `done` still shows.
    last_in_slot: dict[int, SlotView] = field(default_factory=dict)

    def apply(self, frame: dict[str, Any]) -> None:
        """Fold one `stats` frame in. Missing fields keep their previous value (frames from older servers)."""
        self.num_frames += 1
        self.set_identity(frame)
        self.t = float(frame.get("t", self.t))
        if "slots" in frame:
            self._update_slots([SlotView.from_frame(s) for s in frame["slots"]])
        self.agg_tok_s = float(frame.get("agg_tok_s", self.agg_tok_s) or 0.0)
        self.rate_history.append(self.agg_tok_s)
        for step in frame.get("steps", []):
            _t, m, ms = step
            self.m_history.append(int(m))
            self.step_ms_history.append(float(ms))
        self.queue = int(frame.get("queue", self.queue))
        self.active = int(frame.get("active", self.active))
        self.requests_done = int(frame.get("requests_done", self.requests_done))
        self.errors = int(frame.get("errors", self.errors))
        ttft = frame.get("ttft_ms") or {}
        self.ttft_last_ms = _opt_float(ttft.get("last", self.ttft_last_ms))
        self.ttft_p50_ms = _opt_float(ttft.get("p50", self.ttft_p50_ms))
        if "batch_hist" in frame:
            self.batch_hist = {int(m): int(n) for m, n in frame["batch_hist"].items()}
        if "parity" in frame:
            self.parity = {k: int(frame["parity"].get(k, 0)) for k in ("equal", "diverged", "pending")}
        for verdict in frame.get("verdicts", []):
            self._apply_verdict(verdict)

    def _update_slots(self, busy: list[SlotView]) -> None:
        busy_ids = {s.slot: s.request_id for s in busy}
        for old in self.slots:
            if busy_ids.get(old.slot) != old.request_id:  # that request left the slot since the last frame
                old.state = "idle"
                self.last_in_slot[old.slot] = old
        self.slots = sorted(busy, key=lambda s: s.slot)

    def _apply_verdict(self, verdict: dict[str, Any]) -> None:
        self.verdicts.append(verdict)
        text = verdict_text(verdict)
        for view in [*self.slots, *self.last_in_slot.values()]:
            if view.request_id == verdict.get("id"):
                view.parity = text

    def slot_rows(self) -> list[SlotView]:
        """One row per slot 0..max_slots-1 (busy, or idle showing the last request it held), plus any busy
        slot beyond max_slots. Idle slots that never held a request are left out when max_slots is unknown."""
        busy = {s.slot: s for s in self.slots}
        ids = sorted(set(range(self.max_slots)) | busy.keys() | self.last_in_slot.keys())
        rows = []
        for slot in ids:
            view = busy.get(slot) or self.last_in_slot.get(slot)
            rows.append(view or SlotView(slot, "", "idle", 0, 0, 0.0, 0, None))
        return rows

    def set_identity(self, info: dict[str, Any]) -> None:
        """Model / engine / device / max_slots from a `hello` frame or a recording's header (`max_batch`: the
        v1 name of max_slots, all that older servers and recordings carry)."""
        self.model = str(info.get("model", self.model))
        self.engine = str(info.get("engine", self.engine))
        self.device = str(info.get("device", self.device))
        self.max_slots = int(info.get("max_slots", info.get("max_batch", self.max_slots)))

    def clear_history(self) -> None:
        """Forget the sparkline histories and recent verdicts (the `c` key); the latest values stay."""
        self.m_history.clear()
        self.step_ms_history.clear()
        self.rate_history.clear()
        self.verdicts.clear()
        self.last_in_slot.clear()

    @property
    def mean_m(self) -> float:
        """Average batch size over all steps since server start (from the histogram)."""
        steps = sum(self.batch_hist.values())
        return sum(m * n for m, n in self.batch_hist.items()) / steps if steps else 0.0


def verdict_text(verdict: dict[str, Any]) -> str:
    """`{"verdict": "diverged", "index": 7}` -> "diverged@7"; "equal" / "pending" unchanged."""
    if verdict.get("verdict") == "diverged" and verdict.get("index") is not None:
        return f"diverged@{verdict['index']}"
    return str(verdict.get("verdict", "?"))


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def fold(frames: list[dict[str, Any]], identity: dict[str, Any] | None = None) -> DashState:
    """The state after applying `frames` in order to a fresh `DashState` (first `set_identity(identity)`)."""
    state = DashState()
    state.set_identity(identity or {})
    for frame in frames:
        state.apply(frame)
    return state
