"""The Sans-I/O continuous-batching scheduler: `submit / cancel / step() -> events`, no threads, no sockets.

One `step()` = admit waiting requests into free slots, feed prompt tokens to the prefilling requests, at most
`max_prefill_tokens` of them per step across all requests (a token budget, as vLLM's chunked prefill: a long
prompt arriving while many slots decode costs them one bounded chunk per step, never a frozen stream; in a step
where requests decode the budget is `max_mixed_prefill_tokens`, smaller on CUDA, so that step costs about two
plain ones; by default that many per `describe()["decode_pass_rows"]` rows the step decodes where the engine states
its pass, since a decode step of two passes costs about twice one), then
ONE `engine.decode(slots, tokens)` for every request in decode state (several calls of at most
`engine.max_rows` rows each when more slots decode, each reported as its own `Step` with the m the engine ran).
The budget goes to prefilling requests in admission order (first come, first served; a request that cannot use
what is left does not block a later one that can). A piece that does not finish its prompt is a whole number
of the engine's prefill chunks, so the engine runs full chunks (results do not depend on it: state is per
slot and chunking is bitwise invisible, DESIGN invariant 7). Requests join and leave only at step boundaries.
With an engine that queues decode steps ahead (`decode_ahead`: the CUDA engine's `decode_submit` /
`decode_collect`), a step whose rows want no logprobs (greedy or sampled) and fit one engine call is submitted
BEFORE the previous one is read: the GPU runs step N + 1 while this thread turns step N's tokens into events and
the server streams them. A row whose last token is still in flight feeds None (the engine takes it on the device);
a request that will reach max_tokens with its in-flight token is left out; one that stops on EOS, a stop string or
a cancel while a step for it is in flight is freed at once and that step's token for it dropped (its slot's next
owner zeroes the state in stream order). Any other decode first collects the step in flight.
Rows a step (`step_rows="fastest"`, the default): an engine's decode step runs in passes of
`describe()["decode_pass_rows"]` rows, and a last pass mostly empty costs nearly a full one (the 4b on an H100: 96
rows 10.6 ms, 64 rows 6.59). Where more requests decode than whole passes hold and the engine's own step times
(`decode_ms`, measured on the device) say whole passes alone give more tokens a second, a step runs the whole
passes and leaves the rest out, those decoded longest ago first, so every request still gets most steps
(96 requests: two in three). Which rows share a step never changes a reply (batch invariance), only its pace.
With `verify_parity`, an idle scheduler re-runs each finished request alone in a fresh slot and reports
whether its tokens match.

It knows the engine only through `BatchEngine` (qtui/engine/base.py). Invariant (checked by
`check_integrity`): engine free slots + slots held here == max_slots.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from qtui.engine.base import AheadEngine, BatchEngine, BatchPrefillEngine, TimedEngine
from qtui.engine.sampling import GREEDY, Choice
from qtui.errors import EngineError, EngineFailed, Overloaded, PromptTooLong, ShuttingDown
from qtui.serve import events as ev
from qtui.serve.reply import accept_token, first_divergence
from qtui.serve.request import GenerateParams, Request, Status, TextCodec

MAX_PENDING_VERIFICATIONS = 4096  # beyond this (a server never idle), finished requests are not re-run
DEFAULT_MAX_PREFILL_TOKENS = 256  # the budget for an engine that states no prefill chunk (numpy, fakes)
STEP_ROWS = ("fastest", "all")  # rows a step: whole passes where faster (module doc), or every decoding request


def whole_passes(n: int, pass_rows: int, max_rows: int) -> int:
    """The rows of a step of n decoding requests without its last, part-filled pass of `pass_rows`; n where there
    is none (no pass stated, n fits one pass or fills its passes, or n needs several engine calls of `max_rows`)."""
    if pass_rows <= 0 or n <= pass_rows or n > max_rows:
        return n
    return n - n % pass_rows


@dataclass
class _InFlight:
    """A decode step submitted to an engine that queues ahead, not yet collected."""

    handle: Any  # the engine's
    reqs: list[Request]  # one per row
    t0: float  # perf_counter at its submit


class Scheduler:
    def __init__(
        self,
        engine: BatchEngine,
        codec: TextCodec,
        *,
        queue_size: int = 256,
        max_prefill_tokens: int | None = None,
        max_mixed_prefill_tokens: int | None = None,
        verify_parity: bool = False,
        step_rows: str = "fastest",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`max_prefill_tokens`: prompt tokens per step over all requests (default: the engine's
        `describe()["prefill_chunk"]`, else DEFAULT_MAX_PREFILL_TOKENS); `max_mixed_prefill_tokens`: the same in a
        step where requests decode (default: the engine's `describe()["mixed_prefill_chunk"]` per
        `describe()["decode_pass_rows"]` rows decoding, else the first; never more than it); `step_rows`: one of
        STEP_ROWS (module doc)."""
        described = engine.describe()
        engine_chunk = described.get("prefill_chunk")  # None: the engine has no preferred chunk
        budget = max_prefill_tokens or int(engine_chunk or DEFAULT_MAX_PREFILL_TOKENS)
        mixed = min(budget, max_mixed_prefill_tokens or int(described.get("mixed_prefill_chunk") or budget))
        assert queue_size >= 1 and budget >= 1
        assert step_rows in STEP_ROWS, f"step_rows {step_rows!r}: one of {STEP_ROWS}"
        self.engine = engine
        self.codec = codec
        self.max_slots = engine.max_slots  # requests holding state at once
        self.max_rows = engine.max_rows  # rows one engine decode call may hold
        self.max_context = engine.max_context
        self.queue_size = queue_size
        self.max_prefill_tokens = budget
        self.max_mixed_prefill_tokens = mixed
        # the default mixed budget grows with the decode step's passes (a 128-row CUDA step: 128 prompt tokens), so
        # admission keeps pace with a large batch while a mixed step still costs ~2x a plain one
        self.decode_pass_rows = int(described.get("decode_pass_rows") or 0)  # 0: the engine states no pass
        self._mixed_pass_rows = 0 if max_mixed_prefill_tokens else self.decode_pass_rows
        self.step_rows = step_rows
        self._decode_ms = engine.decode_ms if isinstance(engine, TimedEngine) else None
        self._turns = 0  # decode rows formed (Request.turn): the rows a step leaves out are the longest unheld
        # partial pieces are multiples of this, so every piece starts on an engine chunk boundary of the prompt
        self.prefill_align = min(int(engine_chunk), budget) if engine_chunk else 1
        self.verify_parity = verify_parity
        self.clock = clock
        self.is_draining = False
        self.failure: EngineFailed | None = None  # set by a fatal engine error: every later submit gets it
        self._waiting: deque[Request] = deque()
        self._running: dict[str, Request] = {}  # rid -> request holding a slot (admission order)
        self._to_verify: deque[Request] = deque()  # finished requests awaiting their solo re-run
        self._verifying: Request | None = None  # the solo re-run in flight
        self.decode_ahead = bool(getattr(engine, "decode_ahead", False))  # submit before reading (module doc)
        self.batch_prefill = bool(getattr(engine, "batch_prefill", False))  # a step's pieces in one call (_prefill)
        self._in_flight: _InFlight | None = None

    # ---- queries -------------------------------------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_active(self) -> int:
        return len(self._running)

    @property
    def has_live(self) -> bool:
        """Client requests are waiting or running (verification re-runs don't count)."""
        return bool(self._waiting or self._running)

    @property
    def has_work(self) -> bool:
        return self.has_live or self._verifying is not None or bool(self._to_verify)

    @property
    def num_pending_verdicts(self) -> int:
        return len(self._to_verify) + (self._verifying is not None)

    def check_integrity(self) -> None:
        held = [r.slot for r in self._running.values()]
        if self._verifying is not None and self._verifying.slot is not None:
            held.append(self._verifying.slot)
        assert len(set(held)) == len(held), f"slot held twice: {held}"
        assert self.engine.num_free_slots() + len(held) == self.max_slots, (
            f"slot leak: free {self.engine.num_free_slots()} + held {len(held)} != {self.max_slots}"
        )
        assert all(r.status is Status.WAITING for r in self._waiting)

    # ---- inputs --------------------------------------------------------------------------------------------
    def submit(
        self, rid: str, prompt: list[int], params: GenerateParams, arrival_t: float | None = None
    ) -> list[ev.Event]:
        """Queue a request. Returns [Arrived] or [Arrived, Error] (prompt_too_long, overloaded, shutting_down)."""
        now = self.clock()
        # a prompt over the context never runs: its event (and recording line) carries its size, not a MiB of ids
        kept = list(prompt) if len(prompt) < self.max_context else None
        out: list[ev.Event] = [ev.Arrived(now, rid, kept, params.to_json(), len(prompt))]
        try:
            if self.failure is not None:
                raise self.failure
            if self.is_draining:
                raise ShuttingDown("server is draining: not admitting new requests")
            if not prompt:
                raise PromptTooLong("empty prompt: at least one token is needed")
            if len(prompt) > self.max_context - 1:
                raise PromptTooLong(
                    f"prompt has {len(prompt)} tokens; max_context {self.max_context} leaves room for at most "
                    f"{self.max_context - 1} prompt tokens plus one generated token"
                )
            if len(self._waiting) >= self.queue_size + self.engine.num_free_slots():  # free slots admit next step
                raise Overloaded(f"wait queue full ({self.queue_size} requests waiting for a slot)")
        except (EngineFailed, ShuttingDown, PromptTooLong, Overloaded) as exc:
            out.append(ev.Error(now, rid, exc.code, exc.message))
            return out
        req = Request(rid, list(prompt), params, now if arrival_t is None else arrival_t)
        req.max_tokens = min(params.max_tokens, self.max_context - len(prompt))
        self._waiting.append(req)
        return out

    def cancel(self, rid: str) -> list[ev.Event]:
        """Stop a live request (client cancel or disconnect): [Cancelled, Done(cancelled)], or [] if unknown."""
        req = self._running.get(rid) or next((r for r in self._waiting if r.rid == rid), None)
        if req is None:
            return []
        now = self.clock()
        self._retire(req)
        return [ev.Cancelled(now, rid), self._done_event(req, "cancelled", now)]

    def abort_all(self, code: str, message: str, call: str | None = None) -> list[ev.Event]:
        """Error every live request (drain timeout, engine failure) and drop pending verifications."""
        now = self.clock()
        out: list[ev.Event] = []
        self._in_flight = None  # its tokens are not read (after an engine failure they may never come)
        for req in [*self._running.values(), *self._waiting]:
            self._retire(req)
            out.append(ev.Error(now, req.rid, code, message, call))
        self._abort_verification()
        self._to_verify.clear()
        return out

    def engine_failed(self, exc: Exception) -> list[ev.Event]:
        """`step()` raised: error every live request with the engine's own code and failing call (`internal`
        for an exception that is not an `EngineError`). After a fatal one, every later submit is refused."""
        if isinstance(exc, EngineError):
            code, detail, call, is_fatal = exc.code, exc.message, exc.call, exc.is_fatal
        else:
            code, detail, call, is_fatal = "internal", f"{type(exc).__name__}: {exc}", None, False
        out = self.abort_all(code, f"engine step failed: {detail}", call)
        if is_fatal:
            self.failure = EngineFailed(f"the engine failed for good ({detail}); restart the server")
        return out

    # ---- the step ------------------------------------------------------------------------------------------
    def step(self) -> list[ev.Event]:
        """Admit → prefill up to the token budget → one batched decode. Then, if idle, one verification step."""
        out: list[ev.Event] = []
        if self.has_live and self._verifying is not None:
            self._abort_verification()  # client work comes first; the re-run restarts later from scratch
        self._admit(out)
        decoding = sum(r.status is Status.DECODE for r in self._running.values())  # rows this step also decodes
        budget = self.mixed_budget(self.rows_to_run(decoding)) if decoding else None  # by the rows that will run
        self._prefill(list(self._running.values()), out, budget)
        self._decode(self._step_rows([r for r in self._running.values() if r.status is Status.DECODE]), out)
        if not self.has_live and (self._verifying is not None or self._to_verify):
            self._collect(out)
            self._verify_step(out)
        return out

    @property
    def mixed_scales(self) -> bool:
        """True where the mixed budget is per decode pass (the engine's default), not a fixed bound."""
        return self._mixed_pass_rows > 0

    def mixed_budget(self, decoding: int) -> int:
        """Prompt tokens of a step where `decoding` rows also decode."""
        passes = -(-decoding // self._mixed_pass_rows) if self._mixed_pass_rows else 1
        return min(self.max_prefill_tokens, self.max_mixed_prefill_tokens * max(1, passes))

    def whole_passes(self, n: int) -> int:
        """The rows of a step of n decoding requests that leaves its last, part-filled pass out; n where there is
        none (n fits one pass, fills its passes, or needs several engine calls) or `step_rows` is "all"."""
        return n if self.step_rows == "all" else whole_passes(n, self.decode_pass_rows, self.max_rows)

    def rows_to_run(self, n: int) -> int:
        """The rows a step of n decoding requests runs: its whole passes where the engine's timed steps give them
        more rows per millisecond than all n (a size never timed runs once first, n before the whole passes), else n."""
        k = self.whole_passes(n)
        if k == n or self._decode_ms is None:
            return n
        ms_n, ms_k = self._decode_ms(n), self._decode_ms(k)
        return k if ms_n is not None and (ms_k is None or k / ms_k > n / ms_n) else n

    def _step_rows(self, reqs: list[Request]) -> list[Request]:
        """The decoding requests this step runs (module doc, "Rows a step"), in admission order."""
        n, k = len(reqs), self.rows_to_run(len(reqs))
        # the k held longest ago (never: admission order), each then queued behind the rest in that order, so
        # the rows left out take turns
        order = sorted(range(n), key=lambda i: (reqs[i].turn, i))[:k]
        for i in order:
            reqs[i].turn = self._turns
            self._turns += 1
        if k < n:
            keep = set(order)
            reqs = [r for i, r in enumerate(reqs) if i in keep]
        return reqs

    def _admit(self, out: list[ev.Event]) -> None:
        while self._waiting and self.engine.num_free_slots() > 0:
            req = self._waiting.popleft()
            slot = self._start(req)
            self._running[req.rid] = req
            out.append(ev.Admitted(self.clock(), req.rid, slot))

    def _start(self, req: Request) -> int:
        """Give `req` a slot (returned) and start its prefill."""
        slot = req.slot = self.engine.alloc_slot()
        req.status = Status.PREFILL
        req.detok = self.codec.new_detokenizer()
        return slot

    def _prefill(self, reqs: list[Request], out: list[ev.Event], budget: int | None = None) -> None:
        """Feed up to `budget` (default `max_prefill_tokens`) prompt tokens in all, to `reqs` in order (admission
        order). With an engine that batches prefill (`prefill_batch`), the pieces that want no logprobs go in one
        call, so a step's cost follows its tokens, not its number of prompts (64 one-token prompts: one step)."""
        budget = budget or self.max_prefill_tokens
        align = min(self.prefill_align, budget)
        pieces: list[tuple[Request, list[int]]] = []
        for req in reqs:
            if budget == 0:
                break
            if req.status is not Status.PREFILL:
                continue
            start = req.num_prefilled
            n = min(len(req.prompt) - start, budget)
            if start + n < len(req.prompt):
                n -= n % align  # whole engine chunks (or budgets), except a prompt's last piece
            if n == 0:
                continue
            budget -= n
            pieces.append((req, req.prompt[start : start + n]))
        done = self._prefill_together([(r, c) for r, c in pieces if not r.params.wants_choices])
        for req, chunk in pieces:
            assert req.slot is not None
            choice: Choice | None = None
            if req.rid in done:
                nxt, ms = done[req.rid]
            else:
                t0 = time.perf_counter()
                nxt, choice = self._prefill_call(req, chunk, req.num_prefilled)
                ms = (time.perf_counter() - t0) * 1e3
            req.num_prefilled += len(chunk)
            if not req.is_verification:
                out.append(ev.Prefilled(self.clock(), req.rid, req.slot, len(chunk), ms))
            if req.num_prefilled == len(req.prompt):
                req.status = Status.DECODE
                self._accept(req, nxt, out, choice)

    def _prefill_together(self, pieces: list[tuple[Request, list[int]]]) -> dict[str, tuple[int, float]]:
        """Two or more pieces into one `prefill_batch` call where the engine has it: rid -> (the next token after
        the piece, the call's ms shared out by tokens); {} where it went piece by piece."""
        if not self.batch_prefill or len(pieces) < 2:
            return {}
        t0 = time.perf_counter()
        engine = cast(BatchPrefillEngine, self.engine)
        batch = [(cast(int, r.slot), c) for r, c in pieces]  # (admitted: each holds a slot)
        picked = engine.prefill_batch(batch, [r.params.sampling for r, _ in pieces])
        ms_per_token = (time.perf_counter() - t0) * 1e3 / sum(len(c) for _, c in pieces)
        return {r.rid: (t, ms_per_token * len(c)) for (r, c), t in zip(pieces, picked, strict=True)}

    def _prefill_call(self, req: Request, chunk: list[int], start: int) -> tuple[int, Choice | None]:
        """One prompt chunk into the engine: the plain greedy call unless the request samples or wants logprobs."""
        assert req.slot is not None
        sampling = req.params.sampling
        if not req.params.wants_choices:
            if sampling.is_greedy:
                return self.engine.prefill(req.slot, chunk), None
            return self.engine.prefill(req.slot, chunk, sampling), None
        targets: list[int | None] | None = None
        if req.params.prompt_logprobs:  # row i scores the prompt token after it (the last one: the sampled token)
            after = req.prompt[start + 1 : start + len(chunk) + 1]
            targets = [*after, *([None] * (len(chunk) - len(after)))]
        choices = self.engine.prefill_choices(req.slot, chunk, sampling, targets)
        if targets is not None:
            req.prompt_choices += choices[: len(chunk) - (targets[-1] is None)]
        return choices[-1].token, choices[-1]

    def _decode(self, reqs: list[Request], out: list[ev.Event], verify: bool = False) -> None:
        """One engine call per `max_rows` requests (in admission order), each its own Step; or one step queued
        ahead of the previous one's tokens (module doc)."""
        if self._goes_ahead(reqs, verify):
            self._decode_ahead(reqs, out)
            return
        if self._in_flight is not None:  # its tokens are this step's inputs: read them first
            self._collect(out)
            reqs = [r for r in reqs if r.status is Status.DECODE]
        for i in range(0, len(reqs), self.max_rows):
            self._decode_rows(reqs[i : i + self.max_rows], out, verify)

    def _goes_ahead(self, reqs: list[Request], verify: bool) -> bool:
        return (
            self.decode_ahead
            and not verify
            and 0 < len(reqs) <= self.max_rows
            and not any(r.params.wants_choices for r in reqs)
        )

    def _decode_ahead(self, reqs: list[Request], out: list[ev.Event]) -> None:
        """Submit this step, then read the one in flight (its requests' tokens and stops)."""
        prev = self._in_flight
        pending = {id(r) for r in prev.reqs} if prev is not None else set()
        # a request whose in-flight token is its last (max_tokens) gets no row
        rows = [r for r in reqs if len(r.tokens) + (id(r) in pending) < r.max_tokens]
        self._in_flight = None
        if rows:
            feed = [None if id(r) in pending else r.tokens[-1] for r in rows]
            t0 = time.perf_counter()
            sampling = [r.params.sampling for r in rows]
            greedy = all(p is GREEDY or p.is_greedy for p in sampling)
            slots = [cast(int, r.slot) for r in rows]
            handle = cast(AheadEngine, self.engine).decode_submit(slots, feed, None if greedy else sampling)
            self._in_flight = _InFlight(handle, rows, t0)
        if prev is not None:
            self._read(prev, out)

    def _collect(self, out: list[ev.Event]) -> None:
        """Read the step in flight, if any."""
        prev, self._in_flight = self._in_flight, None
        if prev is not None:
            self._read(prev, out)

    def _read(self, step: _InFlight, out: list[ev.Event]) -> None:
        produced = cast(AheadEngine, self.engine).decode_collect(step.handle)
        ms = (time.perf_counter() - step.t0) * 1e3
        kept = [(r, t, None) for r, t in zip(step.reqs, produced) if r.status is Status.DECODE]  # not stopped since
        if kept:
            self._step_tokens(len(step.reqs), ms, kept, out, False)

    def _step_tokens(self, m: int, ms: float, rows: Sequence[tuple[Request, int, Choice | None]], out: list[ev.Event],
                     verify: bool) -> None:  # fmt: skip
        """Accept one decode step's tokens (an engine call of m rows: `rows` its rows still decoding), then put its
        Step before them."""
        t_step = self.clock()  # one clock reading for the step's tokens: this loop runs per token
        pos = len(out)
        for req, tok, choice in rows:
            if req.max_m < m:
                req.max_m = m
            self._accept(req, tok, out, choice if req.params.sampling.logprobs is not None else None, t_step)
        # the Step goes before its tokens; queue/active as they stand after the step's retirements
        queue, active = len(self._waiting), len(self._running)
        slots = [cast(int, r.slot) for r, _, _ in rows]
        out.insert(pos, ev.Step(t_step, m, ms, slots, [t for _, t, _ in rows], queue, active, verify))

    def _decode_rows(self, reqs: list[Request], out: list[ev.Event], verify: bool) -> None:
        slots = cast(list[int], [r.slot for r in reqs])  # decoding requests hold a slot (no per-row check here)
        feed = [r.tokens[-1] for r in reqs]
        t0 = time.perf_counter()
        produced, choices = self._decode_call(reqs, slots, feed)
        ms = (time.perf_counter() - t0) * 1e3
        assert len(produced) == len(reqs)
        self._step_tokens(len(reqs), ms, list(zip(reqs, produced, choices)), out, verify)

    def _decode_call(
        self, reqs: list[Request], slots: list[int], feed: list[int]
    ) -> tuple[list[int], Sequence[Choice | None]]:
        """The batch's decode: the plain greedy call when every row is greedy without logprobs (today's path)."""
        sampling = [r.params.sampling for r in reqs]
        if any(p.logprobs is not None for p in sampling):
            choices = self.engine.decode_choices(slots, feed, sampling)
            return [c.token for c in choices], choices
        if all(p is GREEDY or p.is_greedy for p in sampling):  # `is GREEDY`: the WS default, no property call
            return self.engine.decode(slots, feed), [None] * len(reqs)
        return self.engine.decode(slots, feed, sampling), [None] * len(reqs)

    def _accept(self, req: Request, token: int, out: list[ev.Event], choice: Choice | None = None,
                now: float | None = None) -> None:  # fmt: skip
        if now is None:
            now = self.clock()
        if req.first_token_t is None:
            req.first_token_t = now
        piece, reason = accept_token(req, token, self.codec.eos_token_ids)
        if req.is_verification:
            if reason is not None:
                self._finish_verification(req, out)
            return
        prompt = tuple(req.prompt_choices) if req.params.prompt_logprobs and len(req.tokens) == 1 else None
        out.append(ev.Token(now, req.rid, len(req.tokens) - 1, token, piece, choice, prompt))
        if reason is not None:
            self._retire(req)
            out.append(self._done_event(req, reason, now))
            if self._will_verify(reason):
                self._to_verify.append(req)

    # ---- bookkeeping ---------------------------------------------------------------------------------------
    def _retire(self, req: Request) -> None:
        """Remove a request from the queue or its slot (freeing the slot) and mark it finished."""
        if req.status is Status.WAITING:
            self._waiting.remove(req)
        else:
            del self._running[req.rid]
            assert req.slot is not None
            self.engine.free_slot(req.slot)
        req.status = Status.FINISHED

    def _done_event(self, req: Request, reason: str, now: float) -> ev.Done:
        req.finish_reason = reason
        n = len(req.tokens)
        ttft = None if req.first_token_t is None else (req.first_token_t - req.arrival_t) * 1e3
        span = now - req.first_token_t if req.first_token_t is not None else 0.0
        tok_s = (n - 1) / span if n > 1 and span > 0 else 0.0
        parity = "pending" if self._will_verify(reason) else None
        return ev.Done(now, req.rid, req.slot, req.text, list(req.tokens), reason, len(req.prompt), ttft, tok_s,
                       req.max_m, parity)  # fmt: skip

    # ---- --verify-parity -----------------------------------------------------------------------------------
    def _will_verify(self, reason: str) -> bool:
        return self.verify_parity and reason in ("stop", "length") and len(self._to_verify) < MAX_PENDING_VERIFICATIONS

    def _verify_step(self, out: list[ev.Event]) -> None:
        if self._verifying is None:
            original = self._to_verify[0]
            rerun = Request(original.rid, original.prompt, original.params, self.clock(), is_verification=True)
            rerun.max_tokens = original.max_tokens
            self._start(rerun)
            self._verifying = rerun
        rerun = self._verifying
        if rerun.status is Status.PREFILL:
            self._prefill([rerun], out)
        elif rerun.status is Status.DECODE:
            self._decode([rerun], out, verify=True)

    def _finish_verification(self, rerun: Request, out: list[ev.Event]) -> None:
        original = self._to_verify.popleft()
        assert original.rid == rerun.rid and self._verifying is rerun
        assert rerun.slot is not None
        self.engine.free_slot(rerun.slot)
        rerun.status = Status.FINISHED
        self._verifying = None
        out.append(ev.ParityVerdict(self.clock(), rerun.rid, first_divergence(original.tokens, rerun.tokens)))

    def _abort_verification(self) -> None:
        """Drop the re-run in flight (its original stays at the head of `_to_verify` and is retried)."""
        rerun = self._verifying
        if rerun is not None:
            assert rerun.slot is not None
            self.engine.free_slot(rerun.slot)
            self._verifying = None
