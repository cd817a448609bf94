"""Stop strings, hold-back and streaming text (qtui/serve/reply.py) against a straightforward re-statement."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from qtui.serve.reply import accept_token, first_divergence, holdback_len
from qtui.serve.request import GenerateParams, Request

EOS = 0


class PieceDetok:
    """Token t -> PIECES[t]; a multi-byte-like piece is held back one token (as a UTF-8 detokenizer would)."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces, self.held = pieces, ""

    def push(self, t: int) -> str:
        text, self.held = self.held + self.pieces[t], ""
        if text.endswith("~"):  # pretend "~" starts an unfinished character: hold it
            text, self.held = text[:-1], "~"
        return text

    def flush(self) -> str:
        text, self.held = self.held, ""
        return text


def oracle(pieces: list[str], tokens: list[int], stops: list[str], max_tokens: int) -> tuple[str, str, int]:
    """(text, finish reason, tokens used): grow the detokenized text token by token; the reply ends at the first
    token after which the text contains a stop string (cut at the earliest), at EOS, or at max_tokens."""
    detok, text = PieceDetok(pieces), ""
    for n, t in enumerate(tokens[:max_tokens], start=1):
        is_eos = t == EOS
        text += "" if is_eos else detok.push(t)
        if is_eos or n == max_tokens:
            text += detok.flush()
        hits = [text.find(s) for s in stops if s in text]
        if hits:
            return text[: min(hits)], "stop", n
        if is_eos:
            return text, "stop", n
    return text, "length", max_tokens


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.text(alphabet="ab~é", max_size=3), min_size=2, max_size=6),
    data=st.data(),
    stops=st.lists(st.text(alphabet="ab~é", min_size=1, max_size=3), max_size=3),
    max_tokens=st.integers(1, 20),
)
def test_stream_pieces_join_to_text_and_match_oracle(pieces, data, stops, max_tokens):
    pieces[EOS] = "<eos>"
    tokens = data.draw(st.lists(st.integers(0, len(pieces) - 1), min_size=max_tokens, max_size=max_tokens))
    req = Request("r", [1], GenerateParams(max_tokens=max_tokens, stop=tuple(stops)), 0.0)
    req.max_tokens, req.detok = max_tokens, PieceDetok(pieces)
    streamed, reason = [], None
    for t in tokens:
        piece, reason = accept_token(req, t, frozenset({EOS}))
        streamed.append(piece)
        if reason:
            break
    text, want_reason, used = oracle(pieces, tokens, stops, max_tokens)
    assert "".join(streamed) == req.text == text
    assert reason == want_reason and len(req.tokens) == used
    for s in stops:
        assert s not in req.text


def test_holdback_and_divergence():
    assert holdback_len("xxab", ("abc",)) == 2 and holdback_len("xxa", ("abc", "zz")) == 1
    assert holdback_len("abc", ("abc",)) == 0 and holdback_len("xyz", ()) == 0
    rng = random.Random()
    for _ in range(200):  # against a direct scan
        a = [rng.randrange(5) for _ in range(rng.randint(0, 12))]
        b = list(a) if rng.random() < 0.3 else [rng.randrange(5) for _ in range(rng.randint(0, 12))]
        want = next((i for i in range(max(len(a), len(b))) if i >= len(a) or i >= len(b) or a[i] != b[i]), None)
        assert first_divergence(a, b) == want
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
