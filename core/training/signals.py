"""Stopping a training run by signal: SIGINT, SIGTERM and SIGHUP (an SSH session closing) become a stop request the
run can finish cleanly.

Both backends stop the same way: the first signal asks, the run saves and marks itself "stopped"; a second aborts.
A request made under an outer `StopRequest` (the train command's, installed before its heavy imports) carries over
to the inner one the backend enters later, so a Ctrl-C during start-up stops the run, never breaks an import.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_active: list[StopRequest] = []  # the StopRequests entered in the main thread, innermost last


class StopRequest:
    """`with StopRequest() as stop:` routes SIGINT, SIGTERM and SIGHUP to this object for the block, then restores the
    handlers. Entered inside another one, it starts with the outer one's request (if a signal came already).

    By default the first signal only sets a flag (`bool(stop)`, `stop.signal_name`) that a loop checks between
    phases, and a second one aborts at once with KeyboardInterrupt. With `interrupt=True` the first signal raises
    KeyboardInterrupt, for a caller that blocks in a wait and stops from its `except` (the verl launcher).
    Outside the main thread nothing is installed: Python delivers signals to the main thread only.
    """

    def __init__(self, *, interrupt: bool = False) -> None:
        self.interrupt = interrupt
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}

    def __bool__(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum, frame) -> None:
        if self.signal_name is not None:
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name
        if self.interrupt:
            raise KeyboardInterrupt
        log.warning("%s received: stopping (a run saves its progress first; press Ctrl-C again to abort now)",
                    self.signal_name)

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            if _active and _active[-1].signal_name is not None:
                self.signal_name = _active[-1].signal_name
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            _active.append(self)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self in _active:
            _active.remove(self)
