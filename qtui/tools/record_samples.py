"""Regenerate the sample recordings in `recordings/` by actually serving the tiny model with `--record`:

    python -m qtui.tools.record_samples [--out recordings]

* `climb.jsonl`: 1, 4, 8, 16 concurrent clients (one request each), idle pauses between levels in which the
  server's --verify-parity re-runs finish and report "equal".
* `cancel-error.jsonl`: three concurrent requests, one of them cancelled mid-reply, two more joining the
  running batch, and one prompt longer than the server's --max-context (error `prompt_too_long`).

Both use the tiny synthetic model (`qtui make-model --preset tiny OUT`: f32, seed 0) on the numpy reference
engine, so they can be re-sent with `qtui replay FILE --against URL` to a server of that model.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

SAMPLE_MAX_CONTEXT = 128  # small, so a prompt_too_long error is easy to provoke


async def climb_session(url: str) -> None:
    from qtui.tools.load import climb

    await asyncio.sleep(0.3)
    await climb(url, levels=(1, 4, 8, 16), rounds=1, max_tokens=16, pause_s=1.0)
    await asyncio.sleep(3.0)  # idle: the last level's --verify-parity re-runs finish


async def cancel_error_session(url: str) -> None:
    from qtui.tools.client import Client

    prompts = ["Hello there", "The quick brown fox", "Count: 1, 2, 3,", "Once upon a time", "def main():"]
    async with await Client.connect(url) as client:
        await asyncio.sleep(0.3)
        first = await client.submit_many(
            [dict(id=f"r{i}", prompt=p, max_tokens=64, ignore_eos=True) for i, p in enumerate(prompts[:3])]
        )
        await asyncio.sleep(0.3)
        await client.cancel("r1")
        later = await client.submit_many(
            [dict(id=f"r{i}", prompt=p, max_tokens=48, ignore_eos=True) for i, p in enumerate(prompts[3:], start=3)]
        )
        await asyncio.sleep(0.2)
        (too_long,) = await client.submit_many([dict(id="long", tokens=[5] * (SAMPLE_MAX_CONTEXT + 10))])
        replies = await asyncio.gather(*first, *later, too_long)
        assert replies[1].done and replies[1].done["finish_reason"] == "cancelled", replies[1]
        assert replies[-1].error and replies[-1].error["code"] == "prompt_too_long", replies[-1]
        await asyncio.sleep(2.0)  # idle: --verify-parity re-runs finish


async def record(model: Path, session: Callable[[str], Awaitable[None]], directory: Path) -> Path:
    from qtui.serve.main import start_server

    async with start_server(
        model,
        engine="cpu",
        port=0,
        max_slots=16,
        max_context=SAMPLE_MAX_CONTEXT,
        verify_parity=True,
        window_ms=10.0,
        record=directory,
    ) as srv:
        assert srv.recorder is not None
        path: Path = srv.recorder.path
        await session(srv.url)
    return path


def main(argv: list[str] | None = None) -> int:
    from qtui.model.synthetic import write_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("recordings"), help="where to put them (default recordings/)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="qtui-samples-") as tmp:
        model = write_model(Path(tmp) / "tiny-f32.gguf", preset="tiny", quant="f32", seed=0, progress=False)
        for name, session in (("climb.jsonl", climb_session), ("cancel-error.jsonl", cancel_error_session)):
            path = asyncio.run(record(model, session, Path(tmp) / name))
            shutil.copy(path, args.out / name)
            print(f"wrote {args.out / name} ({(args.out / name).stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
