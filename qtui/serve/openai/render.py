"""OpenAI response bodies and chunks from scheduler events: text, finish reasons, usage, logprobs."""

from __future__ import annotations

import json
from typing import Any

from qtui.engine.sampling import Choice


def sse(payload: dict[str, Any] | str) -> str:
    """One server-sent event: `data: {json}` (or a literal such as [DONE]) and a blank line."""
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return f"data: {text}\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}  # fmt: skip


class TokenText:
    """Token id -> the text / bytes OpenAI's logprobs show (the token's own bytes, decoded leniently)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def raw(self, token: int) -> bytes:
        if hasattr(self.tokenizer, "token_bytes"):
            return bytes(self.tokenizer.token_bytes(token))
        return str(self.tokenizer.decode([token])).encode()

    def text(self, token: int) -> str:
        return self.raw(token).decode("utf-8", errors="replace")


def completion_logprobs(entries: list[tuple[int, Choice | None]], tt: TokenText, offset: int) -> dict[str, Any]:
    """The completions `logprobs` object for consecutive (token, its Choice) pairs; a None Choice (the echoed
    first prompt token) has no logprob. text_offset counts characters from `offset`."""
    out: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for token, entry in entries:
        text = tt.text(token)
        out["tokens"].append(text)
        out["text_offset"].append(offset)
        offset += len(text)
        out["token_logprobs"].append(None if entry is None else entry.logprob)
        out["top_logprobs"].append(None if entry is None else {tt.text(t): lp for t, lp in entry.top})
    return out


def chat_logprobs(entries: list[Choice], tt: TokenText) -> dict[str, Any]:
    def one(token: int, logprob: float) -> dict[str, Any]:
        return {"token": tt.text(token), "logprob": logprob, "bytes": list(tt.raw(token))}

    return {"content": [{**one(c.token, c.logprob), "top_logprobs": [one(t, lp) for t, lp in c.top]}
                        for c in entries]}  # fmt: skip
