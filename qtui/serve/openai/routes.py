"""The OpenAI-compatible routes: request body -> n scheduler requests -> JSON body or server-sent events.

Each choice is a request of its own (seed `derive_seed(seed, index)`), so choices batch with everything else
and each equals the same request served alone. Errors leave as `ApiError` in OpenAI's shape.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from qtui.engine.sampling import MASK64, Choice, SamplingParams, derive_seed
from qtui.errors import InvalidParameter, QtuiError
from qtui.serve import events as ev
from qtui.serve.auth import is_authorized
from qtui.serve.openai.render import TokenText, chat_logprobs, completion_logprobs, sse, usage
from qtui.serve.openai.run import EventStream, Job, Run
from qtui.serve.openai.schemas import ApiError, ChatCompletionRequest, CompletionRequest, validation_error
from qtui.serve.request import GenerateParams

if TYPE_CHECKING:
    from qtui.serve.server import QtuiServer


class ClientGone(Exception):
    """The client disconnected before its reply: its requests are cancelled and nothing is sent."""


DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default for /v1/completions
STATUS_OF_CODE = {"overloaded": 429, "shutting_down": 503, "engine_failed": 503, "prompt_too_long": 400,
                  "bad_request": 400}  # fmt: skip


@dataclass(slots=True)
class Call:
    """What one HTTP call asked and what its choices got so far."""

    kind: str  # "text_completion" | "chat.completion"
    model: str
    seed: int | None
    fingerprint: str
    prompt_tokens: list[int]  # per choice
    echo_text: list[str]  # per choice: prompt text to put first ("" unless echo)
    echo_tokens: list[list[int]]  # per choice: prompt ids for echo logprobs ([] unless echo with logprobs)
    hide_generated: bool = False  # max_tokens 0 with echo: one token is computed, none is returned
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))

    def envelope(self, obj: str) -> dict[str, Any]:
        prefix = "cmpl-" if self.kind == "text_completion" else "chatcmpl-"
        out: dict[str, Any] = {"id": prefix + self.id, "object": obj, "created": self.created, "model": self.model,
                               "system_fingerprint": self.fingerprint}  # fmt: skip
        if self.seed is not None:
            out["seed"] = self.seed
        return out


@dataclass(slots=True)
class Got:
    """One choice's reply as it arrives."""

    text: str = ""
    tokens: list[tuple[int, Choice | None]] = field(default_factory=list)
    prompt: tuple[Choice, ...] = ()
    done: ev.Done | None = None

    def add(self, e: ev.Token) -> None:
        self.text += e.text
        self.tokens.append((e.token, e.choice))
        if e.prompt is not None:
            self.prompt = e.prompt


