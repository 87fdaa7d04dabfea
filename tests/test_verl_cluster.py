"""`devops-rl train --backend verl` against a real Ray cluster on a CPU box, as far as CPU allows: a Ray head
with logical CPUs, a fake GPU and token authentication, the real launcher and child, verl's real TaskRunner,
TransferQueue, datasets and worker spawn. It ends where verl's FSDP workers need CUDA/NCCL, as a failed run.

Every Ray process the test starts is in the head's process group, which is killed at the end whatever happens.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
HEAD_CPUS = 8  # logical: enough for one reduced run (1 + 1 + 3), too few for verl's default TransferQueue (12)
SMALL = ("verl_overrides.actor_rollout_ref.rollout.agent.num_workers=1", "verl_overrides.reward.num_workers=1")
ONE_TQ_UNIT = "verl_overrides.transfer_queue.backend.SimpleStorage.num_data_storage_units=1"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _group_members(pgid: int) -> list[int]:
    """Live processes of a process group (a dead one waiting to be reaped is not running anything)."""
    members = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.getpgid(int(entry.name)) == pgid:
                if (entry / "stat").read_text().rpartition(")")[2].split()[0] != "Z":
                    members.append(int(entry.name))
        except (ProcessLookupError, FileNotFoundError):
            pass
    return members


def _stop_group(pgid: int) -> list[int]:
    """SIGTERM the head's group (Ray drains for up to 30 s), then SIGKILL; returns what survived both."""
    for sig, grace in ((signal.SIGTERM, 40.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return []
        deadline = time.monotonic() + grace
        while _group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.5)
    return _group_members(pgid)


@pytest.fixture(scope="module")
def ray_head():
    """`ray start --head --block` on 127.0.0.1 with its own temp dir, ports and token; yields (address, the
    environment a driver needs: the token as docs/gpu.md tells users to pass it)."""
    temp = Path(tempfile.mkdtemp(prefix="drl-ray-", dir="/tmp"))  # short: Ray's socket paths have a length limit
    (temp / "token").write_text(uuid.uuid4().hex)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(temp / "token")}
    port = _free_port()
    command = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
               f"--port={port}", f"--num-cpus={HEAD_CPUS}", "--num-gpus=1", f"--temp-dir={temp}",
               "--include-dashboard=false", "--disable-usage-stats", f"--dashboard-port={_free_port()}",
               f"--ray-client-server-port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}",
               f"--metrics-export-port={_free_port()}"]
    log = temp / "head.log"
    with open(log, "wb") as out:
        head = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **auth})
    try:
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in log.read_text(errors="replace"):
            assert head.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        yield f"127.0.0.1:{port}", auth
    finally:
        survivors = _stop_group(head.pid)
        head.wait(timeout=10)
        shutil.rmtree(temp, ignore_errors=True)
        assert not survivors, f"Ray processes left behind: {survivors}"


def _train(head, run: Path, *overrides: str, startup_limit_s: int | str = 300, auth: dict | None = None):
    """The CLI as a user runs it, in its own session so a timeout can stop it and its verl child."""
    address, head_auth = head
    command = [sys.executable, "-m", "core.cli.main", "train", "--backend", "verl", "--mode", "ci-fast",
               "--ray-address", address, "--run-dir", str(run)]
    for override in overrides:
        command += ["--set", override]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DEVOPS_RL_VERL_STARTUP_TIMEOUT_S": str(startup_limit_s),
           **(head_auth if auth is None else auth)}
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    with subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as cli:
        try:
            out, err = cli.communicate(timeout=540)
        except subprocess.TimeoutExpired:
            os.killpg(cli.pid, signal.SIGKILL)  # its verl child follows (parent-death signal)
            out, err = cli.communicate()
            pytest.fail(f"devops-rl train did not end in 540 s:\n{err[-3000:]}")
    return subprocess.CompletedProcess(command, cli.returncode, out, err)


def _read(run: Path) -> tuple[dict, list[dict]]:
    from core.runs import read_jsonl

    return json.loads((run / "meta.json").read_text()), read_jsonl(run / "verl" / "startup.jsonl")


