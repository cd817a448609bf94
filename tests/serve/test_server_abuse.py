"""The adversarial probe's reproductions against a live fake-engine server: each bad frame gets its typed
error, and the sender's socket, every stats subscriber, other requests and the recording are untouched."""

from __future__ import annotations

import asyncio
import json

import pytest

from qtui.tools.client import Client

from .fake_engine import solo_reply
from .helpers import fake_server


def recorded(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def test_unencodable_strings_lose_no_socket_subscriber_or_record(tmp_path):
    async with fake_server(record=tmp_path, stats_interval=0.02, step_delay_s=0.002) as srv:
        path = srv.recorder.path
        async with await Client.connect(srv.url) as watcher, await Client.connect(srv.url) as bad:
            await watcher.subscribe()
            (running,) = await bad.submit_many([dict(id="ok", tokens=[3, 4], max_tokens=20, ignore_eos=True)])
            for frame in ({"op": "generate", "id": "\udc00", "tokens": [3]},
                          {"op": "generate", "id": "p", "prompt": "a\udc00"},
                          {"op": "generate", "id": "n", "messages": [{"role": "user", "content": "\ud800"}]},
                          {"op": "nested", "id": "\udfff"},
                          {"op": "info", "x": json.loads("[" * 500 + "]" * 500)}):  # fmt: skip
                await bad.send_raw(json.dumps(frame))  # \udXXX escapes: legal JSON
            await bad.send_raw("[" * 100_000 + "]" * 100_000)
            assert (await running).tokens == solo_reply([3, 4], 20, eos=None)
            assert (await bad.generate(tokens=[5], max_tokens=3, ignore_eos=True)).done  # the socket still serves
            await bad.info()
            while (await asyncio.wait_for(watcher.stats.get(), 5))["requests_done"] < 2:
                pass  # the feed still flows, and counts both requests
        errors = sorted((str(e["id"]), e["code"]) for e in bad.unrouted_errors)
        assert errors == [("None", "bad_request"), ("None", "bad_request"), ("None", "unknown_op"),
                          ("n", "bad_request"), ("p", "bad_request")]  # fmt: skip
    events = recorded(path)
    done = {e["id"] for e in events if e["ev"] == "done"}
    assert {"c2:ok", "c2:r0"} <= done and not [e for e in events if e["ev"] == "error"]


async def test_a_duplicate_id_cannot_be_mistaken_for_the_original():
    """The original streams to its end under its id; the duplicate's answer carries id null (the id is in
    `rejected_id`), so a client routing frames by id never sees its request end early."""
    async with fake_server(step_delay_s=0.002) as srv, await Client.connect(srv.url) as client:
        (original,) = await client.submit_many([dict(id="dup", tokens=[4], max_tokens=30, ignore_eos=True)])
        await client.send_raw(json.dumps({"op": "generate", "id": "dup", "tokens": [5], "max_tokens": 2}))
        reply = await original
        assert reply.done is not None and reply.tokens == solo_reply([4], 30, eos=None)
        (answer,) = client.unrouted_errors
        assert answer["id"] is None and answer["code"] == "duplicate_id" and answer["rejected_id"] == "dup"


async def test_api_key_is_compared_exactly_in_constant_time(monkeypatch):
    import hmac

    import pytest
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    from qtui.errors import BadRequest
    from qtui.serve.server import ServeSettings

    from .helpers import aget

    for key in ("s3cret ", " s3cret", ""):  # HTTP strips a header value's ends: such a key cannot work as given
        with pytest.raises(BadRequest, match="api-key"):
            ServeSettings(api_key=key)
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append((a, b)) or real(a, b))
    async with fake_server(api_key="s3cret") as srv:
        base = f"http://127.0.0.1:{srv.port}/metrics"
        for query in ("?api_key=s3cret%20", "?api_key=s3cre", "?api_key=s3cret&api_key=x", "?api_key="):
            assert (await aget(base + query))[0] == 401, query
        for header in ("Bearer  s3cret", "Bearer s3cret x", "bearer s3cret", "Basic s3cret", "s3cret"):
            assert (await aget(base, {"Authorization": header}))[0] == 401, header
            with pytest.raises(InvalidStatus):
                async with connect(srv.url, proxy=None, additional_headers={"Authorization": header}):
                    pass
        assert (await aget(base + "?api_key=s3cret"))[0] == 200
        assert (await aget(base, {"Authorization": "Bearer s3cret"}))[0] == 200
    assert compared and all(isinstance(a, bytes) and b == b"s3cret" for a, b in compared)


