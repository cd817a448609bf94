"""`qtui` command line. Subcommands only: each lives in the module named here, which provides
`add_arguments(parser)` and `run(args) -> int`. No logic of its own."""

from __future__ import annotations

import argparse
import importlib
import sys

from qtui.errors import QtuiError

COMMANDS: list[tuple[str, str, str]] = [
    ("serve", "qtui.deploy.main", "serve a model over WebSocket with continuous batching (--replicas: Ray Serve)"),
    ("dash", "qtui.tui.main", "live dashboard of a running server"),
    ("demo", "qtui.tools.demo", "tiny model + in-process server + climbing load + dashboard, in one command"),
    ("replay", "qtui.tools.replay", "play a recording into the dashboard, or re-send it --against a server"),
    ("parity", "qtui.tools.parity", "concurrency ladder: every batched reply must equal its solo reply"),
    ("load", "qtui.tools.stream_load", "N clients streaming through a server: aggregate tok/s, TTFT, token gaps"),
    ("bench", "qtui.tools.bench", "decode/prefill speed, concurrency ladder, %% of the bandwidth floor"),
    ("generate", "qtui.engine.generate", "one-shot greedy generation from a prompt"),
    ("make-model", "qtui.model.synthetic", "write a synthetic qwen35 GGUF (tiny / 0.8b / 2b / 4b / 9b / 27b shapes)"),
    ("info", "qtui.model.info", "architecture, sizes, tensor bytes, sha256 and memory needs of a GGUF"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qtui", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module, help_text in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text.replace("%%", "%"))  # help is %-formatted
        p.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except QtuiError as exc:
        print(f"qtui {args.command}: error [{exc.code}]: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
