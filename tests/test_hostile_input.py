"""Issue 25's bad input, as a table by class: paths that are not regular files (FIFOs, devices, symlink loops) or are
too large, writers that must never replace a non-regular file, run folders the project did not write, damaged
run files of the wrong JSON type, secrets in URLs, odd characters (escape sequences, a C locale), verl keys with
impossible values.

Each row: command, input, the exit code, what the first line says (stderr's `error:` line for a failure, stdout's
first line for a success), and the files that must stay byte for byte (and of the same kind: a device stays a
device). Nothing may hang: every command runs under an alarm, so a read of a FIFO fails the row instead of the
suite. Rows with an environment run in a real subprocess (the locale is read at start-up), the rest in this process.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import signal
import stat
import sys
from pathlib import Path

import pytest

from tests.conftest import cli_in_process, run_cli, snapshot_files

GOOD_RESULTS = {"summary": {"count": 1, "failures": 0, "mean_reward": 0.5}, "results": [
    {"task_id": "k8s-001", "type": "kubernetes", "difficulty": "easy", "reward": 0.5, "dimensions": {}, "penalties": {}}]}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A real stopped run (one step, a checkpoint) and copies of it damaged one way each; FIFOs, links to devices,
    a symlink loop, a folder of someone's partial run, a file over the size limit."""
    root = tmp_path_factory.mktemp("hostile")
    runs, files = root / "runs", root / "files"
    files.mkdir()
    env = {**os.environ, "DEVOPS_RL_LOG_DIR": str(root / "logs"), "DEVOPS_RL_RUNS_DIR": str(runs)}
    made = run_cli("train", "--mode", "test", "--backend", "torch", "--set", "trainer.save_freq=1", "--run-dir",
                   str(runs / "done"), env=env)
    assert made.returncode == 0, made.stderr
    meta = json.loads((runs / "done" / "meta.json").read_text())
    (runs / "done" / "meta.json").write_text(json.dumps({**meta, "status": "stopped"}))
    for name, damage in {
        "nullid": lambda r: (r / "meta.json").write_text(json.dumps({**meta, "status": "stopped", "run_id": None})),
        "status5": lambda r: (r / "meta.json").write_text(json.dumps({**meta, "status": 5})),
        "listcfg": lambda r: (r / "checkpoints" / "global_step_1" / "config.json").write_text("[1, 2]"),
        "badrng": lambda r: (r / "checkpoints" / "global_step_1" / "rng.json").write_text('{"numpy": 1}'),
    }.items():
        shutil.copytree(runs / "done", runs / name)
        damage(runs / name)
    for name in ("fifometa", "zerometa"):  # listed beside the others: must not stop `runs list`
        shutil.copytree(runs / "done", runs / name)
        (runs / name / "meta.json").unlink()
    os.mkfifo(runs / "fifometa" / "meta.json")
    os.symlink("/dev/zero", runs / "zerometa" / "meta.json")
    os.mkfifo(files / "fifo")
    os.symlink("/dev/zero", files / "zero.yaml")
    os.symlink("loop-b", files / "loop-a")
    os.symlink("loop-a", files / "loop-b")
    (files / "mine.yaml").write_text("# my settings\n")
    os.symlink("mine.yaml", files / "link.yaml")
    with open(files / "huge.yaml", "wb") as handle:  # sparse: 70 MB on paper, nothing on disk
        handle.truncate(70 * 2**20)
    (files / "good.json").write_text(json.dumps(GOOD_RESULTS))
    (files / "answer.md").write_text("Use a pipeline with tests and a rollback.\n")
    partial = root / "partial"  # someone's partial run: no meta.json
    partial.mkdir()
    for name, text in {"config.yaml": "# theirs\n", "metrics.jsonl": '{"step": 1, "data": {}}\n', "samples.jsonl": "",
                       "events.jsonl": "", "train.log": "their log\n"}.items():
        (partial / name).write_text(text)
    bom = root / "bom.jsonl"
    bom.write_bytes(b'\xef\xbb\xbf{"step": 1, "data": {"critic/score/mean": 0.25}}\n{"step": 2, "data": {}}\n')
    return root


