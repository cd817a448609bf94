"""The API key check shared by every route: `Authorization: Bearer KEY` or `?api_key=KEY`, compared in
constant time (hmac.compare_digest), exactly: a key with a trailing space is a different key."""

from __future__ import annotations

import hmac
from collections.abc import Mapping


def is_authorized(headers: Mapping[str, str], query: Mapping[str, str], api_key: str) -> bool:
    expected = api_key.encode()
    bearer = headers.get("authorization", "")
    if bearer.startswith("Bearer ") and hmac.compare_digest(bearer[len("Bearer ") :].encode(), expected):
        return True
    given = query.get("api_key")
    return given is not None and hmac.compare_digest(given.encode(), expected)
