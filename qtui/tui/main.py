"""`qtui dash [URL]`: the live dashboard of a running server."""

from __future__ import annotations

import argparse

DEFAULT_URL = "ws://127.0.0.1:8765"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", nargs="?", default=DEFAULT_URL, help=f"server WebSocket URL (default {DEFAULT_URL})")
    parser.add_argument("--api-key", default=None, help="the server's --api-key, if it has one")


def run(args: argparse.Namespace) -> int:
    from qtui.tui.app import DashApp
    from qtui.tui.feed import SocketFeed

    DashApp(SocketFeed(args.url, api_key=args.api_key)).run()
    return 0