# class: what the row stands for. (id, class, argv, stdin, env, exit code, first line holds, files kept)
CASES = [
    # a user's path that is not a regular file: refused in one line, never waited on nor read forever
    ("config-show-fifo", "not a regular file", "config show -c {files}/fifo", None, {}, 2,
     "fifo: is a named pipe (FIFO), not a regular file", []),
    ("config-validate-fifo", "not a regular file", "config validate {files}/fifo", None, {}, 2, "named pipe (FIFO)", []),
    ("config-validate-dev-zero", "not a regular file", "config validate {files}/zero.yaml", None, {}, 2,
     "zero.yaml: is a character device", []),
    ("config-doctor-dev-zero", "not a regular file", "config doctor -c /dev/zero", None, {}, 2, "character device", []),
    ("config-verl-fifo", "not a regular file", "config verl -c {files}/fifo", None, {}, 2, "named pipe (FIFO)", []),
    ("train-config-fifo", "not a regular file", "train --mode test --config {files}/fifo", None, {}, 2,
     "named pipe (FIFO)", []),
    ("reward-answer-fifo", "not a regular file", "reward score --task k8s-001 --answer {files}/fifo", None, {}, 2,
     "named pipe (FIFO)", []),
    ("reward-task-file-dev-zero", "not a regular file",
     "reward score --task-file {files}/zero.yaml --answer {files}/answer.md", None, {}, 2, "character device", []),
    ("tasks-validate-fifo", "not a regular file", "tasks validate {files}/fifo", None, {}, 2, "1 problem", []),
    ("compare-fifo", "not a regular file", "compare {files}/fifo {files}/good.json", None, {}, 2, "named pipe (FIFO)", []),
    ("compare-dev-zero", "not a regular file", "compare {files}/good.json /dev/zero", None, {}, 2, "character device", []),
    ("config-show-symlink-loop", "not a regular file", "config show -c {files}/loop-a", None, {}, 2,
     "Too many levels of symbolic links", []),
    ("reward-answer-symlink-loop", "not a regular file", "reward score --task k8s-001 --answer {files}/loop-a", None, {},
     2, "Too many levels of symbolic links", []),
    # input past the size limit
    ("config-show-70mb", "too large", "config show -c {files}/huge.yaml", None, {}, 2, "larger than 64 MiB", []),
    ("reward-answer-stdin-endless", "too large", "reward score --task k8s-001 --answer -", "/dev/zero", {}, 2,
     "--answer - (stdin): more than 64 MiB", []),
    # a writer never replaces what is not a regular file, --force or not
    ("export-dev-full-force", "never replaced", "config export -o /dev/full --force", None, {}, 2,
     "/dev/full: is a character device, not a regular file", ["/dev/full"]),
    ("export-fifo-force", "never replaced", "config export -o {files}/fifo --force", None, {}, 2, "named pipe (FIFO)",
     ["{files}/fifo"]),
    ("export-symlink-force", "never replaced", "config export -o {files}/link.yaml --force", None, {}, 2,
     "link.yaml: is a symbolic link", ["{files}/link.yaml", "{files}/mine.yaml"]),
    ("export-dev-full", "never replaced", "config export -o /dev/full", None, {}, 2, "character device", ["/dev/full"]),
    # run folders: only a folder devops-rl wrote (or an empty or new one) is written
    ("train-foreign-folder", "run folder ownership", "train --mode test --run-dir {root}/partial", None, {}, 2,
     "holds files devops-rl did not write (config.yaml, events.jsonl", ["{root}/partial"]),
    ("train-run-dir-empty", "run folder ownership", "train --mode test --run-dir ''", None, {}, 2, "--run-dir: empty", []),
    ("train-run-dir-loop", "run folder ownership", "train --mode test --run-dir {files}/loop-a", None, {}, 2,
     "is a symbolic link that leads nowhere", []),
    ("train-run-dir-fifo", "run folder ownership", "train --mode test --run-dir {files}/fifo", None, {}, 2,
     "is a named pipe (FIFO), not a folder", []),
    ("runs-list-root-dev-zero", "run folder ownership", "runs list --root /dev/zero", None, {}, 2,
     "--root /dev/zero: not a folder", []),
    ("runs-list-root-empty", "run folder ownership", "runs list --root ''", None, {}, 2, "--root : empty", []),
    # run files of the wrong JSON type are bad input naming the file and key, never rewritten
    ("resume-meta-run-id-null", "damaged run file", "train --mode test --resume --run-dir {runs}/nullid", None, {}, 2,
     "meta.json: 'run_id' is null", ["{runs}/nullid"]),
    ("resume-meta-status-5", "damaged run file", "train --mode test --resume --run-dir {runs}/status5", None, {}, 2,
     "meta.json: 'status' is 5", ["{runs}/status5"]),
    ("resume-checkpoint-config-list", "damaged run file",
     "train --mode test --resume --run-dir {runs}/listcfg --set trainer.total_training_steps=2", None, {}, 2,
     "config.json: holds a JSON list, not an object", ["{runs}/listcfg/checkpoints"]),
    ("resume-rng-garbage", "damaged run file",
     "train --mode test --resume --run-dir {runs}/badrng --set trainer.total_training_steps=2", None, {}, 2,
     "rng.json: not the random-generator state this version writes (no 'python')", ["{runs}/badrng/checkpoints"]),
    ("runs-list-meta-fifo-and-dev-zero", "damaged run file", "runs list --root {runs}", None, {}, 0, "run ", []),
    ("tail-metrics-with-bom", "damaged run file", "tail {root}/bom.jsonl", None, {}, 0, "step", []),
    # secrets in URLs, URLs that do not parse
    ("eval-password-in-url", "secret in a URL", "eval --base-url http://user:hunter2secret@127.0.0.1:9/v1 --model m "
     "--limit 1 --retries 0 --out {root}/out.json", None, {}, 2, "http://user:***@127.0.0.1:9/v1: cannot connect", []),
    ("eval-password-in-bad-url", "secret in a URL", "eval --base-url http://u:hunter2secret@[::1/v1 --model m", None, {},
     2, "'http://u:***@[::1/v1' is not a valid URL", []),
    ("eval-url-unclosed-bracket", "URL that does not parse", "eval --base-url http://[::1/v1 --model m", None, {}, 2,
     "--base-url: 'http://[::1/v1' is not a valid URL", []),
    ("eval-url-no-host", "URL that does not parse", "eval --base-url http:///v1 --model m", None, {}, 2, "names no host",
     []),
    # odd characters: escaped on the terminal, never a logging error
    ("tasks-show-escape", "odd characters", "tasks show $'\\x1b[31mred'", None, {}, 2, "no task with id '\\x1b[31mred'",
     []),
    ("set-key-escape", "odd characters", "config show --set $'a\\x1b]0;title\\x07=1'", None, {}, 2, "a\\x1b]0;title\\x07",
     []),
    ("set-non-ascii-c-locale", "odd characters", "config show --set dätä.seed=1", None,
     {"LC_ALL": "C", "PYTHONUTF8": "0"}, 2, "error: --set d\\xe4t\\xe4.seed=1: d\\xe4t\\xe4: unknown key", []),
    ("set-bidi-override", "odd characters", "config show --set $'x\\u202eevil=1'", None, {}, 2, "x\\u202eevil", []),
    # verl keys this project passes through: typed like verl's defaults
    ("verl-clip-ratio-minus-inf", "impossible verl value", "config validate --set actor_rollout_ref.actor.clip_ratio=-.inf",
     None, {}, 2, "actor_rollout_ref.actor.clip_ratio: -inf: verl expects a finite number", []),
    ("verl-clip-ratio-banana", "impossible verl value", "config validate --set actor_rollout_ref.actor.clip_ratio=banana",
     None, {}, 2, "verl expects a number here (its default is 0.2)", []),
    ("verl-clip-ratio-bool", "impossible verl value", "config validate --set actor_rollout_ref.actor.clip_ratio=true",
     None, {}, 2, "verl expects a number", []),
    ("verl-list-number", "impossible verl value",
     "train --mode test --set actor_rollout_ref.actor.fsdp_config.qat.ignore_patterns=5", None, {}, 2,
     "qat.ignore_patterns: 5: verl expects a list", []),
]


