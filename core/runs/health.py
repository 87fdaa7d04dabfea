"""GRPO health alerts computed from a run's metric rows: NaN/inf, entropy collapse or near-uniform entropy,
a flat, collapsing or not-learning reward, zero-variance groups, truncated answers, reward hacking, and a stalled or dead run.

Pure and cheap (bounded windows, no textual, no torch): the trainer writes each new alert as an `alert` event,
the cockpit and `tail` compute the same alerts for runs written by others. Thresholds: `devops.alerts`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

REWARD_SERIES = ("critic/score/mean", "reward/final/mean")  # the training reward, as core.runs.summary reads it
ENTROPY = "actor/entropy"
ZERO_STD = "critic/score/zero_std_ratio"
CLIP_RATIO = "response_length/clip_ratio"
RUBRIC = "reward/rubric/mean"
LEVELS = ("error", "warning")  # most severe first


@dataclass(frozen=True)
class Thresholds:
    """When each alert fires; the config's `devops.alerts` section has the same keys (docs/config.md)."""

    window: int = 20
    baseline_steps: int = 5
    entropy_collapse_ratio: float = 0.2
    entropy_uniform_share: float = 0.9
    reward_flat_tolerance: float = 1e-3
    reward_collapse_ratio: float = 0.5
    learning_min_rise: float = 0.02
    zero_std_ratio_max: float = 0.5
    clip_ratio_max: float = 0.2
    hacking_rise: float = 0.15
    hacking_rubric_flat: float = 0.02
    stall_after_s: float = 300.0

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> Thresholds:
        """Thresholds from a config section (unknown keys ignored, missing keys at their defaults)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (values or {}).items() if k in names and v is not None})


@dataclass(frozen=True)
class Alert:
    """Something to look at now, with the series and step that triggered it; `level` is "error" or "warning"."""

    kind: str
    level: str
    series: str
    step: int | None
    message: str
    value: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        """What makes two alerts the same one (the same check on the same series)."""
        return self.kind, self.series

    def to_event(self) -> dict[str, Any]:
        """The fields of an `alert` line in events.jsonl (`check` names the kind: `kind` is the event's own word)."""
        fields = asdict(self)
        fields["check"] = fields.pop("kind")
        return fields

    @classmethod
    def from_event(cls, record: Mapping[str, Any]) -> Alert | None:
        """An alert back from an `alert` event (None when the line is not one)."""
        if record.get("event") != "alert" or not isinstance(record.get("check"), str):
            return None
        step = record.get("step")
        value = record.get("value")
        return cls(kind=record["check"], level=record.get("level") if record.get("level") in LEVELS else "warning",
                   series=str(record.get("series") or ""), step=step if isinstance(step, int) else None,
                   message=str(record.get("message") or record["kind"]),
                   value=float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None)


def by_severity(alerts: Iterable[Alert]) -> list[Alert]:
    """Errors first, then warnings; the earliest step first within a level."""
    return sorted(alerts, key=lambda a: (LEVELS.index(a.level) if a.level in LEVELS else 9,
                                         a.step if a.step is not None else math.inf))


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else math.nan


class _Recent:
    """The last `size` (step, value) points of one series; a second value for the same step replaces the first."""

    __slots__ = ("points",)

    def __init__(self, size: int) -> None:
        self.points: deque[tuple[int, float]] = deque(maxlen=size)

    def add(self, step: int, value: float) -> None:
        if self.points and self.points[-1][0] == step:
            self.points.pop()
        self.points.append((step, value))

    @property
    def values(self) -> list[float]:
        return [v for _, v in self.points]

    @property
    def full(self) -> bool:
        return len(self.points) == self.points.maxlen


class HealthMonitor:
    """Follows metric rows and says which health alerts fire: `active()` now, `poll_new()` those that just began.

    NaN/inf (a `null` in metrics.jsonl is one) stays active once seen: a diverged run does not heal. The trend
    checks look at the last `window` steps of each series, so the cost per row is a few deque operations.
    """

    def __init__(self, thresholds: Thresholds | None = None, *, vocab_size: int | None = None) -> None:
        self.thresholds = thresholds or Thresholds()
        self.vocab_size = vocab_size
        self.reset()

    def reset(self) -> None:
        """Forget everything (the metrics file was rewritten, e.g. by --resume)."""
        t = self.thresholds
        self._recent: dict[str, _Recent] = {}
        self._entropy_start: list[float] = []
        self._reward_start: dict[str, list[float]] = {}  # each reward series' first `baseline_steps` values
        self._best_reward: tuple[float, int] | None = None  # best mean over half a window, and its last step
        self._non_finite: dict[str, int] = {}  # series -> first step with NaN/inf
        self._nan_alerts: list[Alert] = []
        self._announced: set[tuple[str, str]] = set()
        self._half = max(1, t.window // 2)
        self.last_step: int | None = None

    # -- input ------------------------------------------------------------------------------------
    def _watched(self, key: str) -> bool:
        return key in (ENTROPY, ZERO_STD, CLIP_RATIO, *REWARD_SERIES) or (
            key.startswith("reward/") and key.endswith("/mean"))

    def add(self, step: int, data: Mapping[str, Any]) -> None:
        """One metrics row (`data` of a `{"step", "data"}` line); non-numbers other than null are ignored."""
        bad: list[str] = []
        for key, value in data.items():
            if value is None or (isinstance(value, float) and not math.isfinite(value)):
                if key not in self._non_finite:
                    self._non_finite[key] = step
                    bad.append(key)
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not self._watched(key):
                continue
            recent = self._recent.get(key)
            if recent is None:
                recent = self._recent[key] = _Recent(self.thresholds.window)
            recent.add(step, float(value))
            if key == ENTROPY and len(self._entropy_start) < self.thresholds.baseline_steps:
                self._entropy_start.append(float(value))
            if key in REWARD_SERIES:
                start = self._reward_start.setdefault(key, [])
                if len(start) < self.thresholds.baseline_steps:
                    start.append(float(value))
        if bad:
            bad.sort()
            shown = ", ".join(bad[:4]) + (f" and {len(bad) - 4} more" if len(bad) > 4 else "")
            self._nan_alerts.append(Alert(
                "nan", "error", bad[0], step,
                f"NaN/inf in {shown} at step {step}: the update diverged; lower the learning rate, check the "
                "last good checkpoint"))
        reward = self.reward_key()
        if reward is not None and reward in data:
            values = self._recent[reward].values if reward in self._recent else []
            if len(values) >= self._half:
                mean = _mean(values[-self._half:])
                if self._best_reward is None or mean > self._best_reward[0]:
                    self._best_reward = (mean, step)
        self.last_step = step if self.last_step is None else max(self.last_step, step)

    def add_rows(self, rows: Iterable[tuple[int, Mapping[str, Any]]]) -> None:
        for step, data in rows:
            self.add(step, data)

    def reward_key(self) -> str | None:
        return next((k for k in REWARD_SERIES if k in self._recent), None)

    # -- output -----------------------------------------------------------------------------------
    def active(self) -> list[Alert]:
        """Every alert the rows seen so far raise, most severe first."""
        alerts = list(self._nan_alerts)
        for check in (self._entropy, self._reward, self._zero_std, self._clip_ratio, self._hacking):
            alerts += check()
        return by_severity(alerts)

    def poll_new(self) -> list[Alert]:
        """The alerts that began firing since the last call (one that clears and fires again counts again)."""
        active = self.active()
        keys = {a.key for a in active}
        new = [a for a in active if a.key not in self._announced]
        self._announced = keys
        return new

    # -- the checks -------------------------------------------------------------------------------
    def _entropy(self) -> list[Alert]:
        t = self.thresholds
        recent = self._recent.get(ENTROPY)
        if recent is None or len(self._entropy_start) < t.baseline_steps:
            return []
        step, value = recent.points[-1]
        start = _mean(self._entropy_start)
        out = []
        if start > 0 and len(recent.points) >= min(t.window, t.baseline_steps * 2) \
                and value < t.entropy_collapse_ratio * start:
            out.append(Alert("entropy_collapse", "warning", ENTROPY, step,
                             f"entropy {_fmt(value)} at step {step} is {value / start:.0%} of the run's start "
                             f"({_fmt(start)}): the policy is collapsing; add entropy_coeff or lower the lr", value))
        if self.vocab_size and self.vocab_size > 1:
            uniform = math.log(self.vocab_size)
            if value >= t.entropy_uniform_share * uniform:
                out.append(Alert("entropy_uniform", "warning", ENTROPY, step,
                                 f"entropy {_fmt(value)} at step {step} is near uniform (ln {self.vocab_size} = "
                                 f"{uniform:.2f}): answers are noise; lower the lr or the temperature", value))
        return out

    def _reward(self) -> list[Alert]:
        t = self.thresholds
        key = self.reward_key()
        recent = self._recent.get(key) if key else None
        if recent is None or not recent.full:
            return []
        values = recent.values
        step = recent.points[-1][0]
        out = []
        spread = max(values) - min(values)
        if spread < t.reward_flat_tolerance:
            out.append(Alert("reward_flat", "warning", key, step,
                             f"{key} flat at {_fmt(values[-1])} over steps {recent.points[0][0]}-{step} (spread "
                             f"{spread:.1e}): no learning signal; raise the lr, the temperature or rollout.n", values[-1]))
        now = _mean(values[-self._half:])
        if self._best_reward is not None:
            best, best_step = self._best_reward
            if best > 0.05 and now < t.reward_collapse_ratio * best:
                out.append(Alert("reward_collapse", "warning", key, step,
                                 f"{key} fell to {_fmt(now)} at step {step} from {_fmt(best)} (step {best_step}): "
                                 "check the samples for reward hacking; lower the lr or raise the KL", now))
        return out or self._not_learning(key, recent, now)  # flat or collapsing already says it

    def _not_learning(self, key: str, recent: _Recent, now: float) -> list[Alert]:
        """The reward's recent level is not above the run's own start, and its trend over the window does not
        promise it will be: noisy per-step means never pass the flat check, so the rise is judged against the
        noise (twice the standard error of the two means compared) and at least `learning_min_rise`."""
        t = self.thresholds
        start_values = self._reward_start.get(key) or []
        if len(start_values) < t.baseline_steps or recent.points[0][0] <= len(start_values):
            return []  # the window must lie after the start it is compared with
        start = _mean(start_values)
        values = recent.values
        steps = [s for s, _ in recent.points]
        mean_step, mean_value = _mean(steps), _mean(values)
        spread = sum((s - mean_step) ** 2 for s in steps)
        slope = sum((s - mean_step) * (v - mean_value) for s, v in recent.points) / spread if spread else 0.0
        variance = sum((v - mean_value) ** 2 for v in values) / max(len(values) - 1, 1)
        noise = 2 * math.sqrt(variance * (1 / self._half + 1 / len(start_values)))
        needed = max(t.learning_min_rise, noise)
        ahead = slope * len(values)
        if now - start >= needed or ahead >= needed:
            return []
        step = recent.points[-1][0]
        return [Alert("not_learning", "warning", key, step,
                      f"{key} at {_fmt(now)} over the last {self._half} steps (to step {step}) vs {_fmt(start)} at the "
                      f"start, trend {ahead:+.2g} per {len(values)} steps: not learning; look at the samples, raise "
                      "the lr, rollout.n or the temperature", now)]

    def _zero_std(self) -> list[Alert]:
        recent = self._recent.get(ZERO_STD)
        if recent is None or len(recent.points) < self._half:
            return []
        values = recent.values
        now = _mean(values[-self._half:])
        if now < self.thresholds.zero_std_ratio_max:
            return []
        before = _mean(values[:-self._half]) if len(values) > self._half else math.nan
        trend = f" (from {before:.0%})" if math.isfinite(before) and before < now else ""
        step = recent.points[-1][0]
        return [Alert("zero_std_groups", "warning", ZERO_STD, step,
                      f"{now:.0%} of prompt groups have zero reward variance at step {step}{trend}: they teach "
                      "nothing; raise rollout.n or the temperature, or turn on algorithm.filter_groups", now)]

    def _clip_ratio(self) -> list[Alert]:
        recent = self._recent.get(CLIP_RATIO)
        size = max(1, self.thresholds.window // 4)
        if recent is None or len(recent.points) < size:
            return []
        now = _mean(recent.values[-size:])
        if now < self.thresholds.clip_ratio_max:
            return []
        step = recent.points[-1][0]
        return [Alert("clip_ratio", "warning", CLIP_RATIO, step,
                      f"{now:.0%} of answers cut at max_response_length (steps to {step}): raise "
                      "data.max_response_length or penalise length", now)]

    def _hacking(self) -> list[Alert]:
        """A dimension or penalty rising while the task rubric stays flat: the policy found a shortcut."""
        t = self.thresholds
        rubric = self._recent.get(RUBRIC)
        if rubric is None or not rubric.full:
            return []
        half = self._half
        rubric_values = rubric.values
        rubric_move = _mean(rubric_values[-half:]) - _mean(rubric_values[:half])
        if abs(rubric_move) >= t.hacking_rubric_flat:
            return []
        out = []
        skip = {RUBRIC, *REWARD_SERIES, ZERO_STD, CLIP_RATIO}
        for key, recent in sorted(self._recent.items()):
            if key in skip or not key.startswith("reward/") or not recent.full:
                continue
            values = recent.values
            before, now = _mean(values[:half]), _mean(values[-half:])
            if now - before >= t.hacking_rise:
                name = key.split("/")[1]
                step = recent.points[-1][0]
                out.append(Alert("hacking", "warning", key, step,
                                 f"{name} rose {_fmt(before)} -> {_fmt(now)} over steps {recent.points[0][0]}-{step} "
                                 f"while the rubric score stayed at {_fmt(rubric_values[-1])}: look at the samples "
                                 "for a shortcut the rubric does not reward", now))
        return out


def resume_command(meta: Mapping[str, Any], folder: Any = None) -> str:
    """The whole command that resumes a run (its folder when known, else the newest resumable run of its mode)."""
    command = "devops-rl train"
    if meta.get("mode"):
        command += f" --mode {meta['mode']}"
    if folder is not None:
        command += f" --run-dir {folder}"
    return command + " --resume"


def run_alerts(meta: Mapping[str, Any], *, alive: bool | None, quiet_s: float | None,
               seconds_per_step: float | None, thresholds: Thresholds | None = None,
               last_step: int | None = None, folder: Any = None) -> list[Alert]:
    """Alerts about the run's process rather than its numbers: failed, crashed (its process is gone while
    meta.json says running; the hint is the whole resume command, for the run `folder`), stalled (no new step
    for `stall_after_s`, or 5 steps' time when slower)."""
    t = thresholds or Thresholds()
    status = meta.get("status")
    if status == "failed":
        cause = str(meta.get("message") or "see train.log").strip().splitlines()
        return [Alert("failed", "error", "meta.json", last_step, f"run failed: {cause[0] if cause else 'see train.log'}")]
    if status != "running":
        return []
    if alive is False:
        return [Alert("crashed", "error", "meta.json", last_step,
                      f"process {meta.get('pid')} is gone but meta.json says running: the run crashed"
                      + (f" after step {last_step}" if last_step is not None else "")
                      + f"; see train.log, resume with: {resume_command(meta, folder)}")]
    if quiet_s is not None:
        limit = max(t.stall_after_s, 5 * (seconds_per_step or 0.0))
        if quiet_s > limit:
            return [Alert("stalled", "warning", "metrics.jsonl", last_step,
                          f"no new step for {quiet_s:.0f}s (after step {last_step}): stalled? see the Log tab")]
    return []
