"""Turning generated token ids into streamed text: stop strings, hold-back, finish reasons.

Pure functions over a `Request`; the scheduler calls `accept_token` once per generated token. Text pieces
are held back while the reply's tail could still grow into a stop string, so the concatenated `token`
pieces always equal the final `done.text` (a stop string is trimmed and never streamed).
"""

from __future__ import annotations

from qtui.serve.request import Request


def holdback_len(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
    best = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:n]):
                best = n
                break
    return best


def find_stop(text: str, stops: tuple[str, ...], start: int) -> int | None:
    """Index in `text` where the earliest stop string begins, searching from `start`; None if none."""
    hits = [i for i in (text.find(stop, start) for stop in stops) if i >= 0]
    return min(hits) if hits else None


def accept_token(req: Request, token: int, eos_token_ids: frozenset[int]) -> tuple[str, str | None]:
    """Append `token` to the reply. Returns (text piece to stream now, finish reason or None).

    Finish reasons: "stop" (EOS unless ignore_eos, or a stop string; the string is trimmed from the text),
    "length" (req.max_tokens reached, which already includes the context cap). The EOS token is kept in
    `req.tokens` but adds no text.
    """
    assert req.detok is not None
    req.tokens.append(token)
    is_eos = token in eos_token_ids and not req.params.ignore_eos
    at_end = is_eos or len(req.tokens) >= req.max_tokens
    stops = req.params.stop
    if not stops and not at_end:  # the hot path: no stop strings, so nothing is held back but half characters
        piece = req.detok.push(token)
        req.text += piece
        req.num_emitted_chars += len(piece)
        return piece, None
    if not is_eos:
        req.text += req.detok.push(token)
    if at_end:
        req.text += req.detok.flush()
    reason: str | None = None
    cut = find_stop(req.text, req.params.stop, req.num_emitted_chars) if req.params.stop else None
    if cut is not None:
        req.text = req.text[:cut]
        reason = "stop"
    elif is_eos:
        reason = "stop"
    elif at_end:
        reason = "length"
    upto = len(req.text) if reason else len(req.text) - holdback_len(req.text, req.params.stop)
    upto = max(upto, req.num_emitted_chars)  # a stop match never starts inside streamed text (it was held back)
    piece = req.text[req.num_emitted_chars : upto]
    req.num_emitted_chars = upto
    return piece, reason


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """None if the token lists are equal, else the first index where they differ (or the shorter length)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