def routes(srv: QtuiServer) -> list[Route]:
    async def models(request: Request) -> Response:
        _authorize(srv, request)
        card = {"id": _model_id(srv), "object": "model", "created": int(srv.start_t), "owned_by": "qtui",
                "max_model_len": srv.engine.max_context}  # fmt: skip
        return JSONResponse({"object": "list", "data": [card]})

    async def completions(request: Request) -> Response | EventStream:
        _authorize(srv, request)
        body = await _parse(request, CompletionRequest)
        return await _serve(srv, request, body, *await _completion_jobs(srv, body))

    async def chat(request: Request) -> Response | EventStream:
        _authorize(srv, request)
        body = await _parse(request, ChatCompletionRequest)
        return await _serve(srv, request, body, *await _chat_jobs(srv, body))

    return [Route("/v1/models", models), Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", chat, methods=["POST"])]  # fmt: skip


# ---- checks ----------------------------------------------------------------------------------------------


def _authorize(srv: QtuiServer, request: Request) -> None:
    key = srv.settings.api_key
    if key and not is_authorized(request.headers, request.query_params, key):
        raise ApiError(401, "missing or wrong API key (Authorization: Bearer KEY)", code="invalid_api_key")


async def _parse(request: Request, model: type[BaseModel]) -> Any:
    try:
        raw = await request.body()
        if len(raw) > request.app.state.max_body:
            raise ApiError(413, f"request body of {len(raw)} bytes is over the limit", code="request_too_large")
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise validation_error(exc) from None


def _model_id(srv: QtuiServer) -> str:
    return str(srv.identity["model"])


def _check_model(srv: QtuiServer, name: str) -> None:
    served = _model_id(srv)
    if name not in (served, served.removesuffix(".gguf"), srv.model.path):
        raise ApiError(404, f"the model `{name}` does not exist: this server serves `{served}`", param="model",
                       code="model_not_found")  # fmt: skip


# ---- body -> scheduler requests --------------------------------------------------------------------------


def _sampling(body: Any, n_logprobs: int | None) -> SamplingParams:
    temperature = 1.0 if body.temperature is None else body.temperature
    if not 0 <= temperature <= 2:
        raise ApiError(400, "`temperature` must be in [0, 2]", param="temperature")
    fields = {k: getattr(body, k) for k in ("top_p", "min_p", "presence_penalty", "frequency_penalty",
                                            "repetition_penalty") if getattr(body, k) is not None}  # fmt: skip
    seed = secrets.randbits(63) if body.seed is None else body.seed & MASK64
    try:
        return SamplingParams(temperature=temperature, top_k=max(body.top_k or 0, 0), seed=seed,
                              logprobs=n_logprobs, **fields)  # fmt: skip
    except InvalidParameter as exc:
        raise ApiError(400, exc.message, param=exc.param) from None


def _jobs(srv: QtuiServer, body: Any, prompts: list[list[int]], max_tokens: int, sampling: SamplingParams,
          prompt_logprobs: bool) -> list[Job]:  # fmt: skip
    if srv.is_draining:
        raise ApiError(503, "server is draining: not admitting new requests", type="server_error",
                       code="shutting_down")  # fmt: skip
    if (failure := srv.scheduler.failure) is not None:  # fail fast: the engine will never run it
        raise ApiError(503, failure.message, type="server_error", code=failure.code)
    limit = srv.engine.max_context
    if max_tokens > limit:
        raise ApiError(400, f"max_tokens {max_tokens} is over the context of {limit} tokens", param="max_tokens")
    for tokens in prompts:
        if not tokens or len(tokens) > limit - 1:
            raise ApiError(400, f"the prompt has {len(tokens)} tokens; this model's context of {limit} tokens holds "
                           f"at most {limit - 1} prompt tokens", code="context_length_exceeded")  # fmt: skip
    stop = body.stop_strings()
    jobs = []
    for tokens in prompts:
        for i in range(body.n):
            s = sampling if i == 0 else _with_seed(sampling, derive_seed(sampling.seed, i))
            jobs.append((tokens, GenerateParams(max_tokens=max(max_tokens, 1), stop=stop, ignore_eos=body.ignore_eos,
                                                sampling=s, prompt_logprobs=prompt_logprobs)))  # fmt: skip
    return jobs


def _with_seed(p: SamplingParams, seed: int) -> SamplingParams:
    import dataclasses

    return dataclasses.replace(p, seed=seed)


def _prompt_batch(raw: str | list[str] | list[int] | list[list[int]]) -> list[str | list[int]]:
    """The `prompt` field as a batch: a string or one list of token ids is a batch of one. Pydantic has checked
    that a list holds one kind (str, int or list[int]), which is what the casts state."""
    if isinstance(raw, str):
        return [raw]
    if raw and all(isinstance(x, int) for x in raw):
        return [cast(list[int], raw)]
    return cast(list[str | list[int]], raw)


async def _completion_jobs(srv: QtuiServer, body: CompletionRequest) -> tuple[Call, list[Job]]:
    _check_model(srv, body.model)
    prompts = [list(p) if isinstance(p, list) else await srv.tokenize(p) for p in _prompt_batch(body.prompt)]
    if any(not 0 <= t < srv.n_vocab for p in prompts for t in p):
        raise ApiError(400, f"prompt token ids must be in [0, {srv.n_vocab})", param="prompt")
    max_tokens = DEFAULT_COMPLETION_TOKENS if body.max_tokens is None else body.max_tokens
    if max_tokens == 0 and not body.echo:
        raise ApiError(400, "max_tokens 0 needs echo (scoring the prompt)", param="max_tokens")
    sampling = _sampling(body, body.logprobs)
    wants_prompt = body.echo and body.logprobs is not None
    jobs = _jobs(srv, body, prompts, max_tokens, sampling, wants_prompt)
    texts = [srv.tokenizer.decode(p) if body.echo else "" for p in prompts for _ in range(body.n)]
    call = Call(
        "text_completion",
        body.model,
        _reported_seed(body, sampling),
        _fingerprint(srv),
        [len(p) for p in prompts for _ in range(body.n)],
        texts,
        [p if wants_prompt else [] for p in prompts for _ in range(body.n)],
        hide_generated=max_tokens == 0,
    )
    return call, jobs


async def _chat_jobs(srv: QtuiServer, body: ChatCompletionRequest) -> tuple[Call, list[Job]]:
    _check_model(srv, body.model)
    messages = [{"role": m.role, "content": m.text()} for m in body.messages]
    try:
        prompt = await srv.tokenize(None, messages)
    except QtuiError as exc:
        raise ApiError(400, f"cannot render the chat template: {exc.message}", param="messages") from None
    max_tokens = body.max_completion_tokens or body.max_tokens or srv.engine.max_context
    if max_tokens == 0:
        raise ApiError(400, "max_tokens must be at least 1", param="max_tokens")
    n_logprobs = (body.top_logprobs or 0) if body.logprobs else None
    sampling = _sampling(body, n_logprobs)
    jobs = _jobs(srv, body, [prompt], min(max_tokens, srv.engine.max_context), sampling, False)
    call = Call("chat.completion", body.model, _reported_seed(body, sampling), _fingerprint(srv),
                [len(prompt)] * body.n, [""] * body.n, [[]] * body.n)  # fmt: skip
    return call, jobs


def _reported_seed(body: Any, sampling: SamplingParams) -> int | None:
    return None if sampling.is_greedy else sampling.seed


def _fingerprint(srv: QtuiServer) -> str:
    return f"qtui-{(srv.commit or 'unknown')[:12]}-{srv.engine.name}"


# ---- running ---------------------------------------------------------------------------------------------


async def _serve(srv: QtuiServer, request: Request, body: Any, call: Call, jobs: list[Job]) -> Response | EventStream:
    run = Run(srv, jobs)
    first = await _first(run, request)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return EventStream(run, _stream(run, call, first, include_usage, TokenText(srv.tokenizer)))
    got = [Got() for _ in jobs]
    received: tuple[int, Any] | None = first
    while received is not None:
        _fold(run, got, received)
        received = await _next_or_gone(run, request) if run.open else None
    return JSONResponse(_body(call, got, TokenText(srv.tokenizer)))


async def _first(run: Run, request: Request) -> tuple[int, Any]:
    """The first event; an error at admission (overloaded, draining, ...) becomes the HTTP status."""
    received = await _next_or_gone(run, request)
    index, e = received
    if isinstance(e, ev.Error):
        run.cancel()
        raise ApiError(STATUS_OF_CODE.get(e.code, 500), e.message, type=_error_type(e.code), code=e.code)
    return received


async def _next_or_gone(run: Run, request: Request) -> tuple[int, Any]:
    watcher = asyncio.create_task(run.watch(request.receive))
    try:
        received = await run.next()
    finally:
        watcher.cancel()
    if received[1] is None:
        raise ClientGone
    return received


def _error_type(code: str) -> str:
    return "invalid_request_error" if STATUS_OF_CODE.get(code, 500) == 400 else "server_error"


def _fold(run: Run, got: list[Got], received: tuple[int, Any]) -> None:
    index, e = received
    if isinstance(e, ev.Token):
        got[index].add(e)
    elif isinstance(e, ev.Done):
        got[index].done = e
    elif isinstance(e, ev.Error):
        run.cancel()
        raise ApiError(STATUS_OF_CODE.get(e.code, 500), e.message, type=_error_type(e.code), code=e.code)


def _body(call: Call, got: list[Got], tt: TokenText) -> dict[str, Any]:
    choices = [_choice(call, i, g, tt) for i, g in enumerate(got)]
    n_prompt = sum(call.prompt_tokens)  # every choice is a request of its own
    n_generated = 0 if call.hide_generated else sum(len(g.tokens) for g in got)
    return {**call.envelope(call.kind), "choices": choices, "usage": usage(n_prompt, n_generated)}


def _choice(call: Call, i: int, g: Got, tt: TokenText) -> dict[str, Any]:
    assert g.done is not None
    tokens = [] if call.hide_generated else g.tokens
    text = "" if call.hide_generated else g.text
    reason = g.done.finish_reason
    if call.kind == "chat.completion":
        lp = chat_logprobs([c for _, c in tokens if c is not None], tt) if any(c for _, c in tokens) else None
        return {"index": i, "message": {"role": "assistant", "content": text}, "logprobs": lp,
                "finish_reason": reason}  # fmt: skip
    lp = None
    if tokens and tokens[0][1] is not None or call.echo_tokens[i]:
        lp = completion_logprobs(_echo_entries(call, i, g) + tokens, tt, 0)
    return {"index": i, "text": call.echo_text[i] + text, "logprobs": lp, "finish_reason": reason}


def _echo_entries(call: Call, i: int, g: Got) -> list[tuple[int, Choice | None]]:
    prompt = call.echo_tokens[i]
    if not prompt:
        return []
    return [(prompt[0], None), *zip(prompt[1:], g.prompt)]


async def _stream(run: Run, call: Call, first: tuple[int, Any], include_usage: bool,
                  tt: TokenText) -> AsyncGenerator[str, None]:  # fmt: skip
    got = [Got() for _ in call.prompt_tokens]
    chat = call.kind == "chat.completion"
    obj = "chat.completion.chunk" if chat else "text_completion"
    started: set[int] = set()
    received: tuple[int, Any] | None = first
    while received is not None:
        index, e = received
        if e is None:
            return
        if isinstance(e, ev.Error):
            run.cancel()
            yield sse(
                ApiError(STATUS_OF_CODE.get(e.code, 500), e.message, type=_error_type(e.code), code=e.code).body()
            )
            return
        piece = _stream_piece(call, index, e, got[index], started, tt) if isinstance(e, ev.Token) else None
        reason = e.finish_reason if isinstance(e, ev.Done) else None
        if isinstance(e, ev.Done):
            got[index].done = e
        if piece is not None or reason is not None:
            delta_text, lp = piece or ("", None)
            if chat:
                delta = {} if piece is None else {"content": delta_text}
                if piece is not None and len(got[index].tokens) == 1:
                    delta = {"role": "assistant", **delta}
                choice = {"index": index, "delta": delta, "logprobs": lp, "finish_reason": reason}
            else:
                choice = {"index": index, "text": delta_text, "logprobs": lp, "finish_reason": reason}
            yield sse({**call.envelope(obj), "choices": [choice]})
        received = await run.next() if run.open else None
    if include_usage:
        n_generated = 0 if call.hide_generated else sum(len(g.tokens) for g in got)
        yield sse({**call.envelope(obj), "choices": [], "usage": usage(sum(call.prompt_tokens), n_generated)})
    yield sse("[DONE]")


def _stream_piece(call: Call, index: int, e: ev.Token, g: Got, started: set[int],
                  tt: TokenText) -> tuple[str, Any] | None:  # fmt: skip
    """(text, logprobs) to send for one token, or None when nothing is to be sent for it."""
    g.add(e)
    first = index not in started
    started.add(index)
    if call.kind == "chat.completion":
        lp = chat_logprobs([e.choice], tt) if e.choice is not None else None
        return (e.text, lp) if (e.text or lp or first) else None
    entries: list[tuple[int, Choice | None]] = _echo_entries(call, index, g) if first else []
    text = call.echo_text[index] if first else ""
    if not call.hide_generated:
        text += e.text
        entries.append((e.token, e.choice))
    has_lp = e.choice is not None or bool(call.echo_tokens[index])
    lp = completion_logprobs(entries, tt, 0) if has_lp and entries else None
    return (text, lp) if (text or lp) else None
