"""A run's metrics, samples and alerts in other tools' formats: TensorBoard event files and W&B (offline) runs.

`devops-rl export RUN` copies a run folder; the native trainer writes live through the same writers when
`trainer.logger` lists `tensorboard` or `wandb`, where verl's own Tracking would put them. tensorboard and
wandb are imported only here, inside the writers (the `export` extra of pyproject.toml installs them).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from core.errors import UserError

log = logging.getLogger(__name__)

SAMPLES_TAG = "samples"
ALERTS_TAG = "alerts"
CONFIG_TAG = "config"
TEXT_CHARS = 4000  # of one answer in a text summary; the run folder keeps the whole answer


class Tracker(Protocol):
    def log_metrics(self, step: int, data: Mapping[str, Any]) -> None: ...
    def log_samples(self, step: int, samples: list[dict]) -> None: ...
    def log_text(self, step: int, tag: str, text: str) -> None: ...
    def close(self, exit_code: int = 0) -> None: ...


def scalars(data: Mapping[str, Any]) -> dict[str, float]:
    """The numeric values of a metrics row as floats; null (a NaN/inf the writer could not store) becomes NaN."""
    out: dict[str, float] = {}
    for key, value in data.items():
        if value is None:
            out[key] = math.nan
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    return out


def _number(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def samples_markdown(samples: list[dict]) -> str:
    """One step's samples as markdown: task, group, reward and advantage, the prompt and the answer."""
    parts = []
    for sample in samples:
        head = f"### {sample.get('task_id') or '?'}"
        if sample.get("group") is not None:
            head += f" (group {sample['group']})"
        figures = f"reward {_number(sample.get('reward'))}"
        if sample.get("advantage") is not None:
            figures += f", advantage {_number(sample.get('advantage'), 2)}"
        answer = str(sample.get("response") or "")
        cut = "\n[... cut]" if len(answer) > TEXT_CHARS else ""
        prompt = str(sample.get("prompt") or "").strip()
        parts.append(f"{head}\n\n{figures}\n\n" + (f"> {prompt[:500]}\n\n" if prompt else "")
                     + "```\n" + answer[:TEXT_CHARS].replace("```", "'''") + cut + "\n```\n")
    return "\n".join(parts)


def sample_rows(step: int, samples: list[dict]) -> list[list[Any]]:
    """Table rows (step, task, group, reward, advantage, prompt, answer) for a W&B table."""
    return [[step, s.get("task_id"), s.get("group"), s.get("reward"), s.get("advantage"), s.get("prompt"),
             s.get("response")] for s in samples]


SAMPLE_COLUMNS = ["step", "task_id", "group", "reward", "advantage", "prompt", "response"]


class TensorBoardWriter:
    """Scalars and text into a TensorBoard event file in `logdir`, with tensorboard's own protos and writer."""

    def __init__(self, logdir: Path) -> None:
        try:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            raise UserError("tensorboard is not installed: pip install 'devops-rl[export]'") from None
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self._writer = EventFileWriter(str(self.logdir))

    def _add(self, step: int, values: list) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        self._writer.add_event(event_pb2.Event(wall_time=time.time(), step=int(step),
                                               summary=summary_pb2.Summary(value=values)))

    def log_metrics(self, step: int, data: Mapping[str, Any]) -> None:
        from tensorboard.compat.proto import summary_pb2

        values = [summary_pb2.Summary.Value(tag=key, simple_value=value) for key, value in scalars(data).items()]
        if values:
            self._add(step, values)

    def log_text(self, step: int, tag: str, text: str) -> None:
        """A text summary (TensorBoard's Text tab renders it as markdown)."""
        from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
        from tensorboard.plugins.text import plugin_data_pb2

        metadata = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name="text", content=plugin_data_pb2.TextPluginData(version=0).SerializeToString()))
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[text.encode("utf-8")],
                                        tensor_shape=tensor_shape_pb2.TensorShapeProto(
                                            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]))
        self._add(step, [summary_pb2.Summary.Value(tag=tag, metadata=metadata, tensor=tensor)])

    def log_samples(self, step: int, samples: list[dict]) -> None:
        if samples:
            self.log_text(step, SAMPLES_TAG, samples_markdown(samples))

    def close(self, exit_code: int = 0) -> None:
        self._writer.close()


