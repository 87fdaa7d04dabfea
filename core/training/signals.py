"""Stopping a training run by signal: SIGINT/SIGTERM become a stop request the run can finish cleanly.

Both backends stop the same way: the first signal asks, the run saves and marks itself "stopped"; a second aborts.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

log = logging.getLogger(__name__)


class StopRequest:
    """`with StopRequest() as stop:` routes SIGINT and SIGTERM to this object for the block, then restores the handlers.

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
        log.warning("%s received: stopping after saving a checkpoint (press Ctrl-C again to abort now)", self.signal_name)

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
