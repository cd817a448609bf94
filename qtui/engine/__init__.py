"""Engines: the `BatchEngine` protocol, the numpy reference engine, and the CUDA engine."""
