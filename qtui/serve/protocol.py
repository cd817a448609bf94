"""Protocol v1 frames (docs/protocol.md): parsing + validating client frames, building server frames.

`parse_client_frame` turns raw text into one typed message or raises `FrameRejected` carrying a typed
`RequestError` (its `.code` is the protocol error code) and the request id when one could be read.
"""

from __future__ import annotations

import dataclasses
import json
import json.encoder
import re
import secrets
from dataclasses import dataclass
from typing import Any, TypeGuard

from qtui.engine.sampling import SamplingParams
from qtui.errors import BadRequest, DuplicateId, InvalidParameter, MessageTooLarge, RequestError, UnknownOp
from qtui.serve import events as ev
from qtui.serve.request import GenerateParams

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 1 << 20  # frames above this get `message_too_large`
MAX_ID_CHARS = 128
MAX_STOP_STRINGS = 4
MAX_STOP_CHARS = 256
DEFAULT_MAX_TOKENS = 128
MAX_MESSAGES = 1024  # chat turns per `messages` request: bounds the template render, which runs in Python
# A `\udXXX` escape without its pair is legal JSON but no UTF-8 encoder takes it: a string holding one can be
# neither echoed to the client, nor shown to a subscriber, nor written to the recording.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_quote = json.encoder.encode_basestring  # a str as a JSON string literal, non-ASCII kept (as dumps does)


class FrameRejected(Exception):
    def __init__(self, error: RequestError, request_id: str | None) -> None:
        super().__init__(error.message)
        self.error = error
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class Generate:
    id: str
    params: GenerateParams
    prompt: str | None = None
    tokens: list[int] | None = None
    messages: list[dict[str, str]] | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    id: str


@dataclass(frozen=True, slots=True)
class Subscribe:
    pass


@dataclass(frozen=True, slots=True)
class Info:
    pass


ClientMessage = Generate | Cancel | Subscribe | Info


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def parse_client_frame(
    raw: str | bytes, *, max_context: int, n_vocab: int, max_bytes: int = MAX_MESSAGE_BYTES
) -> ClientMessage:
    """Validate one client frame. Raises `FrameRejected` (bad_request / unknown_op / message_too_large)."""
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > max_bytes:
        raise FrameRejected(MessageTooLarge(f"frame of {size} bytes exceeds the {max_bytes}-byte limit"), None)
    try:
        frame = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FrameRejected(BadRequest(f"invalid JSON: {exc}"), None) from None
    except RecursionError:  # the C parser recurses per nesting level: 100k `[` must not become a 1011 close
        raise FrameRejected(BadRequest("invalid JSON: nested too deeply"), None) from None
    if not isinstance(frame, dict):
        raise FrameRejected(BadRequest("a frame must be a JSON object"), None)
    rid = frame.get("id")
    rid = rid if _is_valid_id(rid) else None  # echo only an id that can be sent back
    try:
        return _parse_op(frame, max_context, n_vocab)
    except RequestError as exc:
        raise FrameRejected(exc, rid) from None


def _parse_op(frame: dict[str, Any], max_context: int, n_vocab: int) -> ClientMessage:
    op = frame.get("op")
    if not isinstance(op, str):
        raise BadRequest("missing or non-string `op`")
    if op == "generate":
        return _parse_generate(frame, max_context, n_vocab)
    if op == "cancel":
        return Cancel(_parse_id(frame))
    if op == "subscribe":
        return Subscribe()
    if op == "info":
        return Info()
    raise UnknownOp(f"unknown op {op[:64]!r}: expected generate, cancel, subscribe or info")


def _is_valid_id(rid: Any) -> TypeGuard[str]:
    return isinstance(rid, str) and 0 < len(rid) <= MAX_ID_CHARS and _LONE_SURROGATE.search(rid) is None


def _parse_id(frame: dict[str, Any]) -> str:
    rid = frame.get("id")
    if not _is_valid_id(rid):
        raise BadRequest(f"`id` must be a non-empty string of at most {MAX_ID_CHARS} characters (valid Unicode)")
    return rid


def _check_text(field: str, text: str) -> None:
    """Reject a string holding a lone surrogate; the message names its index, never the character."""
    hit = _LONE_SURROGATE.search(text)
    if hit is not None:
        where = f"lone surrogate U+{ord(hit.group()):04X} at index {hit.start()}"
        raise BadRequest(f"`{field}` is not valid Unicode: {where}")


def _is_messages(messages: Any) -> TypeGuard[list[dict[str, Any]]]:
    """1 to MAX_MESSAGES {role: str, content: str} objects."""
    return (
        isinstance(messages, list)
        and 0 < len(messages) <= MAX_MESSAGES
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        )
    )


def _parse_generate(frame: dict[str, Any], max_context: int, n_vocab: int) -> Generate:
    rid = _parse_id(frame)
    given = [k for k in ("prompt", "tokens", "messages") if k in frame]
    if len(given) != 1:
        raise BadRequest(f"exactly one of prompt / tokens / messages is required, got {given or 'none'}")
    prompt, tokens, messages = frame.get("prompt"), frame.get("tokens"), frame.get("messages")
    if "prompt" in frame:
        if not isinstance(prompt, str):
            raise BadRequest("`prompt` must be a string")
        _check_text("prompt", prompt)
    if "tokens" in frame:
        if not isinstance(tokens, list) or not all(_is_int(t) and 0 <= t < n_vocab for t in tokens):
            raise BadRequest(f"`tokens` must be a list of token ids in [0, {n_vocab})")
    if "messages" in frame:
        if not _is_messages(messages):
            raise BadRequest(f"`messages` must be a list of 1 to {MAX_MESSAGES} {{role: str, content: str}}")
        for i, m in enumerate(messages):
            _check_text(f"messages[{i}].role", m["role"])
            _check_text(f"messages[{i}].content", m["content"])
    return Generate(rid, _parse_params(frame, max_context), prompt, tokens, messages)


