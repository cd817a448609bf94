"""Recording lines <-> scheduler events: the one encode / decode pair (docs/protocol.md, "Recording format").

The recorder writes `encode(event)`; replay reads `decode(line)` and feeds the events to the same `StatsFeed`
the live server runs, so a replayed stats frame is the live one. Times on a line are session seconds
(`session_t`: seconds since the server started, rounded to the microsecond); the stats feed rounds its own
clock the same way, so live and replay see the same numbers. `Token` events are not recorded: every `step`
line carries the tokens it produced and the `done` line the whole reply.

`decode` is strict about what it needs and lenient about what it does not (older v1 recorders wrote no
`num_tokens`, no step `queue` / `active`); anything else wrong raises `RecordError` naming the field.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard, overload

from qtui.errors import BadRequest
from qtui.serve import events as ev

FORMAT = "qtui-recording"
VERSION = 1
RESERVED_PARAMS = frozenset({"op", "id", "tokens", "prompt", "messages"})  # never request parameters


class RecordError(BadRequest):
    """A recording line that cannot be turned back into an event (the message says which field)."""


@dataclass(frozen=True, slots=True)
class StatsLine:
    """A recorded `stats` frame and the session time it was sent at."""

    t: float
    frame: dict[str, Any]


Line = ev.Event | StatsLine


def session_t(t: float, start_t: float) -> float:
    """Scheduler clock -> session seconds, as written in a recording (microseconds: enough, and exact in JSON)."""
    return round(t - start_t, 6)


def round_ms(ms: float) -> float:
    return round(ms, 3)


# ---- encode -----------------------------------------------------------------------------------------------


def encode(e: ev.Event, start_t: float) -> dict[str, Any] | None:
    """One recording line for a scheduler event; None for `Token` (see the module docstring)."""
    if isinstance(e, ev.Token):
        return None
    return {"t": session_t(e.t, start_t), **_body(e)}


def encode_stats(frame: dict[str, Any], t: float, start_t: float) -> dict[str, Any]:
    return {"t": session_t(t, start_t), "ev": "stats", "frame": frame}


def _body(e: ev.Event) -> dict[str, Any]:
    if isinstance(e, ev.Arrived):  # tokens null: a prompt over the context, kept by its size only
        return {"ev": "arrival", "id": e.rid, "tokens": e.tokens, "num_tokens": e.num_tokens, "params": e.params}
    if isinstance(e, ev.Admitted):
        return {"ev": "admit", "id": e.rid, "slot": e.slot}
    if isinstance(e, ev.Prefilled):
        return {"ev": "prefill", "id": e.rid, "slot": e.slot, "n": e.n, "ms": round_ms(e.ms)}
    if isinstance(e, ev.Step):
        rec = {"ev": "step", "m": e.m, "ms": round_ms(e.ms), "slots": e.slots, "tokens": e.tokens,
               "queue": e.queue, "active": e.active}  # fmt: skip
        return {**rec, "verify": True} if e.verify else rec
    if isinstance(e, ev.Done):
        return {
            "ev": "done", "id": e.rid, "slot": e.slot, "tokens": e.tokens, "text": e.text,
            "finish_reason": e.finish_reason, "prompt_tokens": e.prompt_tokens,
            "ttft_ms": None if e.ttft_ms is None else round_ms(e.ttft_ms),
            "decode_tok_s": round(e.decode_tok_s, 2), "max_m": e.max_m, "parity": e.parity,
        }  # fmt: skip
    if isinstance(e, ev.Error):
        rec = {"ev": "error", "id": e.rid, "code": e.code, "message": e.message}
        return rec if e.call is None else {**rec, "call": e.call}
    if isinstance(e, ev.Cancelled):
        return {"ev": "cancel", "id": e.rid}
    if isinstance(e, ev.ParityVerdict):
        rec = {"ev": "parity", "id": e.rid, "verdict": e.verdict}
        return rec if e.index is None else {**rec, "index": e.index}
    raise AssertionError(f"unrecorded event type {type(e).__name__}")


# ---- decode -----------------------------------------------------------------------------------------------


def decode(rec: dict[str, Any]) -> Line:
    """The event (or stats frame) a recording line holds. Raises `RecordError` naming what is wrong."""
    kind = rec.get("ev")
    t = rec.get("t")
    if not isinstance(kind, str) or not _is_number(t):
        raise RecordError("not an event line: needs a numeric `t` and a string `ev`")
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise RecordError(f"unknown event kind {kind[:40]!r} (written by a newer recorder?)")
    return decoder(_Fields(rec, kind), float(t))


class _Fields:
    """Typed access to one line's fields; every failure names the kind and the field."""

    def __init__(self, rec: dict[str, Any], kind: str) -> None:
        self.rec, self.kind = rec, kind

    def fail(self, key: str, want: str) -> RecordError:
        return RecordError(f"{self.kind} line: `{key}` must be {want}")

    def get(self, key: str, want: type, default: Any = ..., nullable: bool = False) -> Any:
        if key not in self.rec:
            if default is ...:
                raise RecordError(f"{self.kind} line without `{key}`")
            return default
        value = self.rec[key]
        if value is None and nullable:
            return None
        ok = (
            _is_number(value)
            if want is float
            else isinstance(value, want) and not (want is int and isinstance(value, bool))
        )
        if not ok:
            raise self.fail(key, want.__name__ + (" or null" if nullable else ""))
        return float(value) if want is float else value

    @overload
    def ints(self, key: str, nullable: Literal[False] = False) -> list[int]: ...
    @overload
    def ints(self, key: str, nullable: bool) -> list[int] | None: ...
    def ints(self, key: str, nullable: bool = False) -> list[int] | None:
        value: list[int] | None = self.get(key, list, nullable=nullable)
        if value is not None and not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
            raise self.fail(key, "a list of integers")
        return value


