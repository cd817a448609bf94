"""`generate()` and the `qtui generate` command on the tiny synthetic model (numpy engine)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from qtui.engine import generate as generate_cmd
from qtui.engine.generate import generate
from qtui.engine.reference import ReferenceEngine
from qtui.errors import BadRequest
from qtui.model.gguf_file import GGUFModel
from qtui.model.tokenizer import Tokenizer

MAX_TOKENS = 8


@pytest.fixture(scope="module")
def model(tiny_gguf):
    with GGUFModel.open(tiny_gguf) as m:
        yield m


@pytest.fixture(scope="module")
def engine(model) -> ReferenceEngine:
    return ReferenceEngine(model, max_slots=2, max_context=64)


def greedy_by_logits(engine: ReferenceEngine, prompt: list[int], n: int) -> list[int]:
    """The greedy continuation spelled out through the logits surface (argmax, lowest id on ties)."""
    slot = engine.alloc_slot()
    ids = [int(np.argmax(engine.prefill_logits(slot, prompt)))]
    while len(ids) < n:
        ids.append(int(np.argmax(engine.decode_logits([slot], [ids[-1]])[0])))
    engine.free_slot(slot)
    return ids


def test_generate_is_greedy_and_frees_its_slot(engine: ReferenceEngine) -> None:
    prompt = np.random.default_rng().integers(0, engine.config.n_vocab, 7).tolist()
    streamed: list[int] = []
    ids = generate(engine, prompt, MAX_TOKENS, on_token=streamed.append)
    assert ids == streamed == greedy_by_logits(engine, prompt, MAX_TOKENS)
    assert engine.num_free_slots() == engine.max_slots


def test_generate_stops_before_eos(engine: ReferenceEngine) -> None:
    rng = np.random.default_rng()
    for _ in range(20):  # find a prompt whose continuation is not one repeated token
        prompt = rng.integers(0, engine.config.n_vocab, 5).tolist()
        full = generate(engine, prompt, MAX_TOKENS)
        if full[2] not in full[:2]:
            break
    else:
        pytest.skip("every sampled continuation repeats its first tokens")
    assert generate(engine, prompt, MAX_TOKENS, eos_ids={full[2]}) == full[:2]


def test_generate_stops_at_a_full_context(model) -> None:
    engine = ReferenceEngine(model, max_slots=1, max_context=10)
    assert len(generate(engine, [1, 2, 3, 4, 5, 6], max_tokens=50)) == 5  # 6 prompt + 4 fed back + 1 last


def test_generate_rejects_bad_max_tokens(engine: ReferenceEngine) -> None:
    with pytest.raises(BadRequest):
        generate(engine, [1, 2], 0)


@pytest.fixture
def only_generate_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """`qtui.cli.main` imports every command module to build its parser; keep these tests about this one."""
    from qtui import cli

    monkeypatch.setattr(cli, "COMMANDS", [c for c in cli.COMMANDS if c[0] == "generate"])


def run_command(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from qtui.cli import main

    rc = main(["generate", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.usefixtures("only_generate_command")
def test_command_json_matches_engine_greedy(tiny_gguf, model, engine, capsys) -> None:
    rc, out, _ = run_command(
        [str(tiny_gguf), "Once upon a time", "--max-tokens", "6", "--engine", "cpu", "--json"], capsys
    )
    assert rc == 0
    record = json.loads(out)
    tokenizer = Tokenizer.from_gguf(model)
    assert record["prompt"] == "Once upon a time"
    assert record["prompt_ids"] == tokenizer.encode("Once upon a time")
    assert record["ids"] == generate(engine, record["prompt_ids"], 6, tokenizer.eos_token_ids)
    assert record["text"] == tokenizer.decode(record["ids"])


@pytest.mark.usefixtures("only_generate_command")
def test_command_streams_text(tiny_gguf, capsys) -> None:
    argv = [str(tiny_gguf), "hello world", "--max-tokens", "5", "--engine", "cpu"]
    rc, out, _ = run_command(argv, capsys)
    assert rc == 0
    _, js, _ = run_command([*argv, "--json"], capsys)
    record = json.loads(js)
    assert record["ids"] and out == record["text"] + "\n"


@pytest.mark.usefixtures("only_generate_command")
def test_command_chat_wraps_the_prompt(tiny_gguf, model, capsys) -> None:
    rc, out, _ = run_command(
        [str(tiny_gguf), "hi there", "--max-tokens", "2", "--engine", "cpu", "--chat", "--json"], capsys
    )
    assert rc == 0
    expected = Tokenizer.from_gguf(model).apply_chat_template([{"role": "user", "content": "hi there"}])
    assert json.loads(out)["prompt"] == expected and "hi there" in expected


def test_command_own_parser_round_trip(tiny_gguf) -> None:
    """The module's own argument surface, independent of the other subcommands."""
    parser = argparse.ArgumentParser()
    generate_cmd.add_arguments(parser)
    args = parser.parse_args([str(tiny_gguf), "x", "--max-tokens", "3", "--engine", "cpu", "--json"])
    assert (args.max_tokens, args.engine, args.chat, args.json) == (3, "cpu", False, True)
    with pytest.raises(SystemExit):
        parser.parse_args([str(tiny_gguf), "x", "--engine", "tpu"])
