"""Hypothesis throws random frames at a live server: it never dies and well-formed requests still complete."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qtui.tools.client import Client

from .fake_engine import solo_reply
from .helpers import fake_server, http_get

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
ids = st.text(alphabet="abcxyz0123", min_size=0, max_size=6)
fields = st.fixed_dictionaries(
    {"op": st.sampled_from(["generate", "cancel", "subscribe", "info", "nope", ""]) | json_scalars},
    optional={
        "id": ids | json_scalars,
        "prompt": st.text(max_size=30) | json_scalars,
        "tokens": st.lists(st.integers(-5, 80), max_size=70) | json_values,
        "messages": st.lists(
            st.fixed_dictionaries({"role": st.text(max_size=5), "content": st.text(max_size=10)}), max_size=3
        )
        | json_values,
        "max_tokens": st.integers(-3, 70) | json_scalars,
        "stop": st.lists(st.text(max_size=3), max_size=5) | json_scalars,
        "ignore_eos": st.booleans() | json_scalars,
    },
)
valid_generate = st.fixed_dictionaries({
    "op": st.just("generate"), "id": st.text(alphabet="abcxyz0123", min_size=1, max_size=6),
    "tokens": st.lists(st.integers(2, 49), min_size=1, max_size=10), "max_tokens": st.integers(1, 20),
    "ignore_eos": st.booleans(), "stop": st.lists(st.text(alphabet="abcdef", min_size=1, max_size=3), max_size=2),
})  # fmt: skip
FIELD_NAMES = ["op", "id", "tokens", "prompt", "messages", "max_tokens", "stop", "ignore_eos", "temperature", "extra"]


def _mutate(frame_key_value):
    frame, key, value = frame_key_value
    return json.dumps({**frame, key: value})


messages = st.one_of(
    valid_generate.map(json.dumps),
    st.tuples(valid_generate, st.sampled_from(FIELD_NAMES), json_values).map(_mutate),  # one field broken
    fields.map(json.dumps),
    json_values.map(json.dumps),
    st.text(max_size=50),
    st.binary(max_size=50),
)


@pytest.fixture(scope="module")
def live_server():
    """A fake-engine server on its own event loop thread (hypothesis drives a sync test)."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict = {}

    async def serve_forever():
        async with fake_server(max_slots=4, max_context=64, window_ms=1, queue_size=64) as srv:
            box["srv"], box["stop"] = srv, asyncio.Event()
            ready.set()
            await box["stop"].wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve_forever(),), daemon=True)
    thread.start()
    assert ready.wait(30)
    yield box["srv"]
    loop.call_soon_threadsafe(box["stop"].set)
    thread.join(30)


async def _session(url: str, frames: list, prompt: list[int]) -> None:
    async with await Client.connect(url) as client:
        (wanted,) = await client.submit_many([dict(id="wf-0", tokens=prompt, max_tokens=6, ignore_eos=True)])
        for frame in frames:
            await client.send_raw(frame)
        async with await Client.connect(url) as other:  # a second client, undisturbed
            reply = await other.generate(tokens=prompt, max_tokens=4, ignore_eos=True)
            assert reply.tokens == solo_reply(prompt, 4, eos=None)
        reply = await asyncio.wait_for(wanted, 30)
        assert reply.done is not None and reply.tokens == solo_reply(prompt, 6, eos=None)
        info = await client.info()  # the fuzzed socket still answers
        assert info["protocol"] == 1


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(frames=st.lists(messages, max_size=12), prompt=st.lists(st.integers(2, 49), min_size=1, max_size=10))
def test_random_frames_never_kill_the_server(live_server, frames, prompt):
    asyncio.run(_session(live_server.url, frames, prompt))
    status, _, body = http_get(f"http://127.0.0.1:{live_server.port}/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
