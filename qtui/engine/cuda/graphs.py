"""Graph cache: one CUDA graph per step shape, captured on first use, replayed after (python_stack.md §2).

The key is what really changes the launched work: (m rows, which rows run the LM head, rows per slot run:
1 for a decode step, m for a prefill chunk). Everything else (token ids, slot ids, positions, slot lengths)
is read by the kernels from fixed device buffers, refreshed by a stream-ordered copy before each replay, so
one graph serves every step of that shape.
"""

from __future__ import annotations

from typing import Any

from qtui.engine.cuda.driver import Site, check
from qtui.engine.cuda.step import Head

GraphKey = tuple[int, Head, int]  # (m rows, LM head "none" | "all" | "last", rows per slot run)


def _cu() -> Any:
    from cuda.bindings import driver

    return driver


class GraphCache:
    """Captured executable graphs keyed by (m, head, run). Capture uses stream capture on the engine's
    non-default stream in THREAD_LOCAL mode, so other threads' CUDA calls cannot invalidate it."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self._graphs: dict[GraphKey, tuple[Any, Any]] = {}  # key -> (CUgraph, CUgraphExec)

    def __contains__(self, key: GraphKey) -> bool:
        return key in self._graphs

    def __len__(self) -> int:
        return len(self._graphs)

    def capture(self, key: GraphKey, kernels: list[Site]) -> None:
        cu = _cu()
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        check(cu.cuStreamBeginCapture(self.stream, mode), "cuStreamBeginCapture")
        try:
            for k in kernels:
                k.launch(self.stream)
        finally:
            graph = check(cu.cuStreamEndCapture(self.stream), "cuStreamEndCapture")
        gexec = check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        check(cu.cuGraphUpload(gexec, self.stream), "cuGraphUpload")
        self._graphs[key] = (graph, gexec)

    def replay(self, key: GraphKey) -> None:
        check(_cu().cuGraphLaunch(self._graphs[key][1], self.stream), "cuGraphLaunch")

    def clear(self) -> None:
        cu = _cu()
        for graph, gexec in self._graphs.values():
            check(cu.cuGraphExecDestroy(gexec), "cuGraphExecDestroy")
            check(cu.cuGraphDestroy(graph), "cuGraphDestroy")
        self._graphs.clear()
