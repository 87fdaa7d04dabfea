"""The GRPO health checks (`core.runs.health`) on metric rows shaped like a real run's, and the run status line."""

from __future__ import annotations

import math

from core.runs import HealthMonitor, Thresholds, run_alerts, status_text
from core.runs.health import Alert


def _feed(monitor: HealthMonitor, rows: list[dict], start: int = 1) -> HealthMonitor:
    for i, data in enumerate(rows):
        monitor.add(start + i, data)
    return monitor


def kinds(monitor: HealthMonitor) -> set[str]:
    return {a.kind for a in monitor.active()}


def test_entropy_collapse_is_judged_against_the_runs_own_start():
    # A run that starts at 0.04 nats is not collapsing at 0.035 (a fixed 0.05 threshold would say it is)...
    low = _feed(HealthMonitor(), [{"actor/entropy": 0.04 - 0.0002 * i} for i in range(30)])
    assert "entropy_collapse" not in kinds(low)
    # ... while one that falls from 2.0 to 0.2 is, and the alert names the series, the step and the start.
    falling = _feed(HealthMonitor(), [{"actor/entropy": 2.0 * 0.9**i} for i in range(25)])
    (alert,) = [a for a in falling.active() if a.kind == "entropy_collapse"]
    assert alert.series == "actor/entropy" and alert.step == 25 and "start (1.64)" in alert.message


def test_entropy_near_uniform_needs_the_vocabulary_size():
    rows = [{"actor/entropy": 7.5} for _ in range(10)]
    assert "entropy_uniform" not in kinds(_feed(HealthMonitor(), rows))
    assert "entropy_uniform" in kinds(_feed(HealthMonitor(vocab_size=2048), rows))  # ln 2048 = 7.62


def test_zero_variance_groups_and_truncated_answers():
    monitor = _feed(HealthMonitor(), [{"critic/score/zero_std_ratio": 0.1, "response_length/clip_ratio": 0.0}] * 10
                    + [{"critic/score/zero_std_ratio": 0.8, "response_length/clip_ratio": 0.6}] * 10)
    by_kind = {a.kind: a for a in monitor.active()}
    assert "(from 10%)" in by_kind["zero_std_groups"].message
    assert by_kind["clip_ratio"].series == "response_length/clip_ratio" and by_kind["clip_ratio"].step == 20


def test_hacking_is_a_dimension_rising_while_the_rubric_stays_flat():
    honest = [{"reward/rubric/mean": 0.2 + 0.02 * i, "reward/documentation/mean": 0.2 + 0.02 * i} for i in range(20)]
    assert "hacking" not in kinds(_feed(HealthMonitor(), honest))
    gamed = [{"reward/rubric/mean": 0.3 + 0.001 * (i % 2), "reward/documentation/mean": 0.2 + 0.03 * i,
              "reward/keyword_stuffing/mean": 0.0} for i in range(20)]
    (alert,) = [a for a in _feed(HealthMonitor(), gamed).active() if a.kind == "hacking"]
    assert alert.series == "reward/documentation/mean" and "rubric score stayed" in alert.message


def test_new_alerts_are_announced_once_and_again_after_they_cleared():
    monitor = HealthMonitor(Thresholds(window=4))
    _feed(monitor, [{"response_length/clip_ratio": 1.0}])
    assert [a.kind for a in monitor.poll_new()] == ["clip_ratio"]
    _feed(monitor, [{"response_length/clip_ratio": 1.0}], start=2)
    assert monitor.poll_new() == []
    _feed(monitor, [{"response_length/clip_ratio": 0.0}], start=3)
    assert monitor.poll_new() == [] and "clip_ratio" not in kinds(monitor)
    _feed(monitor, [{"response_length/clip_ratio": 1.0}], start=4)
    assert [a.kind for a in monitor.poll_new()] == ["clip_ratio"]


def test_nan_and_null_stay_alerting_and_reset_forgets():
    monitor = _feed(HealthMonitor(), [{"actor/pg_loss": 0.1}, {"actor/pg_loss": None, "actor/grad_norm": math.inf},
                                      {"actor/pg_loss": 0.1}])
    (alert,) = monitor.active()
    assert (alert.kind, alert.level, alert.series, alert.step) == ("nan", "error", "actor/grad_norm", 2)
    assert "actor/grad_norm, actor/pg_loss" in alert.message
    assert Alert.from_event({"event": "alert", **alert.to_event()}) == alert  # the events.jsonl round trip
    monitor.reset()
    assert monitor.active() == []


