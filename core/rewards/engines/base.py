"""The execution tier's frame: an engine runs one artifact of an answer (rule groups, a script) against a scenario
written in the task and answers pass/fail with evidence lines; the registry, the result cache and the rules for
an engine that is missing, crashes or hangs (it costs that one criterion, never the batch).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from core.rewards.parse.artifacts import Artifacts

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 60.0
OUTPUT_CAP = 1 << 20  # bytes of an engine's or a script's output that are kept
CACHE_SIZE = 4096


@dataclass(frozen=True)
class EngineResult:
    """What an engine says about one artifact in one scenario."""

    passed: bool
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Artifact:
    """The part of an answer an engine runs (`text`, what the cache hashes) and the blocks it came from."""

    text: str
    blocks: tuple = ()


class Engine(Protocol):
    name: str
    install: str  # one line: what to install when the engine is missing

    def missing(self) -> str | None:
        """None when the engine can run here, else why not (one line)."""

    def scenario_problems(self, scenario: Mapping[str, Any]) -> list[str]:
        """What is wrong with a scenario written in a task (empty when it is valid)."""

    def artifact(self, artifacts: Artifacts, scenario: Mapping[str, Any]) -> Artifact | None:
        """The answer's artifact this engine runs, or None when the answer has none."""

    def run(self, artifact: str, scenario: Mapping[str, Any], timeout: float) -> EngineResult:
        """Run the artifact in the scenario within `timeout` seconds of wall time."""


ENGINES: dict[str, Engine] = {}


def register(engine: Engine) -> Engine:
    ENGINES[engine.name] = engine
    return engine


class EngineTimeout(Exception):
    """A process of an engine ran past its time and was killed."""


@dataclass(frozen=True)
class Finished:
    returncode: int
    output: str
    truncated: bool


def run_bounded(argv: Sequence[str], timeout: float, *, cwd: str | None = None, env: Mapping[str, str] | None = None,
                pass_fds: Sequence[int] = ()) -> Finished:
    """Run a process in a session of its own with stdout and stderr together, keeping the first OUTPUT_CAP bytes;
    on timeout the whole process group is killed and EngineTimeout raised."""
    import tempfile

    with tempfile.TemporaryFile() as sink:
        process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                   cwd=cwd, env=dict(env) if env is not None else None, start_new_session=True,
                                   pass_fds=tuple(pass_fds))
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise EngineTimeout(f"timed out after {timeout:g}s (killed)") from None
        finally:
            if process.returncode is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        size = sink.seek(0, os.SEEK_END)
        sink.seek(0)
        data = sink.read(OUTPUT_CAP)
    return Finished(process.returncode, data.decode("utf-8", "replace"), size > OUTPUT_CAP)


class _Cache:
    """The results of recent runs keyed by the hash of (engine, artifact, scenario); thread-safe, bounded."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[str, EngineResult] = OrderedDict()
        self.lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: str) -> EngineResult | None:
        with self.lock:
            result = self.items.get(key)
            if result is None:
                self.misses += 1
            else:
                self.hits += 1
                self.items.move_to_end(key)
            return result

    def put(self, key: str, result: EngineResult) -> None:
        with self.lock:
            self.items[key] = result
            while len(self.items) > self.size:
                self.items.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.items.clear()
            self.hits = self.misses = 0


CACHE = _Cache(CACHE_SIZE)
_WARNED: set[str] = set()
_MISSING: dict[str, str | None] = {}


def engine_missing(name: str) -> str | None:
    """Why engine `name` cannot run here (asked once per process), or None when it can."""
    if name not in _MISSING:
        _MISSING[name] = ENGINES[name].missing()
    return _MISSING[name]


def forget_availability() -> None:
    """Ask the engines again (after an install, or in tests that change PATH), the sandbox's probe included."""
    from core.rewards.engines.sandbox import sandbox_missing  # sandbox builds on this module

    _MISSING.clear()
    _WARNED.clear()
    sandbox_missing.cache_clear()


def cache_key(name: str, artifact: str, scenario: Mapping[str, Any]) -> str:
    payload = json.dumps([name, artifact, scenario], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def run_engine(name: str, artifact: str, scenario: Mapping[str, Any]) -> EngineResult:
    """One executed check: cached by (engine, artifact, scenario); a missing engine is not passed, named in the
    evidence and warned about once per process; a crash or a timeout fails this check only."""
    engine = ENGINES[name]
    why = engine_missing(name)
    if why is not None:
        if name not in _WARNED:
            _WARNED.add(name)
            log.warning("engine %s is not available (%s): its executed criteria score 0; %s", name, why, engine.install)
        return EngineResult(False, (f"engine {name} not installed: {why}; {engine.install}",))
    key = cache_key(name, artifact, scenario)
    cached = CACHE.get(key)
    if cached is not None:
        return cached
    timeout = min(float(scenario.get("timeout", DEFAULT_TIMEOUT_S)), MAX_TIMEOUT_S)
    try:
        result = engine.run(artifact, scenario, timeout)
    except EngineTimeout as exc:
        result = EngineResult(False, (f"{exc}",))
    except Exception as exc:  # an engine's bug or a broken install costs this criterion, never the batch
        log.warning("engine %s crashed: %s: %s", name, type(exc).__name__, exc)
        return EngineResult(False, (f"engine {name} crashed: {type(exc).__name__}: {str(exc)[:200]}",))
    CACHE.put(key, result)
    return result


def unknown_keys(mapping: Mapping[str, Any], allowed: Iterable[str], where: str = "") -> list[str]:
    """One problem per key of `mapping` that is not `allowed`, each prefixed by `where` (e.g. "cases[0]: ")."""
    allowed = set(allowed)
    return [f"{where}unknown key '{k}' (allowed: {', '.join(sorted(allowed))})" for k in mapping if k not in allowed]


def named_list_problems(items: list, field: str, noun: str, allowed: Iterable[str],
                        check: Callable[[Mapping[str, Any], str], list[str]]) -> list[str]:
    """The problems of a scenario's list of named entries (`cases`, `requests`): each a mapping of `allowed` keys
    with a name of its own, then `check(entry, "field[i]")` on each."""
    allowed = set(allowed)
    problems = []
    names = [item.get("name") for item in items if isinstance(item, Mapping)]
    if len(set(names)) != len(names):
        problems.append(f"each {noun} needs its own name")
    for index, item in enumerate(items):
        where = f"{field}[{index}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where}: a mapping of {', '.join(sorted(allowed))}")
            continue
        problems += unknown_keys(item, allowed, f"{where}: ") + check(item, where)
    return problems


def timeout_problems(scenario: Mapping[str, Any]) -> list[str]:
    value = scenario.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_TIMEOUT_S:
        return [f"'timeout' is seconds of wall time, above 0 and at most {MAX_TIMEOUT_S:g}; got {value!r}"]
    return []
