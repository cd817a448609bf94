"""`qtui generate`: one-shot greedy generation from a prompt, streamed to stdout.

    qtui generate MODEL.gguf "Once upon a time" --max-tokens 32 [--engine auto|cpu|cuda] [--chat] [--json]

`generate()` is the loop itself (one slot, prefill then greedy decode), shared with the tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from qtui.errors import BadRequest

if TYPE_CHECKING:
    from qtui.engine.base import BatchEngine


def generate(
    engine: BatchEngine,
    prompt_ids: Sequence[int],
    max_tokens: int,
    eos_ids: Collection[int] = frozenset(),
    on_token: Callable[[int], None] | None = None,
) -> list[int]:
    """Greedy-generate up to `max_tokens` ids after `prompt_ids` in one fresh slot; return the generated ids.

    Stops early at an id in `eos_ids` (not included in the result) or when the slot's context is full.
    `on_token(id)` is called for each id as it is produced (for streaming).
    """
    if max_tokens < 1:
        raise BadRequest(f"max_tokens must be at least 1, got {max_tokens}")
    slot = engine.alloc_slot()
    try:
        out: list[int] = []
        token = engine.prefill(slot, prompt_ids)
        while token not in eos_ids:
            out.append(token)
            if on_token is not None:
                on_token(token)
            if len(out) == max_tokens or engine.slot_length(slot) >= engine.max_context:
                break
            token = engine.decode([slot], [token])[0]
        return out
    finally:
        engine.free_slot(slot)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="path to a qwen35 GGUF file")
    parser.add_argument("prompt", help="prompt text")
    parser.add_argument("--max-tokens", type=int, default=64, help="most tokens to generate (default 64)")
    parser.add_argument("--engine", choices=("auto", "cpu", "cuda"), default="auto", help="default: auto")
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    parser.add_argument("--json", action="store_true", help="print {prompt, prompt_ids, ids, text} as JSON")


def run(args: argparse.Namespace) -> int:
    from qtui.engine.load import load_engine
    from qtui.model.gguf_file import GGUFModel
    from qtui.model.tokenizer import IncrementalDetokenizer, Tokenizer

    if args.max_tokens < 1:
        raise BadRequest(f"--max-tokens must be at least 1, got {args.max_tokens}")
    model = GGUFModel.open(args.model)
    try:
        tokenizer = Tokenizer.from_gguf(model)
        prompt = args.prompt
        if args.chat:
            prompt = tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
        prompt_ids = tokenizer.encode(prompt)
        # size the context by what this run needs: the numpy engine's pools stay small
        max_context = min(model.config.context_length, len(prompt_ids) + args.max_tokens)
        engine = load_engine(model, args.engine, max_slots=1, max_context=max(1, max_context))
        if args.json:
            ids = generate(engine, prompt_ids, args.max_tokens, tokenizer.eos_token_ids)
            record = {"prompt": prompt, "prompt_ids": prompt_ids, "ids": ids, "text": tokenizer.decode(ids)}
            print(json.dumps(record, ensure_ascii=False))
            return 0
        detok = IncrementalDetokenizer(tokenizer)

        def stream(token: int) -> None:
            sys.stdout.write(detok.push(token))
            sys.stdout.flush()

        generate(engine, prompt_ids, args.max_tokens, tokenizer.eos_token_ids, on_token=stream)
        sys.stdout.write(detok.flush() + "\n")
        return 0
    finally:
        model.close()
