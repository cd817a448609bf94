"""The API key check: `is_authorized` apart from any transport, `denied` the plain 401 that the WebSocket
handshake and the plain HTTP routes (/metrics, a replica's /cluster) answer with.

`Authorization: Bearer KEY` or `?api_key=KEY`, compared byte for byte in constant time (`hmac.compare_digest`:
no early exit on the first wrong byte), exactly: a key with a trailing space is a different key.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

from starlette.requests import HTTPConnection
from starlette.responses import PlainTextResponse


def is_authorized(headers: Mapping[str, str], query: Mapping[str, str], api_key: str) -> bool:
    """`headers` / `query`: Starlette's (case-insensitive headers; a multi-dict query). A query with two
    `api_key` values is ambiguous and counts as none."""
    expected = api_key.encode()
    scheme, _, token = headers.get("authorization", "").partition(" ")
    by_header = hmac.compare_digest(token.encode("utf-8", "surrogatepass"), expected) and scheme == "Bearer"
    values = _all(query, "api_key")
    param = values[0] if len(values) == 1 else ""
    by_query = hmac.compare_digest(param.encode("utf-8", "surrogatepass"), expected)
    return by_header or by_query


def _all(query: Mapping[str, str], key: str) -> list[str]:
    getlist: Any = getattr(query, "getlist", None)
    if getlist is not None:
        return list(getlist(key))
    value = query.get(key)
    return [] if value is None else [value]


def denied(conn: HTTPConnection, api_key: str | None) -> PlainTextResponse | None:
    """The 401 a request or handshake gets when the server has an API key and `conn` lacks it, else None."""
    if api_key and not is_authorized(conn.headers, conn.query_params, api_key):
        return PlainTextResponse("unauthorized: missing or wrong API key\n", status_code=401)
    return None
