"""The cockpit's data side without a screen: following run files, bounded buffers, charts and alerts.

Real files written the way a crashing or restarting trainer writes them; no Textual app involved.
"""

from __future__ import annotations

import json
import math
import os
import time

import pytest

from core.runs import FileTail, list_runs
from devops_tui.runfeed import RunFeed, RunUpdate, thin_history
from devops_tui.runstate import RunState
from devops_tui.series import Series, smooth
from devops_tui.widgets.chart import axis_label, bucket_by_step


def _row(step: int, **data: float) -> str:
    return json.dumps({"step": step, "data": data}) + "\n"


def test_tail_keeps_partial_line_until_its_newline_arrives(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(_row(1, x=1.0) + '{"step": 2, "da')
    tail = FileTail(path)
    assert [json.loads(line)["step"] for line in tail.poll()] == [1]
    assert tail.poll() == []
    with open(path, "a") as handle:
        handle.write('ta": {"x": 2.0}}\n')
    assert [json.loads(line)["step"] for line in tail.poll()] == [2]


def test_tail_rereads_a_truncated_or_replaced_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(_row(1, x=1.0) + _row(2, x=2.0))
    tail = FileTail(path)
    assert len(tail.poll()) == 2
    path.write_text(_row(1, x=9.0))  # truncated and rewritten (a --resume that drops later steps)
    assert [json.loads(line)["data"]["x"] for line in tail.poll()] == [9.0]
    replacement = tmp_path / "new.jsonl"
    replacement.write_text(_row(5, x=5.0) + _row(6, x=6.0) + _row(7, x=7.0))
    os.replace(replacement, path)  # a new file under the same name
    assert [json.loads(line)["step"] for line in tail.poll()] == [5, 6, 7]
    assert tail.restarts == 2


def test_tail_of_a_big_log_starts_near_its_end(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("".join(f"line {i}\n" for i in range(100_000)))
    tail = FileTail(path, from_end=1000)
    lines = tail.poll()
    assert lines[-1] == b"line 99999"
    assert 50 < len(lines) < 120  # only the end was read, and no half line at the cut
    assert all(line.startswith(b"line ") for line in lines)


def test_series_memory_is_bounded_but_spans_the_whole_run():
    series = Series(capacity=64)
    for step in range(100_000):
        series.append(step, float(step))
    assert len(series) < 64
    assert series.steps[0] == 0 and series.steps[-1] > 95_000
    assert series.last_step == 99_999 and series.last_value == 99_999.0


def test_history_of_100k_rows_is_thinned_and_keeps_the_last_row(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with open(run / "metrics.jsonl", "w") as handle:
        for step in range(1, 100_001):
            handle.write(_row(step, **{"reward/final/mean": step / 100_000}))
        handle.write('{"step": 100001, "data": {"rew')  # a writer died mid-line
    feed = RunFeed(run, history_capacity=2048)
    assert feed.poll()
    rows = feed.drain().metrics
    assert len(rows) <= 2049
    assert rows[0]["step"] == 1 and rows[-1]["step"] == 100_000
    with open(run / "metrics.jsonl", "a") as handle:  # the partial line was left for the follower
        handle.write('ard/final/mean": 1.0}}\n')
    assert feed.poll() and [r["step"] for r in feed.drain().metrics] == [100_001]
    picked, stride = thin_history([b"%d" % i for i in range(10)], capacity=4)
    assert (picked, stride) == ([b"0", b"4", b"8", b"9"], 4)


def test_feed_follows_new_rows_samples_events_and_log(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text(json.dumps({"run_id": "run", "status": "running", "total_steps": 4}))
    (run / "metrics.jsonl").write_text(_row(1, **{"reward/final/mean": 0.1}))
    (run / "train.log").write_text("hello\n")
    feed = RunFeed(run)
    state = RunState()
    assert feed.poll()
    state.apply(feed.drain())
    assert state.step == 1 and state.meta["status"] == "running"
    with open(run / "metrics.jsonl", "a") as handle:
        handle.write(_row(2, **{"reward/final/mean": 0.3}))
    (run / "samples.jsonl").write_text(json.dumps({"step": 2, "samples": [{"task_id": "t", "reward": 0.3}]}) + "\n")
    (run / "events.jsonl").write_text(json.dumps({"event": "checkpoint", "step": 2}) + "\n")
    with open(run / "train.log", "a") as handle:
        handle.write("step 2 done\n")
    assert feed.poll()
    update = feed.drain()
    assert update.log_lines == ["step 2 done"] and update.samples_changed
    state.apply(update)
    assert state.step == 2 and state.latest["reward/final/mean"] == 0.3
    assert feed.samples.steps() == [2] and feed.samples.load(2) == [{"task_id": "t", "reward": 0.3}]
    assert state.events[-1]["event"] == "checkpoint"
    assert not feed.poll()  # nothing new, nothing announced


def test_feed_reads_a_plain_verl_file_logger_jsonl(tmp_path):
    path = tmp_path / "verl_metrics.jsonl"
    path.write_text(_row(1, **{"critic/score/mean": 0.2}) + _row(2, **{"critic/score/mean": 0.4}))
    feed = RunFeed(path)
    feed.poll()
    state = RunState()
    state.apply(feed.drain())
    assert state.reward_key() == "critic/score/mean"
    assert state.series["critic/score/mean"].values == [0.2, 0.4]


def test_pending_log_lines_are_bounded_when_the_ui_does_not_drain(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    feed = RunFeed(run)
    for burst in range(5):
        with open(run / "train.log", "a") as handle:
            handle.write("".join(f"{burst} {i}\n" for i in range(1000)))
        feed.poll()
    lines = feed.drain().log_lines
    assert len(lines) == 1000 and lines[-1] == "4 999"


def _state_with(values, key="reward/final/mean", **extra):
    state = RunState(clock=lambda: 1000.0)
    rows = [{"step": i + 1, "data": {key: v, **extra}} for i, v in enumerate(values)]
    state.apply(RunUpdate(metrics=rows))
    return state


def test_alerts_for_nan_flat_and_collapsing_reward():
    # A sawtooth is not flat and does not collapse; going nowhere, it is not learning (core.runs.health).
    assert [a.kind for a in _state_with([0.1 * (i % 5) for i in range(30)]).alerts()] == ["not_learning"]
    nan = _state_with([0.5, float("nan"), 0.5]).alerts()  # the next finite step does not clear it
    assert nan[0].level == "error" and "NaN" in nan[0].message and nan[0].step == 2
    null = _state_with([0.5, None, 0.4])  # how metrics.jsonl stores a NaN: it alerts, and is not "the last value"
    assert null.alerts()[0].kind == "nan" and null.series["reward/final/mean"].values[1] != 0.5
    flat = _state_with([0.42] * 25).alerts()
    assert any(a.kind == "reward_flat" and a.series == "reward/final/mean" for a in flat)
    collapse = _state_with([0.6 + 0.01 * (i % 3) for i in range(20)] + [0.1 + 0.01 * (i % 3) for i in range(20)])
    (alert,) = [a for a in collapse.alerts() if a.kind == "reward_collapse"]
    assert alert.step == 40 and "from 0.61" in alert.message


def test_alerts_for_a_stalled_and_a_vanished_run():
    state = _state_with([0.1, 0.2, 0.3])
    state.meta = {"status": "running", "pid": os.getpid(), "host": os.uname().nodename}
    assert not state.alerts()
    state.clock = lambda: 1000.0 + 500
    assert any(a.kind == "stalled" for a in state.alerts())
    state.meta = {"status": "running", "pid": 2**22 + 12345, "host": os.uname().nodename}
    assert state.alerts()[0].kind == "crashed" and state.status() == "crashed"
    assert state.status_text() == "crashed at step 3"
    state.meta["host"] = "another-box"  # there the pid means nothing: no alert, no guessed status
    assert not any(a.kind == "crashed" for a in state.alerts()) and state.status() == "running"


def test_errors_stay_pinned_until_acknowledged_and_go_to_the_history():
    state = _state_with([0.5, float("nan"), 0.5])
    state.meta = {"status": "failed", "message": "NaN in actor/pg_loss at step 2"}
    shown = state.shown_alerts()
    assert [a.kind for a in shown] == ["nan", "failed"]  # errors first, the earliest step first
    state.meta = {"status": "running", "pid": os.getpid(), "host": os.uname().nodename}  # resumed: failed cleared
    assert [a.kind for a in state.shown_alerts()] == ["nan", "failed"]  # ... but still shown until acknowledged
    assert state.acknowledge(state.shown_alerts()) == 2 and state.shown_alerts() == []
    assert {r.alert.kind for r in state.history} == {"nan", "failed"}


def test_eta_from_step_timing_and_total_steps():
    state = _state_with([0.1] * 10, **{"timing_s/step": 2.0})
    state.meta = {"total_steps": 40}
    assert state.eta_seconds() == pytest.approx(60.0)


def test_chart_buckets_points_by_step_not_by_index():
    # A thinned history (every 100th step) followed by dense recent steps must stay in step order.
    steps = list(range(0, 10_000, 100)) + list(range(10_000, 10_050))
    values = [float(s) for s in steps]
    cols = bucket_by_step(steps, values, 50, steps[0], steps[-1])
    finite = [v for v in cols if math.isfinite(v)]
    assert finite == sorted(finite)
    assert cols[0] == pytest.approx(0.0, abs=300) and cols[-1] > 9_900


def test_smoothing_and_axis_labels():
    assert smooth([1.0, 1.0, 1.0]) == pytest.approx([1.0, 1.0, 1.0])  # debiased: no pull towards 0
    assert len(axis_label(0.000123)) <= 6 and len(axis_label(-123456.0)) <= 6


def test_memory_charts_split_device_and_host_figures():
    from devops_tui.livecharts import memory_keys, memory_label

    gpu = ["actor/perf/max_memory_allocated_gb", "gpu/0/memory_used_gb", "gpu/0/memory_total_gb",
           "perf/cpu_memory_used_gb", "host/memory_used_gb"]
    assert [memory_label(k) for k in memory_keys(gpu)] == ["allocated", "gpu0 used", "gpu0 total"]
    assert [memory_label(k) for k in memory_keys(gpu, device=False)] == ["host used"]
    host = ["perf/cpu_memory_used_gb", "host/memory_used_gb", "host/memory_total_gb", "actor/pg_loss"]
    assert [memory_label(k) for k in memory_keys(host)] == ["process"]  # no GPU: the process beside its peaks
    assert [memory_label(k) for k in memory_keys(host, device=False)] == ["host used", "host total"]


def test_runs_listing_reads_only_what_was_appended(tmp_path):
    for name, status in (("20261130-160000-ci-fast-0001", "finished"), ("20261130-170000-ci-fast-0002", "finished")):
        run = tmp_path / name
        run.mkdir()
        (run / "meta.json").write_text(json.dumps({"run_id": name, "status": status}))
        rows = _row(1, **{"reward/final/mean": 0.2}) + _row(2, **{"reward/final/mean": 0.5})
        (run / "metrics.jsonl").write_text(rows)
    (tmp_path / ".cockpit").mkdir()
    cache: dict = {}
    rows = list_runs(tmp_path, cache)
    assert [r.run_id for r in rows] == ["20261130-160000-ci-fast-0001", "20261130-170000-ci-fast-0002"]
    assert (rows[1].steps, rows[1].last_reward, rows[1].best_reward) == (2, 0.5, 0.5)
    read = {path: digest.tail.position for path, (_, _, digest) in cache.items()}
    with open(tmp_path / rows[0].run_id / "metrics.jsonl", "a") as handle:
        handle.write(_row(3, **{"reward/final/mean": 0.9}))
    rows = list_runs(tmp_path, cache)
    assert rows[0].best_reward == 0.9 and rows[1].best_reward == 0.5
    grown = {path.name for path, (_, _, digest) in cache.items() if digest.tail.position != read[path]}
    assert grown == {"20261130-160000-ci-fast-0001"}


def test_a_failed_run_says_why_and_events_read_as_one_line():
    from devops_tui.screens.live import describe_event

    state = _state_with([0.1, 0.2])
    state.meta = {"status": "failed", "message": "NaN in actor/pg_loss at step 2"}
    assert state.alerts()[0].message == "run failed: NaN in actor/pg_loss at step 2"
    assert state.status_text() == "failed: NaN in actor/pg_loss at step 2"
    assert describe_event({"time": "t", "event": "checkpoint", "step": 4, "path": "checkpoints/global_step_4"}) == \
        "checkpoint: step 4, path checkpoints/global_step_4"


def test_a_stopped_run_says_how_far_it_got_of_its_plan(tmp_path):
    state = _state_with([0.1] * 12, **{"training/total_steps": 21})
    state.meta = {"status": "stopped", "total_steps": 12}  # a final status stamps the last step in meta.json
    assert state.status_text() == "stopped at 12 of 21" and state.total_steps() == 21
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("trainer:\n  total_training_steps: 30\n")
    older = _state_with([0.1] * 5)  # a trainer that did not log the plan: the config says it
    older.meta, older.folder = {"status": "stopped"}, run
    assert older.status_text() == "stopped at 5 of 30"


def test_exact_figures_of_a_thinned_history_include_rows_the_charts_skipped(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with open(run / "metrics.jsonl", "w") as handle:
        for step in range(1, 10_001):
            value = None if step == 4_999 else (9.0 if step == 5_001 else step / 10_000)
            handle.write(_row(step, **{"actor/pg_loss": value}))
    feed, state = RunFeed(run, history_capacity=256), RunState()
    feed.poll()
    state.apply(feed.drain())
    assert state.stride > 1 and not state.exact()
    for _ in range(5):  # the exact figures arrive a slice per poll, once the thinned history was drawn
        feed.poll()
        state.apply(feed.drain())
    figures = state.figures()["actor/pg_loss"]
    assert state.exact() and (figures.count, figures.non_finite, figures.max) == (10_000, 1, 9.0)
    assert any(a.kind == "nan" and a.step == 4_999 for a in state.alerts())


def test_sample_index_reads_any_step_and_one_prompt_across_steps(tmp_path):
    from devops_tui.samples import SampleIndex

    path = tmp_path / "samples.jsonl"
    with open(path, "w") as handle:
        for step in range(1, 6):
            samples = [{"task_id": task, "group": f"{step}-{task}", "response": f"{task} at {step}", "reward": step / 10}
                       for task in ("k8s-001", "sec-001" if step % 2 else "net-001")]
            handle.write(json.dumps({"step": step, "samples": samples}) + "\n")
    index = SampleIndex(path)
    assert index.refresh() and index.steps() == [1, 2, 3, 4, 5]
    assert [s["response"] for s in index.load(3)] == ["k8s-001 at 3", "sec-001 at 3"]
    assert [step for step, _ in index.load_prompt("sec-001")] == [1, 3, 5]
    path.write_text(json.dumps({"step": 1, "samples": [{"task_id": "x"}]}) + "\n")  # --resume rewrote it
    index.refresh()
    assert index.steps() == [1] and index.load(1) == [{"task_id": "x"}]


def test_verl_rollout_dumps_give_per_dimension_curves(tmp_path):
    """A verl run not started by devops-rl: its file-logger JSONL and rollout_data_dir dumps beside it."""
    from tasks import load_tasks

    task = next(t for t in load_tasks() if t.reference_answer)
    (tmp_path / "metrics.jsonl").write_text(_row(1, **{"critic/score/mean": 0.5}) + _row(2, **{"critic/score/mean": 0.6}))
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    for step in (1, 2):
        rows = [{"input": f"system\n{task.desc}", "output": task.reference_answer if i else "no idea", "score": i,
                 "gts": None, "step": step} for i in (0, 1)]
        (dumps / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(dumps / f"{step}.jsonl", (0, 0))  # settled: verl's writer is done with it
    feed, state = RunFeed(tmp_path / "metrics.jsonl"), RunState()
    deadline = time.monotonic() + 120
    while "reward/security/mean" not in state.series or len(state.series["reward/security/mean"]) < 2:
        assert time.monotonic() < deadline, "no per-dimension curve from the dumps"
        feed.poll()
        state.apply(feed.drain())
        time.sleep(0.2)
    feed.close()
    assert state.series["reward/security/mean"].steps == [1, 2]
    assert state.series["rollout/score/mean"].values == [0.5, 0.5]
    assert [s["response"] for s in feed.samples.load(2)] == ["no idea", task.reference_answer]