async def test_one_connection_cannot_take_every_slot_and_the_whole_queue():
    from qtui.serve.server import ServeSettings

    assert ServeSettings(queue_size=256).per_connection_limit == 64
    assert ServeSettings(queue_size=8).per_connection_limit == 4
    async with fake_server(max_slots=2, queue_size=32, max_per_connection=5, step_delay_s=0.002) as srv:
        async with await Client.connect(srv.url) as greedy, await Client.connect(srv.url) as other:
            flood = await greedy.submit_many(
                [dict(tokens=[3, i + 2], max_tokens=20, ignore_eos=True) for i in range(12)]
            )
            mine = await other.submit_many([dict(tokens=[4, i + 2], max_tokens=3, ignore_eos=True) for i in range(5)])
            codes = [r.error["code"] if r.error else "done" for r in await asyncio.gather(*flood)]
            assert codes == ["done"] * 5 + ["overloaded"] * 7
            assert all(r.done for r in await asyncio.gather(*mine))  # the other connection is served
            assert (await greedy.generate(tokens=[5], max_tokens=2)).done  # and the cap frees as requests end


@pytest.mark.parametrize("route", ["ws", "http"])
async def test_big_prompts_are_tokenized_off_the_event_loop(route):
    """While one client's long prompt is being tokenized (protocol v1 or /v1/completions), another connection
    and /health get answers."""
    import threading

    import openai

    from qtui.serve.server import INLINE_TOKENIZE_CHARS, ServeSettings, serve_engine

    from .fake_engine import FakeEngine, FakeTokenizer
    from .helpers import aget

    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    class SlowTokenizer(FakeTokenizer):
        def encode(self, text: str) -> list[int]:
            if len(text) > INLINE_TOKENIZE_CHARS:
                started.set()
                release.wait(3)  # a tokenizer that takes long (the probe measured 0.66 s per MiB)
                finished.set()
            return super().encode(text)

    engine = FakeEngine(max_slots=2, max_context=64)
    async with serve_engine(engine, SlowTokenizer(), ServeSettings(port=0)) as srv:
        async with await Client.connect(srv.url) as big, await Client.connect(srv.url) as other:
            prompt = "x" * (INLINE_TOKENIZE_CHARS + 1)
            if route == "ws":
                (reply,) = await big.submit_many([dict(prompt=prompt, max_tokens=2)])
            else:
                c = openai.AsyncOpenAI(base_url=srv.http_url + "/v1", api_key="x", max_retries=0,
                                       http_client=openai.DefaultAsyncHttpxClient(trust_env=False))  # fmt: skip
                reply = asyncio.create_task(c.completions.create(model="fake", prompt=prompt, max_tokens=2))
            assert await asyncio.to_thread(started.wait, 3)
            assert (await asyncio.wait_for(other.generate(tokens=[3], max_tokens=2), 2)).done
            assert (await aget(f"http://127.0.0.1:{srv.port}/health"))[0] == 200
            assert not finished.is_set(), "answered only after the tokenizer returned: the loop was blocked"
            release.set()
            if route == "ws":
                assert (await reply).error["code"] == "prompt_too_long"  # 4097 tokens > max_context 64
            else:
                with pytest.raises(openai.BadRequestError, match="context"):
                    await reply


async def test_a_rejected_oversize_prompt_is_recorded_by_its_size(tmp_path):
    async with fake_server(record=tmp_path, max_message_bytes=1 << 20) as srv, await Client.connect(srv.url) as client:
        path = srv.recorder.path
        reply = await client.generate(id="huge", tokens=[3] * 100_000)
        assert reply.error["code"] == "prompt_too_long"
        assert (await client.generate(id="ok", tokens=[3, 4], max_tokens=2)).done
    lines = path.read_text(encoding="utf-8").splitlines()
    arrivals = {r["id"]: (r, len(line)) for line in lines if (r := json.loads(line))["ev"] == "arrival"}
    record, size = arrivals["c1:huge"]
    assert record["tokens"] is None and record["num_tokens"] == 100_000 and size < 300
    assert arrivals["c1:ok"][0]["tokens"] == [3, 4]