def _fill(text: str, world: Path) -> str:
    return text.format(root=world, runs=world / "runs", files=world / "files")


def _argv(line: str, world: Path) -> list[str]:
    """shlex words, with bash's $'...' quoting for control characters."""
    words = []
    for word in shlex.split(_fill(line, world).replace("$'", "'$")):
        if word.startswith("$"):
            word = word[1:].encode().decode("unicode_escape")
        words.append(word)
    return words


def _kinds(paths: list[Path]) -> dict:
    """Each kept path's kind and, for files, bytes (every file under a folder, and its names: no file added, though a
    writer lock's text may name the last process that took it)."""
    out = {}
    for path in paths:
        mode = os.lstat(path).st_mode
        out[path] = (stat.S_IFMT(mode), os.readlink(path) if stat.S_ISLNK(mode) else None)
        if stat.S_ISDIR(mode):
            out[(path, "names")] = sorted(os.listdir(path))
            out.update({p: b for p, b in snapshot_files(path).items() if p.name != "writer.lock"})
        elif stat.S_ISREG(mode):
            out[(path, "bytes")] = path.read_bytes()
    return out


def _alarm(signum, frame):
    raise TimeoutError("the command hung (a FIFO or device read?)")


def test_the_table_covers_every_class_with_several_cases():
    classes = [c[1] for c in CASES]
    assert len({c[0] for c in CASES}) == len(CASES)
    assert all(classes.count(name) >= 2 for name in set(classes)), classes


