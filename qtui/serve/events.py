"""Typed events the scheduler emits: the one vocabulary the server, stats feed, metrics and recorder read
(records.py turns them into recording lines and back).

Every event carries `t`, the scheduler clock (seconds, `time.monotonic` in production). A request's life is
`Arrived` → (`Admitted` → `Prefilled`+ → `Token`+)? → exactly one `Done` or `Error`. Verification re-runs
(--verify-parity) emit nothing but `Step(verify=True)` and a final `ParityVerdict`.
"""

from __future__ import annotations

from dataclasses import dataclass

from qtui.engine.sampling import Choice


@dataclass(frozen=True, slots=True)
class Arrived:
    t: float
    rid: str
    tokens: list[int] | None  # the prompt; None for one over the context (rejected: kept by its size only)
    params: dict[str, object]  # GenerateParams.to_json()
    num_tokens: int  # prompt length


@dataclass(frozen=True, slots=True)
class Admitted:
    t: float
    rid: str
    slot: int


@dataclass(frozen=True, slots=True)
class Prefilled:
    t: float
    rid: str
    slot: int
    n: int  # prompt tokens fed in this chunk
    ms: float


@dataclass(slots=True)  # not frozen, but read-only as the others: one per generated token, and a frozen
class Token:  # dataclass's __init__ costs 3x (object.__setattr__ per field: 1.7 vs 0.5 us)
    t: float
    rid: str
    index: int  # 0-based position in the reply
    token: int
    text: str  # the text this token completes ("" while held back: partial UTF-8 or a possible stop string)
    choice: Choice | None = None  # logprobs of this token (requests that asked for them)
    prompt: tuple[Choice, ...] | None = None  # first token only, with prompt_logprobs: prompt tokens 1..n-1


@dataclass(frozen=True, slots=True)
class Done:
    t: float
    rid: str
    slot: int | None  # None when cancelled before admission
    text: str
    tokens: list[int]
    finish_reason: str  # "stop" | "length" | "cancelled"
    prompt_tokens: int
    ttft_ms: float | None
    decode_tok_s: float
    max_m: int
    parity: str | None  # None (not checked) or "pending" (a --verify-parity re-run is queued)


@dataclass(frozen=True, slots=True)
class Error:
    t: float
    rid: str
    code: str  # a qtui.errors code: prompt_too_long, overloaded, shutting_down, cuda_error, ...
    message: str
    call: str | None = None  # an engine failure: the call that failed (e.g. "cuLaunchKernel"), where known


@dataclass(frozen=True, slots=True)
class Cancelled:
    t: float
    rid: str


@dataclass(frozen=True, slots=True)
class Step:
    t: float
    m: int  # decode batch size formed
    ms: float  # wall time of the decode call
    slots: list[int]
    tokens: list[int]  # the tokens the step produced, in `slots` order
    queue: int  # requests waiting for a slot after this step
    active: int  # live requests holding a slot after this step
    verify: bool = False  # a --verify-parity solo re-run step (not a client batch)


@dataclass(frozen=True, slots=True)
class ParityVerdict:
    t: float
    rid: str
    index: int | None  # None: equal; else the first divergent token index

    @property
    def verdict(self) -> str:
        return "equal" if self.index is None else "diverged"

    @property
    def label(self) -> str:
        """The `parity` field value: "equal" or "diverged@N"."""
        return "equal" if self.index is None else f"diverged@{self.index}"


Event = Arrived | Admitted | Prefilled | Token | Done | Error | Cancelled | Step | ParityVerdict