class WandbWriter:
    """A W&B run: metrics as history, samples as a table per step, the config as the run's config.

    `mode="offline"` writes `dir/wandb/offline-run-*/run-*.wandb` for `wandb sync` and `wandb leet`; the API key
    (online) comes only from the environment, as wandb reads it.
    """

    def __init__(self, *, project: str, name: str, config: Mapping[str, Any] | None = None,
                 directory: Path | None = None, mode: str | None = None, quiet: bool = False) -> None:
        try:
            import wandb
        except ImportError:
            raise UserError("wandb is not installed: pip install 'devops-rl[export]'") from None
        from core.log import mask_nested

        self._wandb = wandb
        settings = {"silent": True, "console": "off", "x_disable_stats": True, "x_disable_meta": True,
                    "disable_git": True, "x_save_requirements": False} if quiet else {}
        if directory is not None:
            Path(directory).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=project, name=name, entity=os.environ.get("WANDB_ENTITY"),
                              config=mask_nested(dict(config or {})), dir=str(directory) if directory else None,
                              mode=mode, settings=wandb.Settings(**settings), reinit="create_new")

    @property
    def folder(self) -> Path:
        """The run's own folder (`offline-run-*` or `run-*`), the one `wandb sync` takes."""
        return Path(self.run.dir).parent

    def log_metrics(self, step: int, data: Mapping[str, Any]) -> None:
        values = scalars(data)
        if values:
            self.run.log(values, step=int(step))

    def log_text(self, step: int, tag: str, text: str) -> None:
        self.run.log({tag: self._wandb.Html(f"<pre>{_escape(text)}</pre>")}, step=int(step))

    def log_samples(self, step: int, samples: list[dict]) -> None:
        if samples:
            table = self._wandb.Table(columns=SAMPLE_COLUMNS, data=sample_rows(step, samples))
            self.run.log({SAMPLES_TAG: table}, step=int(step))

    def close(self, exit_code: int = 0) -> None:
        self.run.finish(exit_code=exit_code)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# ---- the trainer's loggers ---------------------------------------------------------------------------


def open_trackers(loggers: Iterable[str], *, project: str, experiment: str, config: Mapping[str, Any]) -> list[Tracker]:
    """Writers for the `trainer.logger` entries a verl run would honour besides console and file: `tensorboard`
    (in $TENSORBOARD_DIR, else tensorboard_log/<project>/<experiment>, as verl) and `wandb` (project, name =
    experiment, entity = $WANDB_ENTITY; $WANDB_MODE=offline keeps it local)."""
    trackers: list[Tracker] = []
    for name in dict.fromkeys(loggers):
        if name == "tensorboard":
            folder = Path(os.environ.get("TENSORBOARD_DIR") or Path("tensorboard_log") / project / experiment)
            trackers.append(TensorBoardWriter(folder))
            log.info("tensorboard: writing to %s", folder)
        elif name == "wandb":
            trackers.append(WandbWriter(project=project, name=experiment, config=config))
        elif name not in ("console", "file"):
            log.warning("trainer.logger: %r is not supported by the torch backend (tensorboard, wandb, console, file "
                        "are); ignored", name)
    return trackers


# ---- export of a run folder ---------------------------------------------------------------------------


def export_run(folder: Path, trackers: list[Tracker]) -> dict[str, int]:
    """Write a run folder (or a verl file-logger JSONL) into each tracker in step order (W&B drops a step lower
    than one it has seen): the config at step 0, every metrics row, every step's samples and the alerts as text
    at their steps; returns how many of each were written."""
    from core.runs.folder import CONFIG_FILE, EVENTS_FILE, METRICS_FILE, SAMPLES_FILE
    from core.runs.reading import metric_rows, read_jsonl

    folder = Path(folder)
    metrics_path = folder if folder.is_file() else folder / METRICS_FILE
    items: list[tuple[int, int, str, Any]] = []  # (step, order within the step, what, payload)
    items += [(step, 1, "rows", data) for step, data in metric_rows(read_jsonl(metrics_path))]
    if folder.is_dir():
        config = folder / CONFIG_FILE
        if config.is_file():
            items.append((0, 0, "config", "```yaml\n" + config.read_text(encoding="utf-8") + "```"))
        for record in read_jsonl(folder / SAMPLES_FILE):
            step, samples = record.get("step"), record.get("samples")
            if isinstance(step, int) and isinstance(samples, list) and samples:
                items.append((step, 2, "samples", [s for s in samples if isinstance(s, dict)]))
        for record in read_jsonl(folder / EVENTS_FILE):
            if record.get("event") == "alert" and isinstance(record.get("step"), int):
                text = f"**{record.get('level', 'warning')}** `{record.get('series', '')}`: {record.get('message', '')}"
                items.append((record["step"], 3, "alerts", text))
    counts = {"rows": 0, "samples": 0, "alerts": 0}
    for step, _, what, payload in sorted(items, key=lambda item: item[:2]):
        for tracker in trackers:
            if what == "rows":
                tracker.log_metrics(step, payload)
            elif what == "samples":
                tracker.log_samples(step, payload)
            else:
                tracker.log_text(step, CONFIG_TAG if what == "config" else ALERTS_TAG, payload)
        if what in counts:
            counts[what] += len(payload) if what == "samples" else 1
    return counts


def run_config(folder: Path) -> dict[str, Any]:
    """The run's config.yaml as a mapping ({} for a bare JSONL or a folder without one)."""
    import yaml

    from core.runs.folder import CONFIG_FILE

    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc}); fix or remove it to export without a config") from None
    return data if isinstance(data, dict) else {}