def test_thresholds_come_from_a_config_section_and_the_model_defaults_match():
    from core.training.config import TrainingConfig

    assert Thresholds.from_mapping(TrainingConfig().devops.alerts.model_dump()) == Thresholds()
    assert Thresholds.from_mapping({"window": 7, "unknown": 1}).window == 7
    # every threshold can be set in the config (devops.alerts), the 'not learning' one included
    import dataclasses

    assert {f.name for f in dataclasses.fields(Thresholds)} == set(TrainingConfig().devops.alerts.model_dump())
    custom = TrainingConfig.model_validate({"devops": {"alerts": {"learning_min_rise": 0.3}}})
    assert Thresholds.from_mapping(custom.devops.alerts.model_dump()).learning_min_rise == 0.3


def test_run_alerts_and_the_status_line():
    assert run_alerts({"status": "failed", "message": "CUDA out of memory\ntraceback..."}, alive=None,
                      quiet_s=None, seconds_per_step=None)[0].message == "run failed: CUDA out of memory"
    crashed = run_alerts({"status": "running", "pid": 7}, alive=False, quiet_s=None, seconds_per_step=None, last_step=9)
    assert crashed[0].kind == "crashed" and "after step 9" in crashed[0].message
    stalled = run_alerts({"status": "running"}, alive=True, quiet_s=400, seconds_per_step=10.0)
    assert stalled[0].kind == "stalled"
    slow = run_alerts({"status": "running"}, alive=True, quiet_s=400, seconds_per_step=100.0)  # 5 steps' time
    assert slow == []
    assert status_text("stopped", {}, 12, 21) == "stopped at 12 of 21"
    assert status_text("failed", {"message": "bad\nmore"}, 3) == "failed: bad"
    assert status_text("crashed", {}, 7) == "crashed at step 7"
    assert status_text("finished", {}, 21, 21) == "finished"


# critic/score/mean of a real `devops-rl train --mode ci-fast` run (builtin:tiny after its SFT warm-start, 27 steps,
# 2026-12-05): between 0.000 and 0.066 throughout, the noise a per-step mean over 16 answers has.
CI_FAST_REWARD = [0.046, 0.0115, 0.0076, 0.0052, 0.0023, 0.0296, 0.0049, 0.0656, 0.0, 0.0127, 0.0027, 0.014, 0.0204,
                  0.0061, 0.0234, 0.0185, 0.0061, 0.0057, 0.0033, 0.0061, 0.0139, 0.0316, 0.0533, 0.0156, 0.0069,
                  0.0077, 0.0047]


def test_a_noisy_reward_that_never_rises_is_not_learning_and_a_rising_one_is():
    # Issue 24 item 6: the flat check needs a spread under 1e-3, which these noisy means never reach.
    stuck = _feed(HealthMonitor(), [{"critic/score/mean": v} for v in CI_FAST_REWARD])
    (alert,) = [a for a in stuck.active() if a.kind.startswith("reward") or a.kind == "not_learning"]
    assert alert.kind == "not_learning" and alert.series == "critic/score/mean" and alert.step == 27
    assert "vs 0.0145 at the start" in alert.message and "not learning" in alert.message
    assert "not_learning" not in kinds(_feed(HealthMonitor(), [{"critic/score/mean": v} for v in CI_FAST_REWARD[:19]]))
    # The same noise on a reward that climbs 0.01 a step (0.27 over the run) is learning.
    rising = _feed(HealthMonitor(), [{"critic/score/mean": v + 0.01 * i} for i, v in enumerate(CI_FAST_REWARD)])
    assert "not_learning" not in kinds(rising)
    # Noise far larger than the rise: a rise of 0.03 in a reward that jumps by 0.4 a step proves nothing.
    noisy = _feed(HealthMonitor(), [{"critic/score/mean": 0.3 + 0.4 * (i % 2) + 0.001 * i} for i in range(30)])
    assert "not_learning" in kinds(noisy)


def test_the_crash_hint_is_the_whole_resume_command():
    # Issue 24 item 9: it said `resume with train --resume`, which is no command a user can paste.
    meta = {"status": "running", "pid": 2**22 + 7, "mode": "ci-fast"}
    (alert,) = run_alerts(meta, alive=False, quiet_s=None, seconds_per_step=None, last_step=7, folder="runs/r1")
    assert alert.kind == "crashed" and alert.message.endswith(
        "resume with: devops-rl train --mode ci-fast --run-dir runs/r1 --resume")
