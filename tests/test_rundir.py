"""The run folder: writers, the tolerant readers (`read_jsonl`, `follow`), listing, secrets, and the sampler.

Followers are checked against real writer subprocesses that append partial lines, truncate, replace files,
and write verl's file-logger format exactly as verl 0.9 does (orjson, unbuffered, `{"step", "data"}`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from core.errors import UserError
from core.training import sysmon
from core.training.config import load_config
from core.training.rundir import (
    JsonlTail,
    RunDirectory,
    follow,
    follow_metrics,
    list_runs,
    read_jsonl,
)

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


def collect_follow(path: Path, proc: subprocess.Popen, **kwargs) -> tuple[list[dict], int]:
    restarts = []
    records = list(follow(path, poll_interval=0.01, stop=lambda: proc.poll() is not None,
                          on_restart=lambda: restarts.append(1), **kwargs))
    assert proc.wait(timeout=60) == 0
    return records, len(restarts)


def test_follow_reads_a_writer_subprocess_line_by_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    proc = run_writer(WRITER, path, 30, 0)
    records, restarts = collect_follow(path, proc)
    assert [r["step"] for r in records] == list(range(1, 31))  # every line once, in order, no half lines
    assert restarts == 0


def test_follow_rereads_a_file_truncated_by_a_restarted_writer(tmp_path):
    path = tmp_path / "metrics.jsonl"
    proc = run_writer(WRITER, path, 12, 6)
    seen: list[int] = []
    for record in follow(path, poll_interval=0.01, stop=lambda: proc.poll() is not None,
                         on_restart=lambda: seen.append(-1)):
        seen.append(record["step"])
    assert proc.wait(timeout=60) == 0
    # whatever the reader caught before the restart (-1), after it come the new file's lines, in order
    after_restart = seen[len(seen) - seen[::-1].index(-1):] if -1 in seen else seen
    assert after_restart == list(range(6, 13))
    assert [r["step"] for r in read_jsonl(path)] == list(range(6, 13))


def test_tail_notices_truncation_replacement_and_in_place_rewrite(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 6)))
    tail = JsonlTail(path)
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
    tail.close()


def test_tail_keeps_a_partial_line_until_its_newline(tmp_path):
    path = tmp_path / "m.jsonl"
    tail = JsonlTail(path)
    assert tail.poll_records() == []  # not there yet
    with open(path, "ab", buffering=0) as fp:
        fp.write(b'{"step": 1, "da')
        assert tail.poll_records() == []
        fp.write(b'ta": {}}\n{"step": 2')
        assert tail.poll_records() == [{"step": 1, "data": {}}]
        fp.write(b"}\n")
        assert tail.poll_records() == [{"step": 2}]
    tail.close()


def test_follow_reads_verl_file_logger_jsonl(tmp_path):
    path = tmp_path / "verl.jsonl"
    proc = run_writer(VERL_WRITER, path)
    assert proc.wait(timeout=60) == 0
    pairs = list(follow_metrics(path, poll_interval=0.01, stop=lambda: True))
    assert [step for step, _ in pairs] == [1, 2, 3]
    assert pairs[1][1]["actor/pg_loss"] == pytest.approx(0.25)
    assert pairs[0][1]["actor/grad_norm"] is None  # orjson writes NaN as null
    from_end = list(follow(path, from_start=False, poll_interval=0.01, stop=lambda: True))
    assert from_end == []


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
    code = ("import sys; from core.training.config import load_config; from core.training.rundir import RunDirectory; "
            "RunDirectory.create(sys.argv[1], mode='train', backend='verl', config=load_config(), run_id='20260102-000000-train-bbbb')")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, check=True, timeout=120)
    runs = list_runs()
    assert [r.run_id for r in runs] == ["20260101-000000-ci-fast-aaaa", "20260102-000000-train-bbbb"]
    done, dead = runs
    assert (done.status, done.steps, done.best_reward, done.last_reward) == ("finished", 3, 0.6, 0.4)
    assert dead.status == "running" and dead.alive is False and dead.shown_status == "running?"
    assert RunDirectory.open("20260101").path == first.path
    assert RunDirectory.open(first.path).run_id == first.run_id
    with pytest.raises(UserError, match="ambiguous"):
        RunDirectory.open("2026")
    with pytest.raises(UserError, match="no run 'nope'"):
        RunDirectory.open("nope")


def test_follow_waits_for_the_file_and_stops_when_told(tmp_path):
    path = tmp_path / "late.jsonl"
    stop = threading.Event()
    got: list[dict] = []

    def reader():
        got.extend(follow(path, poll_interval=0.01, stop=stop.is_set))

    thread = threading.Thread(target=reader)
    thread.start()
    path.write_text('{"step": 1}\n')
    while not got and thread.is_alive():
        thread.join(0.01)
    stop.set()
    thread.join(30)
    assert not thread.is_alive() and got == [{"step": 1}]


def test_sysmon_sample_has_host_figures_and_gpu_keys_only_with_nvml():
    figures = sysmon.sample()
    assert figures["host/memory_total_gb"] > 0 and figures["perf/cpu_memory_used_gb"] > 0
    assert all(isinstance(v, float) for v in figures.values())
    gpu_keys = [k for k in figures if k.startswith("gpu/")]
    if sysmon.gpu_count() == 0:
        assert gpu_keys == []
    else:
        assert "gpu/0/memory_total_gb" in figures
