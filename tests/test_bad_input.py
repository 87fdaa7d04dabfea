"""The bad-input table for every command outside the agent's (eval, compare and serve have their own in
test_agent_bad_input.py): binary, non-UTF-8, empty, huge and wrongly typed input, paths that cannot be
written, a second writer, damaged runs. Each case must give exactly one `error:` line naming what to fix,
exit 2 and no traceback, and leave every run folder, checkpoint and result that was there byte for byte.

The commands run in this process (`core.cli.main.main`), so the table costs no interpreter start-ups; the
world they run against holds a real finished run, made once by a real `devops-rl train`.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_files_unchanged, assert_user_error, cli_in_process, run_cli, snapshot_files

LONG = "r" * 5000  # a run id or file name far past the file system's 255 bytes
BINARY = bytes(range(256)) * 16  # every byte value: NULs, control characters and sequences UTF-8 forbids


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Runs (finished, stopped, damaged, locked by a live process), a result file, and bad files of every kind."""
    root = tmp_path_factory.mktemp("world")
    runs = root / "runs"
    env = {**os.environ, "DEVOPS_RL_LOG_DIR": str(root / "logs"), "DEVOPS_RL_RUNS_DIR": str(runs)}
    made = run_cli("train", "--mode", "test", "--backend", "torch", "--set", "trainer.total_training_steps=2", "--set",
                   "trainer.save_freq=1", "--run-dir", str(runs / "done"), env=env)
    assert made.returncode == 0, made.stderr
    (runs / "done" / "eval" / "eval_results_20260101-000000.json").write_text(json.dumps({"results": [1, 2]}))
    for name in ("stopped", "held", "nockpt", "emptycfg", "listy", "broken"):
        shutil.copytree(runs / "done", runs / name)
    meta = json.loads((runs / "stopped" / "meta.json").read_text())
    (runs / "stopped" / "meta.json").write_text(json.dumps({**meta, "status": "stopped", "message": "stopped by SIGINT"}))
    for folder in (runs / "nockpt" / "checkpoints").glob("global_step_*"):
        shutil.rmtree(folder)
    (runs / "emptycfg" / "config.yaml").write_text("")
    (runs / "listy" / "meta.json").write_text("[1, 2]")
    (runs / "broken" / "meta.json").write_text('{"run_id": "broken", "status": ')

    files = root / "files"
    files.mkdir()
    write = {
        "bin.yaml": BINARY,
        "latin1.yaml": "data:\n  seed: 1\n# caf\xe9\n".encode("latin-1"),
        "empty.yaml": b"",
        "list.yaml": b"- data\n- trainer\n",
        "dup.yaml": b"data:\n  seed: 1\ntrainer:\n  total_epochs: 1\ndata:\n  shuffle: false\n",
        "wrongtype.yaml": b"data:\n  train_batch_size: many\n",
        "huge.yaml": ("data:\n" + "".join(f"  key_{i}: {i}\n" for i in range(200_000))).encode(),
        "bomb.yaml": ("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefg", "bcdefgh"))).encode(),
        "existing.yaml": b"# mine\n",
        "notes.txt": b"some notes\nnot metrics\n",
        "bin.dat": BINARY,
        "task_latin1.yaml": "- id: x-001\n  type: ci_cd\n  desc: caf\xe9\n".encode("latin-1"),
        "task_bin.yaml": BINARY,
        "task_empty.yaml": b"",
        "answer.md": b"Use a pipeline with tests and a rollback.\n",
        "answer_latin1.md": "r\xe9sum\xe9 of the fix\n".encode("latin-1"),
        "afile": b"a file where a folder belongs\n",
    }
    for name, data in write.items():
        (files / name).write_bytes(data)
    model = root / "badmodel"
    from core.training.tiny_model import ensure_tiny_model

    shutil.copytree(ensure_tiny_model(), model)
    (model / "model.safetensors").write_bytes((model / "model.safetensors").read_bytes()[:4096])

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from core.runs import RunDirectory; "
                               "RunDirectory(sys.argv[1]).hold_lock(); print('holding', flush=True); time.sleep(3600)",
                               str(runs / "held")], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "holding"
    yield root
    holder.kill()
    holder.wait()


