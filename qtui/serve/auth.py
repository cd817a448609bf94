"""The API key check, apart from any transport: the WebSocket handshake and every HTTP route use it."""

from __future__ import annotations

import hmac
from urllib.parse import parse_qs


def is_authorized(authorization: str, query: str, api_key: str) -> bool:
    """`Authorization: Bearer KEY` (the header's value) or `?api_key=KEY` (in the URL's query string),
    compared byte for byte in constant time (`hmac.compare_digest`: no early exit on the first wrong byte).
    A query with two `api_key` values is ambiguous and counts as none."""
    expected = api_key.encode()
    scheme, _, token = authorization.partition(" ")
    by_header = hmac.compare_digest(token.encode("utf-8", "surrogatepass"), expected) and scheme == "Bearer"
    params = parse_qs(query, keep_blank_values=True).get("api_key", [])
    param = params[0] if len(params) == 1 else ""
    by_query = hmac.compare_digest(param.encode("utf-8", "surrogatepass"), expected)
    return by_header or by_query
