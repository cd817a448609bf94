"""Engine failures keep their type: the requests that were running get the engine's error code and the call
that failed; after a fatal (sticky) CUDA error `/health` answers 503 and new requests fail fast."""

from __future__ import annotations

import asyncio
import json

from qtui.errors import CudaError
from qtui.serve.request import GenerateParams
from qtui.tools.client import Client

from .fake_engine import FakeEngine, solo_reply
from .helpers import aget, fake_server, parse_prometheus
from .test_scheduler import make


def fail_decode_once(engine: FakeEngine, error: Exception) -> None:
    real, calls = engine._decode, []  # both decode paths' (decode, decode_submit)

    def decode(slots, tokens, sampling=None):
        calls.append(1)
        if len(calls) == 2:
            raise error
        return real(slots, tokens, sampling)

    engine._decode = decode  # type: ignore[method-assign]


async def run_two(client: Client) -> list:
    frames = [dict(tokens=[3, i + 2], max_tokens=6, ignore_eos=True) for i in range(2)]
    return await asyncio.gather(*await client.submit_many(frames))


async def test_a_fatal_cuda_error_reaches_clients_typed_and_turns_health_503():
    async with fake_server(max_slots=2) as srv, await Client.connect(srv.url) as client:
        fail_decode_once(srv.engine, CudaError("cuGraphLaunch", "CUDA_ERROR_ILLEGAL_ADDRESS"))
        for reply in await run_two(client):
            assert reply.error["code"] == "cuda_error" and reply.error["call"] == "cuGraphLaunch"
            assert "CUDA_ERROR_ILLEGAL_ADDRESS" in reply.error["message"]
        status, _, body = await aget(f"http://127.0.0.1:{srv.port}/health")
        health = json.loads(body)
        assert status == 503 and health["status"] == "failed" and health["error"]["code"] == "engine_failed"
        assert "CUDA_ERROR_ILLEGAL_ADDRESS" in health["error"]["message"]
        metrics = parse_prometheus((await aget(f"http://127.0.0.1:{srv.port}/metrics"))[2])
        assert metrics["qtui_engine_failed"][""] == 1 and metrics["qtui_requests_total"]['{outcome="cuda_error"}'] == 2
        late = await asyncio.wait_for(client.generate(tokens=[4], max_tokens=3), 2)
        assert late.error["code"] == "engine_failed"
        assert srv.engine.decode_calls == [[0, 1]]  # nothing ran after the fault


async def test_after_a_fatal_error_the_http_api_fails_fast_with_503():
    import openai
    import pytest

    async with fake_server(max_slots=2) as srv, await Client.connect(srv.url) as client:
        fail_decode_once(srv.engine, CudaError("cuGraphLaunch", "CUDA_ERROR_LAUNCH_FAILED"))
        await run_two(client)
        c = openai.AsyncOpenAI(base_url=srv.http_url + "/v1", api_key="x", max_retries=0,
                               http_client=openai.DefaultAsyncHttpxClient(trust_env=False))  # fmt: skip
        with pytest.raises(openai.InternalServerError) as info:
            await c.completions.create(model="fake", prompt=[3], max_tokens=2)
        assert info.value.status_code == 503 and info.value.body["code"] == "engine_failed"
        assert srv.engine.decode_calls == [[0, 1]]  # nothing ran after the fault


async def test_a_recoverable_cuda_error_fails_only_the_running_requests():
    async with fake_server(max_slots=2) as srv, await Client.connect(srv.url) as client:
        fail_decode_once(srv.engine, CudaError("cuMemcpyDtoH", "CUDA_ERROR_OUT_OF_MEMORY"))
        assert [r.error["code"] for r in await run_two(client)] == ["cuda_error"] * 2
        assert (await aget(f"http://127.0.0.1:{srv.port}/health"))[0] == 200
        ok = await client.generate(tokens=[4], max_tokens=5, ignore_eos=True)
        assert ok.tokens == solo_reply([4], 5, eos=None)


def test_scheduler_refuses_every_submit_after_a_fatal_error():
    sched, _ = make(max_slots=2)
    sched.submit("a", [3], GenerateParams(max_tokens=4))
    sched.step()
    out = sched.engine_failed(CudaError("cuLaunchKernel", "CUDA_ERROR_LAUNCH_FAILED"))
    assert [(e.rid, e.code, e.call) for e in out] == [("a", "cuda_error", "cuLaunchKernel")]
    arrived, refused = sched.submit("b", [3], GenerateParams())
    assert refused.code == "engine_failed" and not sched.has_work
    sched.check_integrity()


async def test_an_error_read_with_a_step_queued_ahead_fails_its_requests_and_the_server_carries_on():
    """Queued ahead, a recoverable fault surfaces where the host reads a step (the CUDA engine's event sync): its
    requests get the error, the step queued behind it is dropped with them, and the next request runs clean."""
    async with fake_server(max_slots=2, ahead=True) as srv, await Client.connect(srv.url) as client:
        real, calls = srv.engine.decode_collect, []

        def collect(handle):
            calls.append(1)
            if len(calls) == 2:
                raise CudaError("cuEventSynchronize", "CUDA_ERROR_OUT_OF_MEMORY")
            return real(handle)

        srv.engine.decode_collect = collect  # type: ignore[method-assign]
        replies = await run_two(client)
        assert [(r.error["code"], r.error["call"]) for r in replies] == [("cuda_error", "cuEventSynchronize")] * 2
        ok = await client.generate(tokens=[4], max_tokens=5, ignore_eos=True)
        assert ok.tokens == solo_reply([4], 5, eos=None)
        assert srv.engine.num_free_slots() == 2