# (id, argv with {runs} {files} {root} {model} {long} placeholders, environment overrides, stdin bytes, what the
# error line must hold, what else stderr must hold)
CASES = [
    # config: files of every kind
    ("config-show-binary", "config show -c {files}/bin.yaml", {}, None, "not UTF-8", None),
    ("config-validate-latin1", "config validate {files}/latin1.yaml", {}, None,
     "latin1.yaml:3: the config file is not UTF-8", None),
    ("config-show-empty", "config show -c {files}/empty.yaml", {}, None, "the config file is empty", None),
    ("config-validate-list", "config validate {files}/list.yaml", {}, None, "must be a YAML mapping", None),
    ("config-validate-duplicate", "config validate {files}/dup.yaml", {}, None, "lines 1 and 5", None),
    ("config-show-bomb", "config show -c {files}/bomb.yaml", {}, None, "anchor bomb", None),
    ("config-validate-bomb", "config validate {files}/bomb.yaml", {}, None, "anchor bomb", None),
    ("config-validate-wrong-type", "config validate {files}/wrongtype.yaml", {}, None, "data.train_batch_size: 'many'", None),
    ("config-validate-huge", "config validate {files}/huge.yaml", {}, None, "unknown key", None),
    ("config-show-missing", "config show -c {files}/missing.yaml", {}, None, "no such config file", None),
    ("config-show-folder", "config show -c {files}", {}, None, "is a folder", None),
    ("config-show-long-name", "config show -c {files}/{long}.yaml", {}, None, "File name too long", None),
    ("config-doctor-latin1", "config doctor -c {files}/latin1.yaml", {}, None, "not UTF-8", None),
    ("config-verl-empty", "config verl -c {files}/empty.yaml", {}, None, "the config file is empty", None),
    ("config-diff-binary", "config diff {files}/bin.yaml ci-fast", {}, None, "not UTF-8", None),
    ("config-diff-unknown", "config diff nothing ci-fast", {}, None, "neither a file nor a preset", None),
    # config: --set values
    ("set-bool-for-int", "config validate --set data.train_batch_size=true", {}, None, "a number is expected", None),
    ("set-bool-for-float", "config show --set actor_rollout_ref.actor.optim.lr=false", {}, None, "a number is expected", None),
    ("set-list-for-int", "config show --set data.train_batch_size=[1,2]", {}, None, "valid integer", None),
    ("set-huge-int", "config validate --set data.train_batch_size=99999999999999999999999", {}, None,
     "less than or equal to 1048576", None),
    ("set-5000-digits", "config show --set data.train_batch_size=" + "9" * 5000, {}, None, "a value cannot be read", None),
    ("set-infinite", "config validate --set actor_rollout_ref.actor.optim.lr=.inf", {}, None, "finite number", None),
    ("set-negative-seed", "config show --set devops.seed=-1", {}, None, "greater than or equal to 0", None),
    ("set-seed-too-big", "config show --set data.seed=4294967296", {}, None, "less than or equal to 4294967295", None),
    ("set-batch-over-tasks", "config validate --preset ci-fast --set data.train_batch_size=112", {}, None,
     "111 training tasks", None),
    ("set-recursive-alias", "config show --set 'data.seed=&a [*a]'", {}, None, "refers to the block", None),
    ("set-no-equals", "config show --set data.seed", {}, None, "expected KEY=VALUE", None),
    ("set-unknown-key", "config show --set data.train_bach_size=2", {}, None, "did you mean", None),
    ("set-kl-full", "config validate --set algorithm.kl_penalty=full", {}, None, "unknown KL estimator", None),
    ("config-unknown-preset", "config show --preset fastest", {}, None, "unknown preset", None),
    # config export
    ("export-existing", "config export -o {files}/existing.yaml", {}, None, "exists; add --force", None),
    ("export-folder", "config export -o {files}", {}, None, "is a folder", None),
    ("export-under-a-file", "config export -o {files}/afile/x.yaml", {}, None, "no folder", None),
    # train: input files and values
    ("train-config-binary", "train --mode test --config {files}/bin.yaml", {}, None, "not UTF-8", None),
    ("train-config-empty", "train --mode test --config {files}/empty.yaml", {}, None, "the config file is empty", None),
    ("train-config-bomb", "train --mode test --config {files}/bomb.yaml", {}, None, "anchor bomb", None),
    ("train-unknown-mode", "train --mode fastest", {}, None, "unknown mode", None),
    ("train-negative-seed", "train --mode test --seed -1", {}, None, "greater than or equal to 0", None),
    ("train-huge-seed", "train --mode test --seed 99999999999999999999999", {}, None, "less than or equal to 4294967295", None),
    ("train-batch-over-tasks", "train --mode test --set data.train_batch_size=500", {}, None, "111 training tasks", None),
    ("train-bool-batch", "train --mode test --set data.train_batch_size=true", {}, None, "a number is expected", None),
    ("train-zero-runners", "train --mode test --n-runners 0", {}, None, "--n-runners", None),
    ("train-truncated-model", "train --mode test --backend torch --model {model} --run-dir {root}/new1", {}, None,
     "model.safetensors: not a complete safetensors file", None),
    ("train-missing-model", "train --mode test --backend torch --model {root}/nomodel --run-dir {root}/new2", {}, None,
     "no such folder", None),
    # train: run folders
    ("train-run-dir-is-file", "train --mode test --run-dir {files}/afile", {}, None, "is a file", None),
    ("train-run-dir-under-file", "train --mode test --backend torch --run-dir {files}/afile/run", {}, None,
     "is a file, not a folder", None),
    ("train-run-dir-long", "train --mode test --run-dir {root}/{long}", {}, None, "File name too long", None),
    ("train-run-dir-holds-run", "train --mode test --run-dir {runs}/done", {}, None, "already holds a run", None),
    ("train-runs-dir-is-file", "train --mode test --backend torch", {"DEVOPS_RL_RUNS_DIR": "{files}/afile"}, None,
     "the runs folder", None),
    ("train-cache-dir-is-file", "train --mode test --backend torch --run-dir {root}/new3",
     {"DEVOPS_RL_CACHE_DIR": "{files}/afile"}, None, "the cache folder", None),
    ("resume-not-a-run", "train --mode test --resume --run-dir {files}", {}, None, "not a run folder", None),
    ("resume-finished", "train --mode test --resume --run-dir {runs}/done", {}, None, "already finished all 2 steps", None),
    ("resume-second-writer", "train --mode test --resume --run-dir {runs}/held", {}, None, "is writing this run", None),
    ("resume-checkpoints-deleted", "train --mode test --resume --run-dir {runs}/nockpt", {}, None, "none is left", None),
    ("resume-empty-config", "train --mode test --resume --run-dir {runs}/emptycfg", {}, None, "config.yaml is empty", None),
    ("resume-meta-list", "train --mode test --resume --run-dir {runs}/listy", {}, None, "not a JSON object", None),
    ("resume-meta-broken", "train --mode test --resume --run-dir {runs}/broken", {}, None, "not a JSON object", None),
    ("resume-bad-set", "train --mode test --resume --run-dir {runs}/stopped --set data.train_batch_size=true", {}, None,
     "a number is expected", None),
    ("resume-none-of-mode", "train --mode single-gpu --resume", {}, None, "no run of mode 'single-gpu'", None),
    # sft
    ("sft-output-exists", "sft --output {runs}/done", {}, None, "exists; sft replaces the whole folder", None),
    ("sft-output-under-file", "sft --output {files}/afile/model", {}, None, "is a file, not a folder", None),
    ("sft-zero-steps", "sft --steps 0", {}, None, "--steps", None),
    # tail and tui
    ("tail-not-metrics", "tail {files}/notes.txt", {}, None, "not a metrics file", None),
    ("tail-follow-binary", "tail --follow {files}/bin.dat", {}, None, "not a metrics file", None),
    ("tail-unknown-run", "tail 20990101-nothing", {}, None, "no run", None),
    ("tail-long-id", "tail {long}", {}, None, "File name too long", None),
    ("tail-folder-not-run", "tail {files}", {}, None, "not a run folder", None),
    ("tail-zero-lines", "tail {runs}/done --lines 0", {}, None, "--lines", None),
    ("tui-attach-not-metrics", "tui --attach {files}/notes.txt", {}, None, "not a metrics file", None),
    ("tui-attach-unknown", "tui --attach 20990101-nothing", {}, None, "no run", None),
    # tasks
    ("tasks-validate-latin1", "tasks validate {files}/task_latin1.yaml", {}, None, "1 problem", "not UTF-8"),
    ("tasks-validate-binary", "tasks validate {files}/task_bin.yaml", {}, None, "1 problem", "task_bin.yaml"),
    ("tasks-validate-empty", "tasks validate {files}/task_empty.yaml", {}, None, "1 problem", "the file is empty"),
    ("tasks-validate-bomb", "tasks validate {files}/bomb.yaml", {}, None, "1 problem", "anchor bomb"),
    ("tasks-validate-no-files", "tasks validate {runs}/done/eval", {}, None, "1 problem", "no task files"),
    ("tasks-show-unknown", "tasks show k8s-9999", {}, None, "no task with id", None),
    ("tasks-list-bad-type", "tasks list --type k8s", {}, None, "--type", None),
    ("tasks-stats-bad-fraction", "tasks stats --val-fraction 5", {}, None, "val_fraction", None),
    # reward
    ("reward-answer-latin1", "reward score --task k8s-001 --answer {files}/answer_latin1.md", {}, None, "not UTF-8", None),
    ("reward-answer-stdin-binary", "reward score --task k8s-001 --answer -", {}, b"\xff\xfe\x00binary", "stdin", None),
    ("reward-answer-missing", "reward score --task k8s-001 --answer {files}/none.md", {}, None, "no such file", None),
    ("reward-answer-folder", "reward score --task k8s-001 --answer {files}", {}, None, "is a folder", None),
    ("reward-task-file-latin1", "reward score --task-file {files}/task_latin1.yaml --answer {files}/answer.md", {}, None,
     "not UTF-8", None),
    ("reward-task-file-binary", "reward score --task-file {files}/task_bin.yaml --answer {files}/answer.md", {}, None,
     "task_bin.yaml", None),
    ("reward-task-file-empty", "reward score --task-file {files}/task_empty.yaml --answer {files}/answer.md", {}, None,
     "the file is empty", None),
    ("reward-no-task", "reward score --answer {files}/answer.md", {}, None, "exactly one of", None),
    ("reward-unknown-task", "reward score --task k8s-9999 --answer {files}/answer.md", {}, None, "no task with id", None),
    ("reward-audit-unknown-task", "reward audit --task k8s-9999", {}, None, "no task with id", None),
    # runs
    ("runs-show-unknown", "runs show 20990101-nothing", {}, None, "no run", None),
    ("runs-show-long-id", "runs show {long}", {}, None, "File name too long", None),
    ("runs-show-file", "runs show {files}/notes.txt", {}, None, "no run", None),
]


