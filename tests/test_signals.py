"""Stopping by signal (`core.training.signals.StopRequest`), with real SIGINT/SIGTERM sent to a real child process.

The child runs a loop under `StopRequest`, printing what it saw; the parent signals it and reads the outcome.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
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


def _child(interrupt: bool) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", LOOP.format(interrupt=interrupt)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _wait_line(proc: subprocess.Popen) -> str:
    return proc.stdout.readline().strip()


def test_first_signal_asks_to_stop_and_a_second_aborts():
    proc = _child(interrupt=False)
    try:
        proc.send_signal(signal.SIGTERM)
        assert _wait_line(proc) == "asked SIGTERM"
        time.sleep(0.1)
        assert proc.poll() is None  # still finishing its work: the first signal only asked
        proc.send_signal(signal.SIGINT)
        assert _wait_line(proc) == "interrupted SIGTERM"
        assert _wait_line(proc) == "restored True"
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


def test_interrupt_mode_raises_at_the_first_signal_and_names_it():
    proc = _child(interrupt=True)
    try:
        proc.send_signal(signal.SIGTERM)
        assert _wait_line(proc) == "interrupted SIGTERM"
        assert _wait_line(proc) == "restored True"
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
