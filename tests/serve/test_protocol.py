"""`parse_client_frame` and `dumps` without sockets: what the adversarial probe threw at the server."""

from __future__ import annotations

import json

import pytest

from qtui.serve import protocol as proto

LIMITS = {"max_context": 64, "n_vocab": 50}


def rejected(raw: str) -> proto.FrameRejected:
    with pytest.raises(proto.FrameRejected) as info:
        proto.parse_client_frame(raw, **LIMITS)
    return info.value


@pytest.mark.parametrize("opener, closer", [("[", "]"), ('{"a":', "}")])
def test_deeply_nested_json_is_bad_request(opener, closer):
    exc = rejected(opener * 100_000 + "1" * (opener == '{"a":') + closer * 100_000)
    assert exc.error.code == "bad_request" and exc.request_id is None and "nested" in exc.error.message


LONE = "\udc00"
SURROGATE_FRAMES = [
    ({"op": "generate", "id": LONE, "tokens": [3]}, None, "`id`"),
    ({"op": "fly", "id": LONE}, None, "unknown op"),
    ({"op": "cancel", "id": "a" + LONE}, None, "`id`"),
    ({"op": "generate", "id": "p", "prompt": "hi " + LONE}, "p", "`prompt`"),
    ({"op": "generate", "id": "s", "tokens": [3], "stop": ["x", LONE]}, "s", "`stop[1]`"),
    ({"op": "generate", "id": "m", "messages": [{"role": "user", "content": LONE}]}, "m", "`messages[0].content`"),
    ({"op": "generate", "id": "r", "messages": [{"role": "\ud800", "content": "x"}]}, "r", "`messages[0].role`"),
]


@pytest.mark.parametrize("frame, echoed, where", SURROGATE_FRAMES)
def test_lone_surrogates_are_bad_request_and_never_echoed(frame, echoed, where):
    exc = rejected(json.dumps(frame))  # ensure_ascii: the surrogate travels as a legal \udXXX escape
    assert exc.error.code in ("bad_request", "unknown_op") and exc.request_id == echoed
    assert where in exc.error.message
    reply = proto.dumps(proto.error_frame(exc.request_id, exc.error.code, exc.error.message))
    reply.encode("utf-8")  # what the socket will do with it


def test_a_valid_surrogate_pair_is_an_ordinary_character():
    msg = proto.parse_client_frame(json.dumps({"op": "generate", "id": "\U0001f600", "prompt": "\U0001f600"}), **LIMITS)
    assert msg.id == "\U0001f600" and msg.prompt == "\U0001f600"


def test_dumps_always_encodes():
    frame = {"op": "error", "id": "x" + LONE, "message": "é"}
    text = proto.dumps(frame)
    text.encode("utf-8")
    assert json.loads(text) == frame
    assert proto.dumps({"text": "é"}) == '{"text":"é"}'  # ordinary text stays unescaped


def test_too_many_chat_messages_are_rejected_before_rendering():
    many = [{"role": "user", "content": ""}] * (proto.MAX_MESSAGES + 1)
    exc = rejected(json.dumps({"op": "generate", "id": "big", "messages": many}))
    assert exc.error.code == "bad_request" and exc.request_id == "big"
