"""The OpenAI-compatible HTTP API, driven by the official `openai` client against a real `qtui serve`
(tiny model, CPU reference engine): chat and completions, streaming and not, n, logprobs, echo, errors, the
key, a client leaving mid-stream, and seeded sampling that stays batch-invariant."""

from __future__ import annotations

import asyncio
import math

import openai
import pytest

from .helpers import ServeProcess, aget, parse_prometheus

SAMPLED = dict(temperature=0.8, top_p=0.95)


@pytest.fixture(scope="module")
def server(tiny_gguf, tmp_path_factory):
    srv = ServeProcess(tiny_gguf, "--max-context", "256", "--api-key", "k3y", "--window-ms", "50",
                       log_path=tmp_path_factory.mktemp("openai") / "serve.log")  # fmt: skip
    yield srv
    srv.close()


def client(srv: ServeProcess, key: str = "k3y") -> openai.AsyncOpenAI:
    base = "http" + srv.url[2:].rstrip("/") + "/v1"
    return openai.AsyncOpenAI(base_url=base, api_key=key, max_retries=0,
                              http_client=openai.DefaultAsyncHttpxClient(trust_env=False))  # fmt: skip


async def _model(c: openai.AsyncOpenAI) -> str:
    return (await c.models.list()).data[0].id


async def test_chat_and_completions_streaming_and_not(server):
    c = client(server)
    model = await _model(c)
    assert model.endswith(".gguf")
    msgs = [{"role": "user", "content": "Say something."}]
    chat = await c.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0)
    assert chat.object == "chat.completion" and chat.choices[0].message.role == "assistant"
    assert chat.usage.completion_tokens >= 1 and chat.choices[0].finish_reason in ("stop", "length")
    stream = await c.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0, stream=True,
                                             stream_options={"include_usage": True})  # fmt: skip
    chunks = [ch async for ch in stream]
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert streamed == chat.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == chat.usage.total_tokens
    comp = await c.completions.create(model=model, prompt="the quick brown", max_tokens=10, temperature=0)
    parts = [ch.choices[0].text async for ch in await c.completions.create(
        model=model, prompt="the quick brown", max_tokens=10, temperature=0, stream=True)]  # fmt: skip
    assert "".join(parts) == comp.choices[0].text and comp.usage.completion_tokens == 10


async def test_n_choices_logprobs_and_echo(server):
    c = client(server)
    model = await _model(c)
    many = await c.completions.create(model=model, prompt="a lazy dog", max_tokens=8, n=3, seed=5, **SAMPLED)
    one = await c.completions.create(model=model, prompt="a lazy dog", max_tokens=8, n=1, seed=5, **SAMPLED)
    assert [ch.index for ch in many.choices] == [0, 1, 2]
    assert many.choices[0].text == one.choices[0].text  # choice 0 keeps the request's seed
    assert len({ch.text for ch in many.choices}) > 1  # the others get derived seeds
    chat = await c.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=6,
                                           temperature=0, logprobs=True, top_logprobs=3)  # fmt: skip
    for entry in chat.choices[0].logprobs.content:
        tops = [t.logprob for t in entry.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True) and all(lp <= 0 for lp in tops)
        assert math.isclose(entry.logprob, tops[0], abs_tol=1e-6)  # greedy: the chosen token is the most likely
    echo = await c.completions.create(model=model, prompt="one two three", max_tokens=0, echo=True, logprobs=1,
                                      temperature=0)  # fmt: skip
    lp = echo.choices[0].logprobs
    assert echo.choices[0].text == "one two three" and lp.token_logprobs[0] is None
    assert len(lp.tokens) == echo.usage.prompt_tokens and all(x < 0 for x in lp.token_logprobs[1:])
    assert echo.usage.completion_tokens == 0


async def test_errors_have_openai_shape_and_status(server, tiny_gguf):
    c = client(server)
    model = await _model(c)
    with pytest.raises(openai.BadRequestError) as bad:
        await c.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], top_p=0)
    assert bad.value.body["param"] == "top_p"
    with pytest.raises(openai.BadRequestError) as long:
        await c.completions.create(model=model, prompt=[3] * 300, max_tokens=2)
    assert long.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError):
        await c.completions.create(model="gpt-4", prompt="x", max_tokens=2)
    with pytest.raises(openai.AuthenticationError):
        await client(server, "k3y2").models.list()
    status, _, body = await aget(server.url.replace("ws", "http") + "v1/models?api_key=k3y%20")
    assert status == 401  # a trailing space makes another key (in a header, HTTP itself strips it)
    status, _, body = await aget(server.url.replace("ws", "http") + "v1/models")
    assert status == 401 and '"error"' in body


async def test_client_leaving_mid_stream_frees_the_slot(server):
    c = client(server)
    model = await _model(c)
    port = server.url.rsplit(":", 1)[1].strip("/")
    before = parse_prometheus((await aget(f"http://127.0.0.1:{port}/metrics", {"Authorization": "Bearer k3y"}))[2])
    stream = await c.completions.create(model=model, prompt="go", max_tokens=200, temperature=0, stream=True,
                                        extra_body={"ignore_eos": True})  # fmt: skip
    got = 0
    async for _ in stream:
        got += 1
        if got == 3:
            break
    await stream.close()
    for _ in range(200):
        health = (await aget(f"http://127.0.0.1:{port}/health"))[2]
        if '"active":0' in health.replace(" ", ""):
            break
        await asyncio.sleep(0.05)
    after = parse_prometheus((await aget(f"http://127.0.0.1:{port}/metrics", {"Authorization": "Bearer k3y"}))[2])
    key = '{outcome="cancelled"}'
    assert after["qtui_requests_total"][key] == before["qtui_requests_total"][key] + 1
    assert '"active":0' in health.replace(" ", "")


async def test_burst_of_16_seeded_sampled_requests_equals_the_solo_reply(server):
    c = client(server)
    model = await _model(c)
    msgs = [{"role": "user", "content": "Tell me a story."}]
    args = dict(model=model, messages=msgs, max_tokens=16, seed=1234, extra_body={"ignore_eos": True}, **SAMPLED)
    solo = (await c.chat.completions.create(**args)).choices[0].message.content
    burst = await asyncio.gather(*(c.chat.completions.create(**args) for _ in range(16)))
    assert [r.choices[0].message.content for r in burst] == [solo] * 16
    other = await c.chat.completions.create(**{**args, "seed": 4321})
    assert other.choices[0].message.content != solo
    assert burst[0].model_extra["seed"] == 1234


async def test_queue_full_is_429_and_draining_is_503():
    from .helpers import fake_server

    async with fake_server(max_slots=1, queue_size=1, step_delay_s=0.01) as srv:
        c = openai.AsyncOpenAI(base_url=srv.http_url + "/v1", api_key="x", max_retries=0,
                               http_client=openai.DefaultAsyncHttpxClient(trust_env=False))  # fmt: skip
        calls = [c.completions.create(model="fake", prompt=[3, i + 2], max_tokens=20, temperature=0) for i in range(5)]
        results = await asyncio.gather(*calls, return_exceptions=True)
        limited = [r for r in results if isinstance(r, openai.RateLimitError)]
        assert len(limited) == 3 and limited[0].body["code"] == "overloaded"
        assert sum(not isinstance(r, Exception) for r in results) == 2
        srv.is_draining = True
        with pytest.raises(openai.InternalServerError) as info:
            await c.completions.create(model="fake", prompt="x", max_tokens=2)
        assert info.value.status_code == 503