def _parse_params(frame: dict[str, Any], max_context: int) -> GenerateParams:
    max_tokens = frame.get("max_tokens", min(DEFAULT_MAX_TOKENS, max_context))
    if not _is_int(max_tokens) or not 1 <= max_tokens <= max_context:
        raise BadRequest(f"`max_tokens` must be an integer in [1, {max_context}]")
    stop = frame.get("stop", [])
    if stop is None:
        stop = []
    if (
        not isinstance(stop, list)
        or len(stop) > MAX_STOP_STRINGS
        or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stop)
    ):
        raise BadRequest(f"`stop` must be a list of at most {MAX_STOP_STRINGS} non-empty strings")
    for i, text in enumerate(stop):
        _check_text(f"stop[{i}]", text)
    ignore_eos = frame.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise BadRequest("`ignore_eos` must be a boolean")
    prompt_logprobs = frame.get("prompt_logprobs", False)
    if not isinstance(prompt_logprobs, bool):
        raise BadRequest("`prompt_logprobs` must be a boolean")
    return GenerateParams(max_tokens=max_tokens, stop=tuple(stop), ignore_eos=ignore_eos,
                          sampling=parse_sampling(frame), prompt_logprobs=prompt_logprobs)  # fmt: skip


SAMPLING_FLOATS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")


def parse_sampling(frame: dict[str, Any]) -> SamplingParams:
    """The sampling fields of a `generate` frame (all optional; absent = greedy). A sampled request without a
    `seed` gets one drawn here, so the arrival (and its recording) says how to replay it."""
    given: dict[str, Any] = {}
    for name in SAMPLING_FLOATS:
        value = frame.get(name)
        if value is None:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
            raise InvalidParameter(name, f"`{name}` must be a number")
        given[name] = float(value)
    for name in ("top_k", "seed", "logprobs"):
        value = frame.get(name)
        if value is not None and not _is_int(value):
            raise InvalidParameter(name, f"`{name}` must be an integer")
        if value is not None:
            given[name] = value
    params = SamplingParams(**given)
    if not params.is_greedy and "seed" not in given:
        params = dataclasses.replace(params, seed=secrets.randbits(63))
    return params


# ---- server -> client ------------------------------------------------------------------------------------


def token_frame(client_id: str, e: ev.Token) -> dict[str, Any]:
    frame: dict[str, Any] = {"op": "token", "id": client_id, "index": e.index, "token": e.token, "text": e.text}
    if e.choice is not None:
        frame["logprob"] = e.choice.logprob
        frame["top_logprobs"] = [[t, lp] for t, lp in e.choice.top]
    if e.prompt is not None:
        frame["prompt_logprobs"] = [
            {"token": c.token, "logprob": c.logprob, "top_logprobs": [[t, lp] for t, lp in c.top]} for c in e.prompt
        ]
    return frame


def token_run_text(client_id: str, index: int, tokens: list[int], text: str) -> str:
    """The encoded `token` frame of one or more plain tokens (no logprobs) of a request, built by hand: it is
    the hot path (one per streamed token or run of tokens). One token: exactly `token_frame`'s fields; several:
    `token` and `index` are the first's, `text` all their text, `tokens` every id (docs/protocol.md)."""
    head = f'{{"op":"token","id":{_quote(client_id)},"index":{index},"token":{tokens[0]},"text":{_quote(text)}'
    if len(tokens) == 1:
        return head + "}"
    return head + ',"tokens":[' + ",".join(map(str, tokens)) + "]}"


def done_frame(client_id: str, e: ev.Done, seed: int | None = None) -> dict[str, Any]:
    """`seed`: the sampling seed of a sampled request (its reply can be replayed with it); absent for greedy."""
    frame = {
        "op": "done",
        "id": client_id,
        "text": e.text,
        "tokens": e.tokens,
        "finish_reason": e.finish_reason,
        "prompt_tokens": e.prompt_tokens,
        "completion_tokens": len(e.tokens),
        "ttft_ms": None if e.ttft_ms is None else round(e.ttft_ms, 3),
        "decode_tok_s": round(e.decode_tok_s, 2),
        "max_m": e.max_m,
        "slot": e.slot,
        "parity": e.parity,
    }
    if seed is not None:
        frame["seed"] = seed
    return frame


def error_frame(request_id: str | None, code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"op": "error", "id": request_id, "code": code, "message": message, **extra}


def error_event_frame(client_id: str, e: ev.Error) -> dict[str, Any]:
    """A request's end by error; an engine failure also names the call that failed."""
    return error_frame(client_id, e.code, e.message, **({"call": e.call} if e.call else {}))


def duplicate_id_frame(client_id: str) -> dict[str, Any]:
    """The answer to a `generate` whose id is active: id null, so no client routes it to the active request."""
    message = f"id {client_id!r} is already in use by an active request on this connection; this frame was ignored"
    return error_frame(None, DuplicateId.code, message, rejected_id=client_id)


def dumps(obj: dict[str, Any]) -> str:
    """Compact JSON that always encodes to UTF-8: frames and recording lines both go through here.

    Parsing rejects lone surrogates, so this is belt and braces: a string that still holds one (a bug, or an
    engine's text) is written with `\\uXXXX` escapes instead of failing the socket or the recording."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(obj, separators=(",", ":"))
    return text
