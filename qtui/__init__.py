"""qtui: serve Qwen3.5 GGUF models with batch-invariant continuous batching, watch it live in a terminal."""

__version__ = "0.1.0"
