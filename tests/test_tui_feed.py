"""The cockpit's data side without a screen: following run files, bounded buffers, charts and alerts.

Real files written the way a crashing or restarting trainer writes them; no Textual app involved.
"""

from __future__ import annotations

import json
import math
import os

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
    assert update.log_lines == ["step 2 done"]
    state.apply(update)
    assert state.step == 2 and state.latest["reward/final/mean"] == 0.3
    assert state.samples[-1]["step"] == 2 and state.events[-1]["event"] == "checkpoint"
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
    assert not _state_with([0.1 * (i % 5) for i in range(30)]).alerts()
    nan = _state_with([0.5, float("nan")]).alerts()
    assert nan[0].level == "error" and "NaN" in nan[0].text
    flat = _state_with([0.42] * 25).alerts()
    assert any("flat" in a.text for a in flat)
    collapse = _state_with([0.6 + 0.01 * (i % 3) for i in range(20)] + [0.1 + 0.01 * (i % 3) for i in range(20)])
    assert any("collapsed" in a.text for a in collapse.alerts())


def test_alerts_for_a_stalled_and_a_vanished_run():
    state = _state_with([0.1, 0.2, 0.3])
    state.meta = {"status": "running", "pid": os.getpid(), "host": os.uname().nodename}
    assert not state.alerts()
    state.clock = lambda: 1000.0 + 500
    assert any("no new step" in a.text for a in state.alerts())
    state.meta = {"status": "running", "pid": 2**22 + 12345, "host": os.uname().nodename}
    assert any("is gone" in a.text for a in state.alerts()) and state.status() == "running?"
    state.meta["host"] = "another-box"  # there the pid means nothing: no alert, no guessed status
    assert not any("is gone" in a.text for a in state.alerts()) and state.status() == "running"


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


def test_memory_chart_prefers_gpu_figures_and_falls_back_to_host():
    from devops_tui.screens.live import memory_keys, memory_label

    gpu = ["actor/perf/max_memory_allocated_gb", "gpu/0/memory_used_gb", "gpu/0/memory_total_gb",
           "perf/cpu_memory_used_gb", "host/memory_used_gb"]
    assert memory_keys(gpu) == gpu[:3]
    assert [memory_label(k) for k in memory_keys(gpu)] == ["allocated", "gpu0 used", "gpu0 total"]
    host = ["perf/cpu_memory_used_gb", "host/memory_used_gb", "host/memory_total_gb", "actor/pg_loss"]
    assert [memory_label(k) for k in memory_keys(host)] == ["process", "host used", "host total"]


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
    assert state.alerts()[0].text == "run failed: NaN in actor/pg_loss at step 2"
    assert describe_event({"time": "t", "event": "checkpoint", "step": 4, "path": "checkpoints/global_step_4"}) == \
        "checkpoint: step 4, path checkpoints/global_step_4"