def test_verl_reaches_worker_spawn_with_its_sync_trainer_and_the_reward_dimension_hook(ray_head, tmp_path):
    from omegaconf import OmegaConf

    run = tmp_path / "run"
    result = _train(ray_head, run, ONE_TQ_UNIT, *SMALL)
    meta, notes = _read(run)
    log = (run / "train.log").read_text(errors="replace")
    assert result.returncode == 1, result.stderr[-3000:]  # the run failed (no CUDA here), not bad input
    # verl's TaskRunner ran ours: verl's own "sync" trainer with the per-dimension metrics...
    assert [note["stage"] for note in notes] == ["runner", "trainer"], log[-3000:]
    assert {k: notes[0][k] for k in ("mode", "verl_trainer", "trainer", "reward_metrics")} == {
        "mode": "sync", "verl_trainer": "PPOTrainerSync", "trainer": "DevopsPPOTrainerSync", "reward_metrics": True}
    assert notes[1]["trainer"] == "DevopsPPOTrainerSync"  # ...and verl itself built that class
    assert "create worker group" in log  # verl's own line once its FSDP workers are spawned
    composed = OmegaConf.load(run / "verl" / "config.yaml")
    assert composed.trainer.v1.trainer_mode == "sync"
    assert "VERL_USE_EXTERNAL_MODULES" not in composed.ray_kwargs.ray_init.runtime_env.env_vars
    # The failure is the worker's own error, not Ray's coloured wrapper around it.
    message = meta["message"]
    assert meta["status"] == "failed" and message.split(":")[0].endswith("Error"), message
    assert not any(text in message for text in ("RayTaskError", "ray::", "\x1b")), message
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: verl training failed: {message} (full log: {run / 'train.log'})"]


def test_a_cluster_with_too_few_cpus_fails_at_once_saying_how_many_verl_needs(ray_head, tmp_path):
    """verl's default TransferQueue holds 9 CPUs, its GPU worker 3: verl would wait for them forever."""
    run = tmp_path / "run"
    result = _train(ray_head, run, *SMALL)
    meta, notes = _read(run)
    assert result.returncode == 1, result.stderr[-3000:]
    assert [note["stage"] for note in notes] == ["runner"]
    assert meta["message"] == (
        f"the Ray cluster has {HEAD_CPUS} CPUs for Ray but verl needs 12 (TransferQueue 1 + 8 storage units, 3 per "
        "GPU x 1 GPU); set verl_overrides.transfer_queue.backend.SimpleStorage.num_data_storage_units=4 (fewer "
        "TransferQueue units), start its nodes with more (ray start --num-cpus=N counts logical CPUs), or use "
        "fewer GPUs")


HOLDER = """
import sys, time
import ray
ray.init(address=sys.argv[1])
holder = ray.remote(num_cpus=int(sys.argv[2]))(type("Holder", (), {"ready": lambda self: True})).remote()
ray.get(holder.ready.remote())
print("holding", flush=True)
time.sleep(3600)
"""


STUCK_LIMIT_S = 20  # the watchdog's limit for the stage that hangs: long enough to tell a hang from a slow step


def test_a_start_stuck_waiting_for_ray_fails_with_the_stage_it_hung_in(ray_head, tmp_path):
    """Another job holds CPUs the check counted: verl's GPU worker waits for them forever, silently."""
    free_after_holder = 4  # TransferQueue takes 2 of them, the GPU worker's placement wants 3
    address, auth = ray_head
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, address, str(HEAD_CPUS - free_after_holder)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True, env={**os.environ, **auth})
    try:
        assert holder.stdout.readline().strip() == "holding"
        run = tmp_path / "run"
        # Patient until verl builds its trainer (slow on a loaded box), short for the stage that hangs.
        result = _train(ray_head, run, ONE_TQ_UNIT, *SMALL, startup_limit_s=f"300,trainer={STUCK_LIMIT_S}")
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    meta, notes = _read(run)
    assert result.returncode == 1, result.stderr[-3000:]
    assert [note["stage"] for note in notes] == ["runner", "trainer"]
    waited = re.match(r"verl made no start-up progress for (\d+) s after stage 'trainer': verl's workers never came "
                      r"up", meta["message"])
    assert meta["status"] == "failed" and waited and int(waited.group(1)) >= STUCK_LIMIT_S, meta["message"]


def test_a_driver_without_the_clusters_token_is_told_how_to_pass_it(ray_head, tmp_path):
    run = tmp_path / "run"
    result = _train(ray_head, run, ONE_TQ_UNIT, *SMALL, auth={"RAY_AUTH_MODE": "disabled"})
    meta, notes = _read(run)
    assert result.returncode == 1, result.stderr[-3000:]
    assert notes == []
    assert meta["message"].startswith("Ray could not start: ConnectionError: Failed to connect to Ray cluster")
    assert "the cluster wants its token; export RAY_AUTH_MODE=token and RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH" \
        in meta["message"]
