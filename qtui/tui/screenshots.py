"""Regenerate the README's dashboard screenshots (SVG, `App.save_screenshot` inside `run_test`):

    python -m qtui.tui.screenshots [--out docs]

* `dashboard.svg`: the live dashboard on an in-process server (tiny model, --engine auto: CUDA where a driver
  answers, --verify-parity) while 16 clients load it, taken once every slot is busy.
* `replay.svg`: `qtui replay recordings/climb.jsonl`, paused at its busiest recorded frame.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
from pathlib import Path

SIZE = (120, 34)
RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"


async def live_screenshot(out: Path, engine: str = "auto") -> Path:
    from qtui.model.synthetic import write_model
    from qtui.serve.main import start_server
    from qtui.tools.load import climb
    from qtui.tui.app import DashApp
    from qtui.tui.feed import SocketFeed

    with tempfile.TemporaryDirectory(prefix="qtui-shot-") as tmp:
        model = write_model(Path(tmp) / "tiny-q8_0.gguf", preset="tiny", quant="q8_0", progress=False)
        async with start_server(model, engine=engine, port=0, max_slots=16, verify_parity=True) as srv:
            app = DashApp(SocketFeed(srv.url))
            async with app.run_test(size=SIZE) as pilot:
                await climb(srv.url, levels=(1, 4, 8), rounds=2, max_tokens=32, pause_s=1.0)
                # long replies, so that a stats frame (4/s) catches all 16 slots busy even on a fast GPU
                load = asyncio.create_task(climb(srv.url, levels=(16,), rounds=1, max_tokens=1024))
                state = app.feed.state
                for _ in range(1200):  # up to 60 s
                    if len(state.slots) == 16 and min(s.tokens for s in state.slots) >= 8:
                        break
                    await asyncio.sleep(0.05)
                await pilot.pause(0.3)
                app.is_frozen = True  # what is on screen now stays while the shot is written
                path = Path(app.save_screenshot(filename="dashboard.svg", path=str(out)))
                load.cancel()
                with contextlib.suppress(BaseException):
                    await load
    return path


async def replay_screenshot(out: Path) -> Path:
    from qtui.tui.app import ReplayApp
    from qtui.tui.feed import ReplayFeed
    from qtui.tui.recording import derive_frames, load_recording

    rec = load_recording(RECORDINGS / "climb.jsonl")
    frames = derive_frames(rec)
    busiest = max(frames, key=lambda f: len(f.frame.get("slots", [])))
    feed = ReplayFeed(
        frames, "climb.jsonl", start_at=busiest.t, is_paused=True, duration=rec.duration, identity=rec.identity()
    )
    app = ReplayApp(feed)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        return Path(app.save_screenshot(filename="replay.svg", path=str(out)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs"), help="where to write them (default docs/)")
    parser.add_argument("--engine", choices=["auto", "cpu", "cuda"], default="auto", help="for dashboard.svg")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"wrote {asyncio.run(replay_screenshot(args.out))}")
    print(f"wrote {asyncio.run(live_screenshot(args.out, args.engine))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
