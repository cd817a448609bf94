"""The engine thread: runs `Scheduler.step()` in a loop and hands every event to the sinks.

The asyncio server reaches it only through `submit / cancel / drain / abort / stop`, which put typed commands
on a thread-safe inbox; it reaches the server only through the `sinks` (each must not block: the server's
sink is `loop.call_soon_threadsafe`; the loop hands events on to the stats feed, metrics and recorder). The
thread never waits on a socket.

Batch window: when no client request is live and one arrives, the thread waits up to `window_ms` for more
before the first step, so a burst of c requests forms one batch of c.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from qtui.serve import events as ev
from qtui.serve.request import GenerateParams
from qtui.serve.scheduler import Scheduler

log = logging.getLogger("qtui.serve")

Sink = Callable[[list[ev.Event]], None]


@dataclass(frozen=True, slots=True)
class _Submit:
    rid: str
    prompt: list[int]
    params: GenerateParams
    arrival_t: float


@dataclass(frozen=True, slots=True)
class _Cancel:
    rid: str


@dataclass(frozen=True, slots=True)
class _Drain:
    pass  # stop admitting: later submits get shutting_down


@dataclass(frozen=True, slots=True)
class _Abort:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class _Stop:
    pass


_Command = _Submit | _Cancel | _Drain | _Abort | _Stop


class EngineThread:
    def __init__(self, scheduler: Scheduler, sinks: Sequence[Sink], window_ms: float = 5.0) -> None:
        self.scheduler = scheduler
        self.sinks = list(sinks)
        self.window_s = window_ms / 1e3
        self._inbox: queue.SimpleQueue[_Command] = queue.SimpleQueue()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="qtui-engine", daemon=True)

    # ---- called from any thread ----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, rid: str, prompt: list[int], params: GenerateParams, arrival_t: float) -> None:
        self._inbox.put(_Submit(rid, prompt, params, arrival_t))

    def cancel(self, rid: str) -> None:
        self._inbox.put(_Cancel(rid))

    def drain(self) -> None:
        self._inbox.put(_Drain())

    def abort(self, code: str, message: str) -> None:
        self._inbox.put(_Abort(code, message))

    @property
    def cpu_time(self) -> float:
        """CPU seconds the thread has used so far (Linux; 0.0 where the platform cannot tell). Measures the
        Python side of serving: every second here is serial with the device."""
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(self._thread.ident or 0))
        except (AttributeError, OSError):
            return 0.0

    def stop(self, timeout: float = 10.0) -> None:
        self._inbox.put(_Stop())
        if self._thread.is_alive():
            self._thread.join(timeout)

    # ---- the loop (engine thread only) ---------------------------------------------------------------------
    def _run(self) -> None:
        sched = self.scheduler
        while not self._stopped:
            out: list[ev.Event] = []
            first = None if sched.has_work else self._inbox.get()  # idle: block until something arrives
            self._drain_inbox(out, first)
            try:
                if sched.has_work and not self._stopped:
                    out += sched.step()
                elif not self._stopped:
                    sched.check_integrity()  # idle: slot accounting must balance
            except Exception as exc:  # an engine failure must not kill the loop: error the live requests
                log.error("engine step failed; erroring live requests", exc_info=True)
                out += sched.engine_failed(exc)
            self._emit(out)

    def _drain_inbox(self, out: list[ev.Event], first: _Command | None) -> None:
        """Handle everything queued; if a request arrives while no client request is live, hold the window."""
        deadline: float | None = None
        while not self._stopped:
            try:
                if first is not None:
                    cmd, first = first, None
                elif deadline is None:
                    cmd = self._inbox.get_nowait()
                else:
                    cmd = self._inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return
            was_live = self.scheduler.has_live
            self._handle(cmd, out)
            if deadline is None and isinstance(cmd, _Submit) and not was_live and self.window_s > 0:
                deadline = time.monotonic() + self.window_s

    def _handle(self, cmd: _Command, out: list[ev.Event]) -> None:
        sched = self.scheduler
        if isinstance(cmd, _Submit):
            out += sched.submit(cmd.rid, cmd.prompt, cmd.params, cmd.arrival_t)
        elif isinstance(cmd, _Cancel):
            out += sched.cancel(cmd.rid)
        elif isinstance(cmd, _Drain):
            sched.is_draining = True
        elif isinstance(cmd, _Abort):
            out += sched.abort_all(cmd.code, cmd.message)
        elif isinstance(cmd, _Stop):
            self._stopped = True

    def _emit(self, out: list[ev.Event]) -> None:
        if not out:
            return
        for sink in self.sinks:
            try:
                sink(out)
            except Exception:
                log.error("event sink failed", exc_info=True)
