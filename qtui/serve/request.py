"""Per-request state: one `Request` object with a status enum, and the validated generation parameters.

The scheduler owns every `Request`; the server only builds `GenerateParams` + prompt tokens and reads the
events the scheduler emits. Slot ids are engine slot ids (DESIGN invariant 2: state is indexed by slot).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

from qtui.engine.sampling import GREEDY, Choice, SamplingParams, sampling_to_json


class Status(enum.Enum):
    WAITING = "waiting"  # in the bounded wait queue, no slot yet
    PREFILL = "prefill"  # has a slot, prompt partly fed (chunked prefill)
    DECODE = "decode"  # prompt fed; one token per step
    FINISHED = "finished"  # done, cancelled or errored; slot returned


class Detokenizer(Protocol):
    """`qtui.model.tokenizer.IncrementalDetokenizer`'s surface: text completed by each token, never half a
    UTF-8 character; `flush()` returns whatever is still held back."""

    def push(self, token_id: int) -> str: ...

    def flush(self) -> str: ...


class TextCodec(Protocol):
    """What the scheduler needs of a tokenizer: the EOS set and a fresh incremental detokenizer per request."""

    eos_token_ids: frozenset[int]

    def new_detokenizer(self) -> Detokenizer: ...


@dataclass(frozen=True, slots=True)
class GenerateParams:
    max_tokens: int = 128  # requested reply length; capped by the context left after the prompt
    stop: tuple[str, ...] = ()  # stop strings, matched on the detokenized text and trimmed from it
    ignore_eos: bool = False
    sampling: SamplingParams = GREEDY
    prompt_logprobs: bool = False  # score every prompt token after the first (echo with logprobs)

    def __post_init__(self) -> None:
        assert self.max_tokens >= 1
        assert all(isinstance(s, str) and s for s in self.stop)

    @property
    def wants_choices(self) -> bool:
        """The engine must return logprobs for this request (`*_choices` calls)."""
        return self.sampling.logprobs is not None or self.prompt_logprobs

    def to_json(self) -> dict[str, object]:
        """The `generate` fields that reproduce this request (greedy ones: exactly the protocol v1 basics)."""
        out: dict[str, object] = {"max_tokens": self.max_tokens, "stop": list(self.stop), "ignore_eos": self.ignore_eos}
        out.update(sampling_to_json(self.sampling))
        if self.prompt_logprobs:
            out["prompt_logprobs"] = True
        return out


@dataclass(slots=True, eq=False)
class Request:
    rid: str  # server-wide id, e.g. "c3:r1" (connection 3, client id "r1")
    prompt: list[int]
    params: GenerateParams
    arrival_t: float  # clock seconds when the server received it (TTFT counts from here)
    is_verification: bool = False  # a --verify-parity solo re-run of a finished request
    status: Status = Status.WAITING
    slot: int | None = None
    num_prefilled: int = 0  # prompt tokens fed to the slot so far
    max_tokens: int = 0  # effective limit: min(params.max_tokens, max_context - len(prompt)); set on submit
    tokens: list[int] = field(default_factory=list)  # generated token ids (EOS included when it ends the reply)
    text: str = ""  # detokenized reply so far (stop string trimmed at the end)
    num_emitted_chars: int = 0  # len of text already sent in token events (the rest is held back)
    detok: Detokenizer | None = None
    first_token_t: float | None = None
    max_m: int = 0  # the largest decode batch this request took part in (0: never decoded, 1-token reply)
    turn: int = -1  # when a decode step last held it, in the scheduler's count of rows run (-1: none yet)
    finish_reason: str | None = None
    prompt_choices: list[Choice] = field(default_factory=list)  # prompt logprobs so far (prompt_logprobs only)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt)

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED
