"""The run folder: writers, the tolerant readers (`read_jsonl`, `FileTail`), listing, resolving, stopping, secrets.

Followers are checked against real writer subprocesses that append partial lines, truncate, replace files,
and write verl's file-logger format exactly as verl 0.9 does (orjson, unbuffered, `{"step", "data"}`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.errors import UserError
from core.runs import (
    FileTail,
    RunDirectory,
    find_run,
    list_runs,
    metric_rows,
    read_jsonl,
    resolve_run,
    stop_child,
    stop_process,
    summarize,
)
from core.training import sysmon
from core.training.config import load_config

REPO = Path(__file__).resolve().parents[1]

# A writer process: appends steps 1..N to a file, each line in two writes (so readers see partial lines),
# and, when asked, restarts the file half-way like a restarted verl run (open "wb" = truncate in place).
WRITER = r"""
import json, os, sys, time
path, n, restart_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fp = open(path, "ab", buffering=0)
for step in range(1, n + 1):
    if step == restart_at:
        fp.close()
        fp = open(path, "wb", buffering=0)
    line = json.dumps({"step": step, "data": {"critic/score/mean": step / 10}}).encode() + b"\n"
    fp.write(line[:7]); time.sleep(0.02); fp.write(line[7:]); time.sleep(0.01)
fp.close()
"""

# verl 0.9.1's FileLogger.log, verbatim in behaviour (verl/utils/tracking.py): orjson with numpy support.
VERL_WRITER = r"""
import sys, numpy as np, orjson
fp = open(sys.argv[1], "wb", buffering=0)
for step in range(1, 4):
    data = {"actor/pg_loss": np.float32(0.5 / step), "critic/score/mean": float(step), "actor/grad_norm": float("nan")}
    fp.write(orjson.dumps({"step": step, "data": data}, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
fp.close()
"""


def run_writer(script: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)])


def follow_writer(path: Path, proc: subprocess.Popen, tail: FileTail | None = None) -> list[int]:
    """The steps a tail reads while the writer runs (and once after it ended), -1 where it restarted."""
    tail = tail or FileTail(path)
    seen: list[int] = []
    while True:
        done = proc.poll() is not None  # read once more after the writer ended: its last lines
        restarts = tail.restarts
        records = tail.poll_records()
        if tail.restarts != restarts:
            seen.append(-1)
        seen += [r["step"] for r in records]
        if done:
            break
        time.sleep(0.01)
    assert proc.wait(timeout=60) == 0
    return seen


def test_tail_reads_a_writer_subprocess_line_by_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    proc = run_writer(WRITER, path, 30, 0)
    assert follow_writer(path, proc) == list(range(1, 31))  # every line once, in order, no half lines, no restart


def test_tail_rereads_a_file_truncated_by_a_restarted_writer(tmp_path):
    path = tmp_path / "metrics.jsonl"
    proc = run_writer(WRITER, path, 12, 6)
    seen = follow_writer(path, proc)
    # whatever the reader caught before the restart (-1), after it come the new file's lines, in order
    after_restart = seen[len(seen) - seen[::-1].index(-1):] if -1 in seen else seen
    assert after_restart == list(range(6, 13))
    assert [r["step"] for r in read_jsonl(path)] == list(range(6, 13))


def test_tail_notices_truncation_replacement_and_in_place_rewrite(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 6)))
    tail = FileTail(path)
    assert [r["step"] for r in tail.poll_records()] == [1, 2, 3, 4, 5]
    assert tail.poll_records() == []

    path.write_text(json.dumps({"step": 1, "x": 1}) + "\n")  # truncated in place and shorter
    assert tail.poll_records() == [{"step": 1, "x": 1}] and tail.restarts == 1

    replacement = tmp_path / "new.jsonl"
    replacement.write_text(json.dumps({"step": 7}) + "\n")
    os.replace(replacement, path)  # replaced: a new inode
    assert tail.poll_records() == [{"step": 7}] and tail.restarts == 2

    with open(path, "r+") as fp:  # rewritten in place, longer than before: only the first bytes tell
        fp.write("".join(json.dumps({"step": s, "pad": "y" * 20}) + "\n" for s in (40, 41)))
    assert [r["step"] for r in tail.poll_records()] == [40, 41] and tail.restarts == 3


def test_tail_keeps_a_partial_line_until_its_newline(tmp_path):
    path = tmp_path / "m.jsonl"
    tail = FileTail(path)
    assert tail.poll_records() == []  # not there yet
    with open(path, "ab", buffering=0) as fp:
        fp.write(b'{"step": 1, "da')
        assert tail.poll_records() == []
        fp.write(b'ta": {}}\n{"step": 2')
        assert tail.poll_records() == [{"step": 1, "data": {}}]
        fp.write(b"}\n")
        assert tail.poll_records() == [{"step": 2}]


def test_tail_reads_verl_file_logger_jsonl(tmp_path):
    path = tmp_path / "verl.jsonl"
    proc = run_writer(VERL_WRITER, path)
    assert proc.wait(timeout=60) == 0
    pairs = list(metric_rows(FileTail(path).poll_records()))
    assert [step for step, _ in pairs] == [1, 2, 3]
    assert pairs[1][1]["actor/pg_loss"] == pytest.approx(0.25)
    assert pairs[0][1]["actor/grad_norm"] is None  # orjson writes NaN as null
    assert FileTail(path, from_end=0).poll_records() == []


def test_read_jsonl_skips_partial_and_broken_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 1}\nnot json\n\n[1, 2]\n{"step": 2}\n{"step": 3, "da')
    assert read_jsonl(path) == [{"step": 1}, {"step": 2}]
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_run_directory_files_meta_and_resume_truncation(tmp_path):
    cfg = load_config("ci-fast")
    run = RunDirectory.create(tmp_path, mode="ci-fast", backend="torch", config=cfg)
    assert re.fullmatch(r"\d{8}-\d{6}-ci-fast-[0-9a-f]{4}", run.run_id)
    assert {p.name for p in run.path.iterdir()} >= {"config.yaml", "meta.json", "metrics.jsonl", "samples.jsonl",
                                                    "events.jsonl", "checkpoints", "eval"}
    assert load_config("default", config_file=run.config_path) == cfg  # the resolved config reloads as is
    meta = run.meta()
    assert (meta["status"], meta["mode"], meta["backend"], meta["pid"]) == ("running", "ci-fast", "torch", os.getpid())
    assert meta["versions"]["python"] and meta["ended_at"] is None

    for step in range(1, 6):
        run.log_metrics(step, {"critic/score/mean": step / 10, "actor/pg_loss": float("inf")})
        run.log_samples(step, [{"task_id": "k8s-1", "prompt": "p", "response": "r", "reward": 0.5}])
    run.event("checkpoint", step=4, path="checkpoints/global_step_4")
    run.truncate_metrics_after(3)
    assert [r["step"] for r in read_jsonl(run.metrics_path)] == [1, 2, 3]
    assert [r["step"] for r in read_jsonl(run.samples_path)] == [1, 2, 3]
    assert read_jsonl(run.metrics_path)[0]["data"]["actor/pg_loss"] is None

    run.set_status("finished", "3 steps")
    meta = run.meta()
    assert meta["status"] == "finished" and meta["ended_at"] and meta["total_steps"] == 3
    assert [e["event"] for e in read_jsonl(run.events_path)] == ["started", "checkpoint"]
    with pytest.raises(UserError, match="already holds a run"):
        RunDirectory.create(tmp_path, mode="ci-fast", backend="torch", config=cfg, run_id=run.run_id)
    with pytest.raises(UserError, match="letters, digits"):
        RunDirectory.create(tmp_path, mode="x", backend="torch", config=cfg, run_id="../escape")


def test_secrets_never_land_in_the_run_folder(tmp_path, monkeypatch):
    secret = "sk-test1234567890abcdefSECRET"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setattr(sys, "argv", ["devops-rl", "train", "--set", f"trainer.experiment_name={secret}"])
    cfg = load_config(overrides=[f"trainer.experiment_name={secret}"])
    run = RunDirectory.create(tmp_path, mode="train", backend="torch", config=cfg)
    run.log_samples(1, [{"prompt": f"use api_key={secret}", "response": "ok",
                         "breakdown": {"evidence": {"hardcoded_secret": [f"OPENAI_API_KEY={secret}"]}}}])
    run.event("warning", message=f"bad key {secret}")
    run.set_status("failed", f"auth failed for {secret}")
    for path in run.path.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(), path


def test_list_runs_and_open(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVOPS_RL_RUNS_DIR", str(tmp_path))
    cfg = load_config("ci-fast")
    first = RunDirectory.create(None, mode="ci-fast", backend="torch", config=cfg, run_id="20260101-000000-ci-fast-aaaa")
    for step, reward in ((1, 0.2), (2, 0.6), (3, 0.4)):
        first.log_metrics(step, {"critic/score/mean": reward})
    first.log_metrics(3, {"val/score/mean": 0.9})
    first.set_status("finished")
    # a run whose process died without saying so: its pid is a process that has exited
    code = ("import sys; from core.training.config import load_config; from core.runs import RunDirectory; "
            "RunDirectory.create(sys.argv[1], mode='train', backend='verl', config=load_config(), "
            "run_id='20260102-000000-train-bbbb')")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, check=True, timeout=120)
    runs = list_runs()
    assert [r.run_id for r in runs] == ["20260101-000000-ci-fast-aaaa", "20260102-000000-train-bbbb"]
    done, dead = runs
    assert (done.status, done.steps, done.best_reward, done.last_reward) == ("finished", 3, 0.6, 0.4)
    assert dead.status == "running" and dead.alive is False and dead.shown_status == "crashed"
    assert RunDirectory.open("20260101").path == first.path
    assert RunDirectory.open(first.path).run_id == first.run_id
    with pytest.raises(UserError, match="ambiguous"):
        RunDirectory.open("2026")
    with pytest.raises(UserError, match="no run 'nope'"):
        RunDirectory.open("nope")


def test_tail_from_the_end_skips_the_cut_line_and_still_notices_an_in_place_rewrite(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("".join(f"line {i}\n" for i in range(10_000)))
    tail = FileTail(path, from_end=100)
    lines = tail.poll()
    assert lines[-1] == b"line 9999" and len(lines) < 12  # only the end, and no half line at the cut
    assert all(line.startswith(b"line ") for line in lines)
    assert FileTail(path, from_end=0).poll() == []  # only what comes from now on
    at_a_line_start = FileTail(path, from_end=len("line 9999\n"))
    assert at_a_line_start.poll() == [b"line 9999"]  # a cut exactly at a line start loses no line

    with open(path, "r+") as fp:  # rewritten in place and longer: the first bytes differ, nothing shrank
        fp.write("".join(f"new {i}\n" for i in range(20_000)))
    assert tail.poll()[:2] == [b"new 0", b"new 1"] and tail.restarts == 1


def test_tail_read_cap_returns_every_line_once_over_several_polls(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps({"step": s, "pad": "x" * 100}) + "\n" for s in range(2_000)))
    tail = FileTail(path, max_bytes=10_000)
    steps, polls = [], 0
    while batch := tail.poll_records():
        steps += [r["step"] for r in batch]
        polls += 1
    assert steps == list(range(2_000)) and polls > 10


def test_resolver_takes_folder_id_and_prefix_and_never_globs(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVOPS_RL_RUNS_DIR", str(tmp_path))
    for name in ("abc-1", "a[b]c-2", "20260101-000000-ci-fast-aaaa"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "meta.json").write_text(json.dumps({"run_id": name, "status": "finished"}))
    (tmp_path / "no-meta").mkdir()
    assert find_run("a[b]") == tmp_path / "a[b]c-2"  # as a glob, [b] would have matched "abc-1"
    assert find_run("abc") == tmp_path / "abc-1"
    assert find_run(str(tmp_path / "abc-1")) == tmp_path / "abc-1"
    assert find_run("2026") == tmp_path / "20260101-000000-ci-fast-aaaa"
    for spec in ("*", "?bc-1", "*aaaa", "aaaa"):  # glob characters and substrings name nothing
        assert find_run(spec) is None
        with pytest.raises(UserError, match=f"no run '{re.escape(spec)}'"):
            resolve_run(spec)
    with pytest.raises(UserError, match="ambiguous: a"):
        find_run("a")
    with pytest.raises(UserError, match="not a run folder"):
        resolve_run(str(tmp_path / "no-meta"))
    verl_file = tmp_path / "verl.jsonl"
    verl_file.write_text("")
    assert resolve_run(str(verl_file), files=True) == verl_file
    with pytest.raises(UserError, match="no run"):
        resolve_run(str(verl_file))  # a command that takes only runs
    assert find_run("Qwen/Qwen2.5-0.5B") is None  # a model id, for `serve`
    here = tmp_path / "cwd"
    (here / "abc-1").mkdir(parents=True)
    (here / "ab").mkdir()
    monkeypatch.chdir(here)
    assert find_run("abc-1") == tmp_path / "abc-1"  # a run id wins over a local folder of the same name
    assert find_run("ab") is None  # a local folder is not taken for the start of a run id


def _hand_made_run(root: Path, name: str, meta) -> Path:
    run = root / name
    run.mkdir()
    (run / "meta.json").write_text(json.dumps(meta))
    return run


def test_a_dead_pid_counts_only_on_its_own_host(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    this_host = _hand_made_run(tmp_path, "here", {"status": "running", "pid": dead.pid, "host": socket.gethostname()})
    elsewhere = _hand_made_run(tmp_path, "there", {"status": "running", "pid": dead.pid, "host": "gpu-box-elsewhere"})
    no_host = _hand_made_run(tmp_path, "nohost", {"status": "running", "pid": dead.pid})
    assert summarize(this_host).shown_status == "crashed"
    # the same pid means some other process (or none) on another machine: the run stays "running"
    for folder in (elsewhere, no_host):
        summary = summarize(folder)
        assert (summary.alive, summary.shown_status) == (None, "running")


def test_listing_survives_a_broken_meta_json_and_follows_metrics_incrementally(tmp_path):
    cfg = load_config("ci-fast")
    good = RunDirectory.create(tmp_path, mode="ci-fast", backend="torch", config=cfg, run_id="b-good")
    _hand_made_run(tmp_path, "a-list", [1, 2, 3])  # JSON, but not an object
    (_hand_made_run(tmp_path, "c-broken", {}) / "meta.json").write_text('{"status": "runn')
    cache: dict = {}
    runs = list_runs(tmp_path, cache)
    assert [(r.run_id, r.status) for r in runs] == [("a-list", "unknown"), ("b-good", "running"),
                                                     ("c-broken", "unknown")]
    good.log_metrics(1, {"critic/score/mean": 0.2})
    good.log_metrics(2, {"critic/score/mean": 0.7})
    summary = list_runs(tmp_path, cache)[1]
    assert (summary.steps, summary.last_reward, summary.best_reward) == (2, 0.7, 0.7)
    read_before = cache[good.path][2].tail.position
    good.log_metrics(3, {"critic/score/mean": 0.5})
    summary = list_runs(tmp_path, cache)[1]
    assert (summary.steps, summary.last_reward, summary.best_reward) == (3, 0.5, 0.7)
    assert cache[good.path][2].tail.position > read_before and cache[good.path][2].tail.restarts == 0
    good.truncate_metrics_after(1)  # --resume from step 1: the best of the dropped steps is forgotten
    summary = list_runs(tmp_path, cache)[1]
    assert (summary.steps, summary.last_reward, summary.best_reward) == (1, 0.2, 0.2)


STUBBORN = r"""
import signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN if sys.argv[1] == "ignore" else lambda *a: sys.exit(130))
print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("on_sigint", ["exit", "ignore"])
def test_stop_process_interrupts_then_escalates(on_sigint):
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN, on_sigint], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert stop_child(proc, group=False, grace_s=1.0)  # stop_process with a wait that reaps the child
        # SIGINT ends a cooperative trainer (130); one that ignores it gets SIGTERM
        assert proc.returncode == (130 if on_sigint == "exit" else -signal.SIGTERM)
        assert stop_process(proc.pid, wait=lambda timeout: proc.poll() is not None)  # already gone: nothing is signalled
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()


def test_stopping_a_headless_run_needs_its_host_and_a_live_pid():
    from core.runs import local_pid

    here = socket.gethostname()
    assert local_pid({"status": "running", "pid": os.getpid(), "host": here}) == os.getpid()
    for meta, message in (({"run_id": "r", "pid": os.getpid(), "host": "elsewhere"}, "runs on host elsewhere"),
                          ({"run_id": "r", "pid": os.getpid()}, "no host"),
                          ({"run_id": "r", "host": here}, "no pid"),
                          ({"run_id": "r", "pid": 2**22 + 12345, "host": here}, "not running any more")):
        with pytest.raises(UserError, match=message):
            local_pid(meta)


def test_sysmon_sample_has_host_figures_and_gpu_keys_only_with_nvml():
    figures = sysmon.sample()
    assert figures["host/memory_total_gb"] > 0 and figures["perf/cpu_memory_used_gb"] > 0
    assert all(isinstance(v, float) for v in figures.values())
    gpu_keys = [k for k in figures if k.startswith("gpu/")]
    if sysmon.gpu_count() == 0:
        assert gpu_keys == []
    else:
        assert "gpu/0/memory_total_gb" in figures