def _fill(text: str, world: Path) -> str:
    return text.format(runs=world / "runs", files=world / "files", root=world, model=world / "badmodel", long=LONG)


def test_the_table_covers_every_command_and_class():
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)
    commands = {" ".join(c[1].split()[:2]) if c[1].split()[0] in ("config", "tasks", "reward", "runs") else c[1].split()[0]
                for c in CASES}
    assert {"config show", "config validate", "config export", "config diff", "config doctor", "config verl", "train",
            "sft", "tail", "tui", "tasks validate", "tasks show", "tasks list", "tasks stats", "reward score",
            "reward audit", "runs show"} <= commands


@pytest.mark.parametrize(("case", "argv", "env", "stdin", "fragment", "detail"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_loses_nothing(world, capsys, monkeypatch, case, argv, env, stdin, fragment,
                                                        detail):
    monkeypatch.setenv("DEVOPS_RL_RUNS_DIR", str(world / "runs"))
    for name, value in env.items():
        monkeypatch.setenv(name, _fill(value, world))
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    args = [_fill(part, world) for part in shlex.split(argv)]
    before = {p: b for p, b in snapshot_files(world / "runs").items() if p.name != "writer.lock"}
    result = cli_in_process(capsys, *args)
    assert_user_error(result, fragment)
    if detail is not None:
        assert detail in result.stderr, result.stderr
    assert_files_unchanged(before)
    assert sorted(p.name for p in (world / "runs").iterdir()) == sorted(
        ["done", "stopped", "held", "nockpt", "emptycfg", "listy", "broken"])  # no run folder made