@pytest.mark.parametrize(("case", "kind", "argv", "stdin", "env", "code", "first", "kept"), CASES, ids=[c[0] for c in CASES])
def test_hostile_input(world, capsys, monkeypatch, case, kind, argv, stdin, env, code, first, kept):
    args = _argv(argv, world)
    kept_paths = [Path(_fill(p, world)) for p in kept]
    before = _kinds(kept_paths)
    monkeypatch.setenv("DEVOPS_RL_RUNS_DIR", str(world / "runs"))
    if env:
        result = run_cli(*args, env={**os.environ, "DEVOPS_RL_RUNS_DIR": str(world / "runs"), **env}, timeout=120)
    else:
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(open(stdin, "rb")))  # noqa: SIM115 (closed with stdin)
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(120)
        try:
            result = cli_in_process(capsys, *args)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    shown = f"exit {result.returncode}\nstdout: {result.stdout[-1500:]}\nstderr: {result.stderr[-1500:]}"
    assert result.returncode == code, shown
    assert "Traceback" not in result.stderr + result.stdout and "Logging error" not in result.stderr, shown
    assert "\x1b" not in result.stderr + result.stdout and "\u202e" not in result.stderr, shown
    if code == 2:
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and first in errors[0], shown
    else:
        assert result.stdout.splitlines()[0].strip().startswith(first), shown
    assert _kinds(kept_paths) == before
    assert "hunter2secret" not in result.stderr + result.stdout


def test_runs_list_shows_the_runs_beside_a_fifo_and_a_dev_zero_meta(world, capsys):
    listed = cli_in_process(capsys, "runs", "list", "--root", str(world / "runs"), "--json")
    runs = {Path(r["path"]).name: r for r in json.loads(listed.stdout)}
    assert {"done", "nullid", "listcfg", "fifometa", "zerometa"} <= set(runs)
    assert runs["done"]["status"] == "stopped" and runs["fifometa"]["status"] == "unknown"


def test_tail_keeps_the_first_row_of_a_file_that_starts_with_a_bom(world, capsys):
    shown = cli_in_process(capsys, "tail", str(world / "bom.jsonl"))
    rows = [line.split()[0] for line in shown.stdout.splitlines()[1:]]
    assert rows == ["1", "2"], shown.stdout


def test_a_password_in_the_url_reaches_neither_the_screen_nor_the_log(world, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DEVOPS_RL_LOG_DIR", str(tmp_path / "logs"))
    result = cli_in_process(capsys, "eval", "--base-url", "http://user:hunter2secret@127.0.0.1:9/v1", "--model", "m",
                            "--limit", "1", "--retries", "0", "--out", str(tmp_path / "out.json"))
    assert result.returncode == 2
    written = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    assert "user:***@" in result.stderr + result.stdout
    assert "hunter2secret" not in result.stderr + result.stdout + written
