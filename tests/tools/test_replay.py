"""`qtui replay --against`: record a session on an honest server, then re-send it to an honest server (exit
0, nothing reported) and to one whose engine changes one token of one request (exit 1, that request and its
first divergent index reported). Also `qtui replay FILE` rejects a bad file with a typed error."""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
from pathlib import Path

import pytest

from qtui.engine.reference import ReferenceEngine
from qtui.errors import BadRequest
from qtui.model.gguf_file import GGUFModel
from qtui.model.tokenizer import Tokenizer
from qtui.serve.server import ServeSettings, serve_engine
from qtui.tools import replay
from qtui.tools.client import Client
from qtui.tui.recording import load_recording

PERTURB_AT_DECODE = 4  # the 4th decode of the target request's slot returns a wrong token: reply index 4


class PerturbedEngine:
    """A ReferenceEngine that answers one decode wrongly: the `PERTURB_AT_DECODE`-th decode of the slot whose
    prompt is `target_prompt` returns the argmax + 1. Everything else is delegated unchanged."""

    def __init__(self, inner: ReferenceEngine, target_prompt: list[int]) -> None:
        self.inner = inner
        self.target_prompt = list(target_prompt)
        self.prompts: dict[int, list[int]] = {}
        self.num_decodes: dict[int, int] = {}

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def alloc_slot(self) -> int:
        slot = self.inner.alloc_slot()
        self.prompts[slot], self.num_decodes[slot] = [], 0
        return slot

    def prefill(self, slot: int, tokens) -> int:
        self.prompts[slot] += list(tokens)
        return self.inner.prefill(slot, tokens)

    def decode(self, slots, tokens) -> list[int]:
        out = self.inner.decode(slots, tokens)
        for i, slot in enumerate(slots):
            self.num_decodes[slot] += 1
            if self.prompts[slot] == self.target_prompt and self.num_decodes[slot] == PERTURB_AT_DECODE:
                out[i] = (out[i] + 1) % self.inner.config.n_vocab
        return out


def open_engine(path: Path, target_prompt: list[int] | None = None):
    model = GGUFModel.open(path)
    engine = ReferenceEngine(model, max_slots=4, max_context=256)
    return (engine if target_prompt is None else PerturbedEngine(engine, target_prompt)), Tokenizer.from_gguf(model)


@pytest.fixture
def prompts(tiny_gguf):
    rng = random.Random()
    n_vocab = GGUFModel.open(tiny_gguf).config.n_vocab
    return [[rng.randrange(n_vocab) for _ in range(rng.randint(3, 9))] for _ in range(6)]


async def record_session(tiny_gguf: Path, prompts: list[list[int]], directory: Path) -> Path:
    engine, tokenizer = open_engine(tiny_gguf)
    settings = ServeSettings(port=0, record=directory, window_ms=10.0)
    async with serve_engine(engine, tokenizer, settings) as srv, await Client.connect(srv.url) as client:
        burst = [dict(tokens=p, max_tokens=10, ignore_eos=True) for p in prompts]
        first = await client.submit_many(burst[:3])
        await asyncio.sleep(0.05)
        replies = await asyncio.gather(*first, *await client.submit_many(burst[3:]))
        assert all(r.is_ok for r in replies)
    (path,) = directory.glob("session-*.jsonl")
    return path


def against_args(path: Path, url: str) -> argparse.Namespace:
    return argparse.Namespace(file=str(path), against=url, speed=4.0, api_key=None, timeout=60.0)


async def test_against_honest_and_perturbed_servers(tiny_gguf, prompts, tmp_path, capsys):
    recording = await record_session(tiny_gguf, prompts, tmp_path)
    target = replay.requests_of(load_recording(recording).events)[4]  # second burst: batched

    engine, tokenizer = open_engine(tiny_gguf)
    async with serve_engine(engine, tokenizer, ServeSettings(port=0)) as srv:
        assert await asyncio.to_thread(replay.run, against_args(recording, srv.url)) == 0
    assert "6 same, 0 differ" in capsys.readouterr().out

    engine, tokenizer = open_engine(tiny_gguf, target_prompt=target.tokens)
    async with serve_engine(engine, tokenizer, ServeSettings(port=0)) as srv:
        assert await asyncio.to_thread(replay.run, against_args(recording, srv.url)) == replay.EXIT_DIFFERENT
        results = await replay.replay_against(str(recording), srv.url, speed=4.0)
    out = capsys.readouterr().out
    assert target.rid in out and "5 same, 1 differ" in out
    verdicts = {r.rid: replay.compare(r) for r in results}
    assert verdicts[target.rid] == ("differs", PERTURB_AT_DECODE)
    assert all(v == ("same", None) for rid, v in verdicts.items() if rid != target.rid)


def test_replay_refuses_what_is_not_a_recording(tmp_path):
    bad = tmp_path / "notes.jsonl"
    bad.write_text('{"hello": 1}\n')
    with pytest.raises(BadRequest, match="header"):
        replay.run(argparse.Namespace(file=str(bad), against=None, speed=1.0, api_key=None, timeout=1.0))
    with pytest.raises(BadRequest, match="speed"):
        replay.run(argparse.Namespace(file=str(bad), against=None, speed=0.0, api_key=None, timeout=1.0))


def test_against_nothing_listening_is_one_clear_line(tmp_path, capsys, prompts):
    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"ev": "header", "format": "qtui-recording", "version": 1}\n'
        '{"t": 0.0, "ev": "arrival", "id": "c1:r1", "tokens": [1, 2], "params": {"max_tokens": 2}}\n'
    )
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert replay.run(against_args(path, f"ws://127.0.0.1:{port}")) == 2
    assert "connection refused" in capsys.readouterr().out


def test_a_damaged_recording_is_reported_line_by_line_without_a_traceback(tmp_path):
    """`qtui replay FILE --against URL` (a real process) on a file with a non-object line, invalid UTF-8, an
    arrival without tokens, a stats line without its frame and a last line cut short: one line per problem
    on stderr, then the usual connection report, never a traceback."""
    import subprocess
    import sys

    path = tmp_path / "damaged.jsonl"
    path.write_bytes(b"\n".join([
        b'{"ev": "header", "format": "qtui-recording", "version": 1}',
        b'{"t": 0.0, "ev": "arrival", "id": "c1:r1", "tokens": [1, 2], "params": {"max_tokens": 2}}',
        b"[1, 2]", b'\xff{"t": 1}', b'{"t": 0.1, "ev": "arrival", "id": "c1:r2"}', b'{"t": 0.2, "ev": "stats"}',
        b'{"t": 0.3, "ev": "done", "id": "c1:r1", "tok',
    ]))  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run([sys.executable, "-m", "qtui", "replay", str(path), "--against", f"ws://127.0.0.1:{port}"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr + out.stdout
    for needle in ("line 3: a JSON list", "line 4: not UTF-8", "line 5: arrival line without `tokens`",
                   "line 6: stats line without `frame`", "line 7: cut short"):  # fmt: skip
        assert needle in out.stderr
    assert "connection refused" in out.stdout
