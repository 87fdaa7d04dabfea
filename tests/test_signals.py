"""Stopping by signal (`core.training.signals.StopRequest`), with real SIGINT/SIGTERM sent to a real child process.

The child runs a loop under `StopRequest`, printing what it saw; the parent signals it and reads the outcome.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LOOP = """
import sys, time
from core.training.signals import StopRequest
stop = StopRequest(interrupt={interrupt})
try:
    with stop:
        print("ready", flush=True)
        while not stop:
            time.sleep(0.01)
        print("asked", stop.signal_name, flush=True)
        while True:  # a slow checkpoint: a second signal must abort it
            time.sleep(0.01)
except KeyboardInterrupt:
    print("interrupted", stop.signal_name, flush=True)
import signal
print("restored", signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)
"""


@contextmanager
def _child(interrupt: bool):
    """The loop in a child process, ready for signals; killed on the way out whatever the test saw."""
    proc = subprocess.Popen([sys.executable, "-c", LOOP.format(interrupt=interrupt)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _lines(proc: subprocess.Popen, count: int) -> list[str]:
    return [proc.stdout.readline().strip() for _ in range(count)]


def test_first_signal_asks_to_stop_and_a_second_aborts():
    with _child(interrupt=False) as proc:
        proc.send_signal(signal.SIGTERM)
        assert _lines(proc, 1) == ["asked SIGTERM"]
        time.sleep(0.1)
        assert proc.poll() is None  # still finishing its work: the first signal only asked
        proc.send_signal(signal.SIGINT)
        assert _lines(proc, 2) == ["interrupted SIGTERM", "restored True"]
        assert proc.wait(timeout=30) == 0


def test_interrupt_mode_raises_at_the_first_signal_and_names_it():
    with _child(interrupt=True) as proc:
        proc.send_signal(signal.SIGTERM)
        assert _lines(proc, 2) == ["interrupted SIGTERM", "restored True"]
        assert proc.wait(timeout=30) == 0


NESTED = """
import os, signal, sys
from core.training.signals import StopRequest
with StopRequest() as outer:
    print("ready", flush=True)
    sys.stdin.readline()  # the parent signals, then writes a line: the signal arrived before the inner request
    with StopRequest() as inner:
        print("inner", inner.signal_name, flush=True)
    print("outer", outer.signal_name, flush=True)
"""


def test_a_signal_before_the_backend_starts_carries_over_and_sighup_is_a_stop():
    """The train command's outer request (installed before the heavy imports) hands a signal that came during
    start-up to the backend's inner one; SIGHUP (an SSH session closing) stops like Ctrl-C instead of killing."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        proc = subprocess.Popen([sys.executable, "-c", NESTED], cwd=REPO, text=True, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert proc.stdout.readline().strip() == "ready"
            proc.send_signal(sig)
            time.sleep(0.2)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert _lines(proc, 2) == [f"inner {sig.name}", f"outer {sig.name}"]
            assert proc.wait(timeout=30) == 0
        finally:
            proc.kill()
            proc.wait()