def _is_number(x: Any) -> TypeGuard[float]:  # an int or a float, not a bool
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _arrival(f: _Fields, t: float) -> ev.Arrived:
    tokens = f.ints("tokens", nullable=True)
    num_tokens = f.get("num_tokens", int, None if tokens is None else len(tokens))
    if num_tokens is None:
        raise RecordError("arrival line: `tokens` is null and `num_tokens` is missing")
    params = f.get("params", dict, {})
    if any(not isinstance(k, str) or k in RESERVED_PARAMS for k in params):
        raise f.fail("params", f"an object of generation parameters (not {sorted(RESERVED_PARAMS)})")
    return ev.Arrived(t, f.get("id", str), tokens, params, num_tokens)


def _step(f: _Fields, t: float) -> ev.Step:
    slots, tokens = f.ints("slots"), f.ints("tokens", nullable=True) or []
    m = f.get("m", int)
    if m != len(slots):
        raise f.fail("m", f"the number of `slots` ({len(slots)})")
    return ev.Step(t, m, f.get("ms", float, 0.0), slots, tokens, f.get("queue", int, 0), f.get("active", int, 0),
                   bool(f.get("verify", bool, False)))  # fmt: skip


def _done(f: _Fields, t: float) -> ev.Done:
    tokens = f.ints("tokens")
    return ev.Done(t, f.get("id", str), f.get("slot", int, None, nullable=True), f.get("text", str, ""), tokens,
                   f.get("finish_reason", str), f.get("prompt_tokens", int, 0),
                   f.get("ttft_ms", float, None, nullable=True), f.get("decode_tok_s", float, 0.0),
                   f.get("max_m", int, 0), f.get("parity", str, None, nullable=True))  # fmt: skip


def _parity(f: _Fields, t: float) -> ev.ParityVerdict:
    verdict = f.get("verdict", str)
    index = f.get("index", int, None, nullable=True)
    if (verdict == "equal") != (index is None) or verdict not in ("equal", "diverged"):
        raise f.fail("verdict", '"equal" (no index) or "diverged" (with `index`)')
    return ev.ParityVerdict(t, f.get("id", str), index)


def _stats(f: _Fields, t: float) -> StatsLine:
    return StatsLine(t, f.get("frame", dict))


_DECODERS: dict[str, Callable[[_Fields, float], Line]] = {
    "arrival": _arrival,
    "admit": lambda f, t: ev.Admitted(t, f.get("id", str), f.get("slot", int)),
    "prefill": lambda f, t: ev.Prefilled(t, f.get("id", str), f.get("slot", int), f.get("n", int),
                                         f.get("ms", float, 0.0)),
    "step": _step,
    "done": _done,
    "error": lambda f, t: ev.Error(t, f.get("id", str), f.get("code", str), f.get("message", str, ""),
                                   f.get("call", str, None, nullable=True)),
    "cancel": lambda f, t: ev.Cancelled(t, f.get("id", str)),
    "parity": _parity,
    "stats": _stats,
}  # fmt: skip
