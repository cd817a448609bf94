"""The WebSocket server over the fake engine: real sockets on 127.0.0.1, real clients, fast."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from qtui.tools.client import Client

from .fake_engine import FakeTokenizer, solo_reply
from .helpers import aget, fake_server, parse_prometheus


def rand_tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(2, 50) for _ in range(n)]


async def test_hello_info_health_and_metrics():
    async with fake_server() as srv, await Client.connect(srv.url) as client:
        assert client.hello["protocol"] == 1 and client.hello["max_batch"] == 4 and client.hello["max_context"] == 64
        assert client.hello["max_slots"] == 4 and client.hello["max_rows"] == 4
        info = await client.info()
        assert info["settings"]["queue_size"] == 256 and info["engine"] == "fake"
        reply = await client.generate(tokens=[5, 6, 7], max_tokens=5, ignore_eos=True)
        assert reply.tokens == solo_reply([5, 6, 7], 5, eos=None)
        status, ctype, body = await aget(f"http://127.0.0.1:{srv.port}/health")
        assert status == 200 and ctype.startswith("application/json") and json.loads(body)["status"] == "ok"
        status, ctype, body = await aget(f"http://127.0.0.1:{srv.port}/metrics")
        assert status == 200 and ctype.startswith("text/plain")
        metrics = parse_prometheus(body)
        assert metrics["qtui_requests_total"]['{outcome="length"}'] == 1
        assert metrics["qtui_generation_tokens_total"][""] == 5
        assert metrics["qtui_prompt_tokens_total"][""] == 3
        assert metrics["qtui_batch_size_count"][""] == 4  # 1 prefill token + 4 decode steps at m=1
        assert metrics["qtui_batch_size_bucket"]['{le="1.0"}'] == 4  # prometheus-client writes bounds as floats
        assert metrics["qtui_time_to_first_token_seconds_count"][""] == 1
        assert metrics["qtui_max_slots"][""] == metrics["qtui_max_rows"][""] == metrics["qtui_max_batch"][""] == 4
        for name in (
            "qtui_step_duration_seconds_count",
            "qtui_queue_depth",
            "qtui_active_slots",
            "qtui_parity_verdicts_total",
        ):
            assert name in metrics
        assert (await aget(f"http://127.0.0.1:{srv.port}/nope"))[0] == 404


@pytest.mark.parametrize("ahead", [False, True], ids=["sync", "ahead"])
@pytest.mark.parametrize("c", [4, 8, 16])
async def test_burst_over_socket_forms_batch_of_c(c, ahead):
    rng = random.Random(c)
    async with fake_server(max_slots=16, max_context=128, ahead=ahead) as srv, await Client.connect(srv.url) as client:
        prompts = [rand_tokens(rng, rng.randrange(1, 30)) for _ in range(c)]
        futures = await client.submit_many([dict(tokens=p, max_tokens=10, ignore_eos=True) for p in prompts])
        replies = await asyncio.gather(*futures)
        for p, r in zip(prompts, replies):
            assert r.tokens == r.done["tokens"] == solo_reply(p, 10, eos=None)
            assert r.done["max_m"] == c


async def test_streaming_in_order_and_pieces_equal_text():
    tok = FakeTokenizer()
    async with fake_server() as srv, await Client.connect(srv.url) as client:
        reply = await client.generate(prompt="hello there", max_tokens=20, ignore_eos=True)
        assert reply.indices == list(range(20))
        assert reply.text == reply.done["text"] == tok.decode(reply.done["tokens"])
        assert reply.done["prompt_tokens"] == len(tok.encode("hello there"))
        stop = reply.done["text"][5:8]
        cut = await client.generate(prompt="hello there", max_tokens=20, ignore_eos=True, stop=[stop])
        assert (
            cut.done["finish_reason"] == "stop"
            and cut.text == cut.done["text"] == reply.done["text"][: reply.done["text"].index(stop)]
        )
        chat = await client.generate(messages=[{"role": "user", "content": "hi"}], max_tokens=3, ignore_eos=True)
        expected = tok.encode(tok.apply_chat_template([{"role": "user", "content": "hi"}]))
        assert chat.done["prompt_tokens"] == len(expected) and chat.tokens == solo_reply(expected, 3, eos=None)


BAD_FRAMES = [
    ("{not json", None, "bad_request"),
    ("[1, 2]", None, "bad_request"),
    ('{"op": "fly", "id": "u"}', "u", "unknown_op"),
    ('{"op": "generate", "id": "t1", "tokens": "abc"}', "t1", "bad_request"),
    ('{"op": "generate", "id": "t2", "prompt": 5}', "t2", "bad_request"),
    ('{"op": "generate", "id": "t3", "prompt": "x", "tokens": [3]}', "t3", "bad_request"),
    ('{"op": "generate", "id": "t4", "tokens": [3], "max_tokens": 0}', "t4", "bad_request"),
    ('{"op": "generate", "id": "t5", "tokens": [3], "max_tokens": 65}', "t5", "bad_request"),
    ('{"op": "generate", "id": "t6", "tokens": [3], "max_tokens": true}', "t6", "bad_request"),
    ('{"op": "generate", "id": "t7", "tokens": [3], "stop": "x"}', "t7", "bad_request"),
    ('{"op": "generate", "id": "t8", "tokens": [3], "ignore_eos": 1}', "t8", "bad_request"),
    ('{"op": "generate", "id": "t9", "tokens": [999]}', "t9", "bad_request"),
    ('{"op": "generate", "id": 7, "tokens": [3]}', None, "bad_request"),
    ('{"op": "generate", "id": "t10", "tokens": [3], "temperature": -0.7}', "t10", "bad_request"),
    ('{"op": "generate", "id": "t11", "tokens": [3], "temperature": 0.7, "top_p": 0}', "t11", "bad_request"),
    ('{"op": "generate", "id": "t12", "tokens": [3], "temperature": 0.7, "seed": "x"}', "t12", "bad_request"),
    ('{"op": "generate", "id": "long", "tokens": ' + json.dumps([3] * 64) + "}", "long", "prompt_too_long"),
    ('{"op": "generate", "id": "empty", "tokens": []}', "empty", "prompt_too_long"),
]


async def test_bad_input_gets_typed_errors_while_others_carry_on():
    rng = random.Random(2)
    async with fake_server(step_delay_s=0.002, max_message_bytes=4096) as srv:
        async with await Client.connect(srv.url) as good, await Client.connect(srv.url) as bad:
            prompts = [rand_tokens(rng, 5) for _ in range(3)]
            running = await good.submit_many([dict(tokens=p, max_tokens=30, ignore_eos=True) for p in prompts])
            for raw, _rid, _code in BAD_FRAMES:
                await bad.send_raw(raw)
            await bad.send_raw(json.dumps({"op": "generate", "id": "big", "prompt": "x" * 5000}))
            # a duplicate id of an active request on the same socket
            await bad.send_raw(
                json.dumps({"op": "generate", "id": "dup", "tokens": [4], "max_tokens": 30, "ignore_eos": True})
            )
            await bad.send_raw(json.dumps({"op": "generate", "id": "dup", "tokens": [4]}))
            replies = await asyncio.gather(*running)
            for p, r in zip(prompts, replies):
                assert r.tokens == solo_reply(p, 30, eos=None)  # untouched by the bad traffic
            # the bad socket is still open and serves a good request
            ok = await bad.generate(tokens=[9, 9], max_tokens=4, ignore_eos=True)
            assert ok.tokens == solo_reply([9, 9], 4, eos=None)
            errors = [(e["id"], e["code"]) for e in bad.unrouted_errors]
            for _, rid, code in BAD_FRAMES:
                assert (rid, code) in errors
            assert (None, "message_too_large") in errors
            dup = next(e for e in bad.unrouted_errors if e["code"] == "duplicate_id")
            assert dup["id"] is None and dup["rejected_id"] == "dup"
            assert len(errors) == len(BAD_FRAMES) + 2


async def test_queue_full_is_overloaded_and_accepted_requests_finish():
    async with (
        fake_server(max_slots=2, queue_size=2, step_delay_s=0.01) as srv,
        await Client.connect(srv.url) as client,
    ):
        futures = await client.submit_many([dict(tokens=[3, i + 2], max_tokens=8, ignore_eos=True) for i in range(8)])
        replies = await asyncio.gather(*futures)
        codes = [r.error["code"] if r.error else None for r in replies]
        assert codes.count(None) == 4 and codes.count("overloaded") == 4
        for i, r in enumerate(replies):
            if r.done:
                assert r.tokens == solo_reply([3, i + 2], 8, eos=None)


async def test_cancel_and_disconnect_free_the_slot():
    async with fake_server(max_slots=1, step_delay_s=0.005) as srv:
        async with await Client.connect(srv.url) as client:
            (future,) = await client.submit_many([dict(id="long", tokens=[3, 4], max_tokens=60, ignore_eos=True)])
            while srv.stats.active == 0 or not client._pending["long"][0].tokens:
                await asyncio.sleep(0.005)
            await client.cancel("long")
            reply = await future
            assert reply.done["finish_reason"] == "cancelled" and 0 < len(reply.tokens) < 60
            assert reply.text == reply.done["text"]
            nxt = await client.generate(tokens=[7], max_tokens=3, ignore_eos=True)  # gets the one slot
            assert nxt.tokens == solo_reply([7], 3, eos=None)
        gone = await Client.connect(srv.url)
        await gone.submit_many([dict(tokens=[3, 4], max_tokens=60, ignore_eos=True)])
        while srv.stats.active == 0:
            await asyncio.sleep(0.005)
        await gone.ws.close()  # disconnect mid-stream
        async with await Client.connect(srv.url) as client:
            nxt = await client.generate(tokens=[8], max_tokens=3, ignore_eos=True)
            assert nxt.tokens == solo_reply([8], 3, eos=None)
        assert srv.engine.num_free_slots() == 1


@pytest.mark.parametrize("ahead", [False, True], ids=["sync", "ahead"])
async def test_no_slot_leak_over_200_cancel_and_disconnect_cycles(ahead):
    rng = random.Random(4)
    async with fake_server(max_slots=2, window_ms=0, ahead=ahead) as srv:
        async with await Client.connect(srv.url) as client:
            for i in range(100):
                (f,) = await client.submit_many(
                    [dict(id=f"x{i}", tokens=rand_tokens(rng, 3), max_tokens=40, ignore_eos=True)]
                )
                await asyncio.sleep(rng.random() * 0.002)
                await client.cancel(f"x{i}")
                assert (await f).done is not None
        for _ in range(100):
            c = await Client.connect(srv.url)
            await c.submit_many([dict(tokens=rand_tokens(rng, 3), max_tokens=40, ignore_eos=True)])
            await asyncio.sleep(rng.random() * 0.002)
            await c.close()
        for _ in range(200):  # cancellations reach the engine thread asynchronously
            if srv.engine.num_free_slots() == 2 and srv.stats.active == 0:
                break
            await asyncio.sleep(0.01)
        assert srv.engine.num_free_slots() == 2
        srv._thread.window_s = 0.03  # with no batch window, two frames forming one batch is a race with TCP
        async with await Client.connect(srv.url) as client:
            replies = await asyncio.gather(
                *await client.submit_many(
                    [dict(tokens=[5, 5], max_tokens=5, ignore_eos=True)] * 1
                    + [dict(tokens=[6], max_tokens=5, ignore_eos=True)]
                )
            )
            assert [r.done["max_m"] for r in replies] == [2, 2]


@pytest.mark.parametrize("ahead", [False, True], ids=["sync", "ahead"])
async def test_load_500_requests_64_clients_16_slots_none_lost(ahead):
    rng = random.Random(5)
    async with fake_server(max_slots=16, max_context=64, window_ms=2, queue_size=256, ahead=ahead) as srv:
        clients = [await Client.connect(srv.url) for _ in range(64)]
        work = [(rand_tokens(rng, rng.randrange(1, 12)), rng.randrange(1, 8)) for _ in range(500)]

        async def client_loop(k: int) -> list:  # each client sends its requests one after another
            return [(p, n, await clients[k].generate(tokens=p, max_tokens=n)) for p, n in work[k::64]]

        results = [r for rs in await asyncio.gather(*(client_loop(k) for k in range(64))) for r in rs]
        for client in clients:
            await client.close()
    assert len(results) == 500
    for prompt, n, reply in results:
        assert reply.done is not None, reply.error  # queue 256 > 64 clients in flight: nothing overloaded
        assert reply.tokens == solo_reply(prompt, n)
    assert max(r.done["max_m"] for _, _, r in results) > 1


async def test_api_key_and_non_loopback_bind():
    from qtui.errors import BadRequest
    from qtui.serve.server import ServeSettings

    with pytest.raises(BadRequest, match="api-key"):
        ServeSettings(host="0.0.0.0")
    async with fake_server(api_key="s3cret") as srv:
        with pytest.raises(InvalidStatus) as info:
            async with connect(srv.url, proxy=None):
                pass
        assert info.value.response.status_code == 401
        async with await Client.connect(srv.url, api_key="s3cret") as client:
            assert (await client.generate(tokens=[3], max_tokens=2)).done
        async with await Client.connect(srv.url + "?api_key=s3cret") as client:
            assert client.hello["protocol"] == 1
        assert (await aget(f"http://127.0.0.1:{srv.port}/metrics"))[0] == 401
        assert (await aget(f"http://127.0.0.1:{srv.port}/health"))[0] == 200


async def test_in_process_drain_finishes_in_flight_and_refuses_new():
    async with fake_server(max_slots=4, step_delay_s=0.01) as srv:
        client = await Client.connect(srv.url)
        futures = await client.submit_many([dict(tokens=[3, i + 2], max_tokens=10, ignore_eos=True) for i in range(4)])
        while srv.stats.active < 4:
            await asyncio.sleep(0.005)
        drain = asyncio.create_task(srv.drain(timeout=5))
        await asyncio.sleep(0.02)
        assert (await aget(f"http://127.0.0.1:{srv.port}/health"))[0] == 503
        with pytest.raises((InvalidStatus, OSError)):
            await Client.connect(srv.url)
        late = await client.generate(tokens=[3], max_tokens=2)
        assert late.error["code"] == "shutting_down"
        replies = await asyncio.gather(*futures)
        assert all(r.done and r.done["finish_reason"] == "length" for r in replies)
        await drain
        await asyncio.wait_for(client._reader, 5)
        assert client.ws.close_code == 1001


async def test_drain_timeout_errors_the_rest():
    async with fake_server(max_slots=2, max_context=4096, step_delay_s=0.01) as srv:
        client = await Client.connect(srv.url)
        futures = await client.submit_many(
            [dict(tokens=[3, i + 2], max_tokens=4000, ignore_eos=True) for i in range(2)]
        )
        while srv.stats.active < 2:
            await asyncio.sleep(0.005)
        await srv.drain(timeout=0.1)
        replies = await asyncio.gather(*futures)
        assert [r.error["code"] for r in replies] == ["shutting_down"] * 2
        assert srv.engine.num_free_slots() == 2


async def test_engine_failure_errors_running_requests_and_server_carries_on():
    async with fake_server(max_slots=2) as srv, await Client.connect(srv.url) as client:
        real_decode, calls = srv.engine.decode, []

        def failing_once(slots, tokens):
            calls.append(1)
            if len(calls) == 2:
                raise RuntimeError("simulated device fault")
            return real_decode(slots, tokens)

        srv.engine.decode = failing_once
        replies = await asyncio.gather(
            *await client.submit_many([dict(tokens=[3, i + 2], max_tokens=6, ignore_eos=True) for i in range(2)])
        )
        assert [r.error["code"] for r in replies] == ["internal", "internal"]
        assert srv.engine.num_free_slots() == 2
        ok = await client.generate(tokens=[4], max_tokens=5, ignore_eos=True)
        assert ok.tokens == solo_reply([4], 5, eos=None)


async def test_handler_bug_closes_only_that_connection(monkeypatch):
    async with fake_server(max_slots=2, step_delay_s=0.002) as srv:
        async with await Client.connect(srv.url) as good, await Client.connect(srv.url) as victim:
            (running,) = await good.submit_many([dict(tokens=[3, 4], max_tokens=30, ignore_eos=True)])
            real = srv._on_frame

            def buggy(conn, raw):
                if "boom" in str(raw):
                    raise RuntimeError("handler bug")
                return real(conn, raw)

            monkeypatch.setattr(srv, "_on_frame", buggy)
            await victim.send_raw('{"op": "info", "boom": 1}')
            await asyncio.wait_for(victim._reader, 5)
            assert victim.ws.close_code == 1011
            assert (await running).tokens == solo_reply([3, 4], 30, eos=None)
            assert (await good.generate(tokens=[5], max_tokens=3, ignore_eos=True)).done


async def test_slow_subscriber_gets_latest_stats_only():
    from qtui.serve.connection import Connection

    class SlowSocket:
        def __init__(self):
            self.sent, self.gate = [], asyncio.Event()

        async def send_text(self, text):
            await self.gate.wait()
            self.sent.append(text)

    ws = SlowSocket()
    conn = Connection(ws, 1)
    sender = asyncio.create_task(conn.run_sender())
    conn.send({"op": "token", "id": "a"})
    await asyncio.sleep(0.01)  # the sender is now blocked on the slow socket
    for i in range(50):
        conn.send_stats(json.dumps({"op": "stats", "n": i}))
    conn.send({"op": "done", "id": "a"})
    ws.gate.set()
    await conn.flushed(2)
    sender.cancel()
    kinds = [json.loads(t).get("n", json.loads(t)["op"]) for t in ws.sent]
    assert kinds == ["token", "done", 49]  # request frames all, in order; stats coalesced to the newest


async def test_a_sender_failure_that_is_not_the_socket_is_logged_and_closes_with_1011(caplog):
    """A frame the transport cannot take (a bug, not a peer gone) must not end the sender silently: the
    client would wait forever on a socket that no longer writes."""
    from qtui.serve.connection import Connection

    closed = []

    class PickySocket:
        async def send_text(self, text):
            if "bad" in text:
                raise ValueError("cannot encode")

    async def close(code, reason):
        closed.append(code)

    conn = Connection(PickySocket(), 7, close=close)
    sender = asyncio.create_task(conn.run_sender())
    conn.send({"op": "token", "id": "bad"})
    conn.send({"op": "token", "id": "later"})
    await asyncio.wait_for(sender, 2)
    assert closed == [1011]
    assert "sender of connection 7 failed" in caplog.text and "ValueError" in caplog.text
    conn.send({"op": "token", "id": "after"})  # nothing more is queued for a closed connection
    assert not conn._frames


@pytest.mark.parametrize("ahead", [False, True], ids=["sync", "ahead"])
async def test_sampled_requests_over_socket_equal_solo_and_report_their_seed(ahead):
    from qtui.engine.sampling import SamplingParams

    async with fake_server(max_slots=8, max_context=128, ahead=ahead) as srv, await Client.connect(srv.url) as client:
        req = dict(tokens=[5, 6, 7], max_tokens=12, ignore_eos=True, temperature=0.8, top_p=0.95, seed=11)
        replies = await asyncio.gather(*await client.submit_many([req] * 6 + [{**req, "seed": 12}]))
        expected = solo_reply([5, 6, 7], 12, eos=None, sampling=SamplingParams(temperature=0.8, top_p=0.95, seed=11))
        assert all(r.tokens == expected and r.done["seed"] == 11 and r.done["max_m"] == 7 for r in replies[:6])
        assert replies[6].tokens != expected and replies[6].done["seed"] == 12
        drawn = await client.generate(tokens=[5], max_tokens=3, temperature=1.0)  # no seed: the server draws one
        assert isinstance(drawn.done["seed"], int)
        greedy = await client.generate(tokens=[5], max_tokens=3)
        assert "seed" not in greedy.done
        scored = await client.generate(tokens=[5, 6, 7], max_tokens=2, logprobs=2, prompt_logprobs=True, temperature=0)
        assert scored.done is not None


async def test_verify_parity_re_runs_sampled_requests_with_their_seed():
    async with fake_server(max_slots=4, verify_parity=True) as srv, await Client.connect(srv.url) as client:
        reqs = [dict(tokens=[3, i + 2], max_tokens=8, ignore_eos=True, temperature=0.7, top_p=0.9) for i in range(4)]
        replies = await asyncio.gather(*await client.submit_many(reqs))
        assert all(r.done["parity"] == "pending" for r in replies)
        for _ in range(500):
            if srv.stats.parity["equal"] == 4:
                break
            await asyncio.sleep(0.01)
        assert srv.stats.parity == {"equal": 4, "diverged": 0, "pending": 0}
