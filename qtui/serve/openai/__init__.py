"""The OpenAI-compatible HTTP API (docs/protocol.md, "HTTP API"): /v1/models, /v1/completions,
/v1/chat/completions, streaming as server-sent events. An adapter over `QtuiServer` like the WebSocket side."""
