"""The Config screen: pick a preset, edit any key of the typed config with inline validation, and launch.

Keys, types and defaults come from `core.training.config.TrainingConfig`; each key shows its meaning,
tuning advice, the diff against the preset, the doctor's memory estimate, and saves to YAML.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Select, Static

# Meaning and tuning advice per key, from the original design's section 4.3 tables (4.4 for the flow).
NOTES: dict[str, tuple[str, str]] = {
    "algorithm.adv_estimator": ("Advantage estimator: GRPO (group-relative) or PPO (critic).",
                                "GRPO is usually more stable for long answers; try ppo or KL in the reward if unstable."),
    "algorithm.use_kl_in_reward": ("Subtract a KL penalty to the reference model from the reward.",
                                   "false lets the agent explore; turn on if the policy drifts or hacks the reward."),
    "data.train_batch_size": ("Prompts per training step.",
                              "Bigger is faster but needs more memory; on OOM halve it (16 -> 8); if slow, 16 -> 32."),
    "data.max_prompt_length": ("Longest prompt in tokens (system prompt + task).",
                               "Fit it to the system prompt plus the longest task."),
    "data.max_response_length": ("Longest generated answer in tokens.",
                                 "DevOps answers are long; raise it if response_length/clip_ratio is above 0."),
    "data.truncation": ("What to do with a prompt that is too long.", "'error' makes sure nothing is cut silently."),
    "actor_rollout_ref.rollout.n": ("Answers sampled per prompt (the GRPO group size).",
                                    "More is more diverse but costs more; 4 is the balance; lower to 2 if slow."),
    "actor_rollout_ref.rollout.gpu_memory_utilization": ("Share of GPU memory vLLM may take for the rollout.",
                                                         "0.6-0.8 is safe; lower to 0.4-0.5 on OOM."),
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": ("Micro-batch for log-prob passes per GPU.",
                                                                    "Affects inference speed; lower on OOM."),
    "actor_rollout_ref.rollout.temperature": ("Sampling temperature of the rollout.",
                                              "A higher temperature keeps exploring (a remedy for collapse)."),
    "actor_rollout_ref.actor.ppo_mini_batch_size": ("Prompts per optimizer update (split of the batch).",
                                                    "Usually equal to train_batch_size; must not exceed it."),
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": ("Sequences per forward/backward pass per GPU.",
                                                             "Speed vs memory: raise (4 -> 8) if slow, lower on OOM."),
    "actor_rollout_ref.actor.optim.lr": ("Learning rate of the policy.",
                                         "Key knob: start at 1e-6; 2e-6 if slow to learn, 5e-7 if unstable."),
    "actor_rollout_ref.actor.clip_ratio_low": ("PPO clip range below 1 (how far a ratio may fall).",
                                               "0.2/0.3 is conservative; 0.1/0.4 allows bigger updates."),
    "actor_rollout_ref.actor.clip_ratio_high": ("PPO clip range above 1 (clip-higher).",
                                                "0.28 or more keeps low-probability tokens learnable."),
    "actor_rollout_ref.actor.entropy_coeff": ("Weight of the entropy bonus.",
                                              "0 = no exploration bonus; 0.01-0.1 if answers become all alike."),
    "actor_rollout_ref.actor.use_kl_loss": ("Add KL to the reference model as a loss term.",
                                            "Keeps the policy close to the reference; helps against reward hacking."),
    "actor_rollout_ref.actor.kl_loss_coef": ("Weight of the KL loss.", "Raise if the policy drifts or hacks the reward."),
    "actor_rollout_ref.model.path": ("The model: a Hugging Face id, a local folder, or builtin:tiny.",
                                     "builtin:tiny trains on a CPU in minutes; 7B is the design's balance on GPUs."),
    "actor_rollout_ref.model.enable_gradient_checkpointing": ("Recompute activations in the backward pass.",
                                                              "Saves memory at the cost of time; keep on when short."),
    "actor_rollout_ref.model.use_remove_padding": ("Pack sequences without padding.", "Faster training; keep on."),
    "trainer.total_epochs": ("Passes over the training tasks.", "Fit to the data set size."),
    "trainer.save_freq": ("Checkpoint every N steps.", "Keep below the total steps so an interruption loses little."),
    "trainer.test_freq": ("Validate every N steps.", "More often (e.g. 5) spots problems early."),
    "trainer.val_before_train": ("Validate once before the first update.", "Records the baseline."),
}


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> dotted leaf keys (an empty mapping is a leaf, so it stays editable)."""
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


def format_config_value(value: Any) -> str:
    """A value as one would type it after `--set key=`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def field_description(model_cls: Any, dotted: str) -> str:
    """What the model says about a dotted key: its description, else its type and bounds."""
    current = model_cls
    info = None
    for part in dotted.split("."):
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return ""
        info = fields[part]
        current = info.annotation
    if info is None:
        return ""
    if info.description:
        return info.description
    kind = getattr(info.annotation, "__name__", None) or str(info.annotation).replace("typing.", "")
    bounds = []
    for item in info.metadata:
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            if getattr(item, attr, None) is not None:
                bounds.append(f"{sign} {getattr(item, attr)}")
    return f"type {kind}" + (f", {', '.join(bounds)}" if bounds else "")


def doctor_text(cfg: Any) -> str:
    """The doctor's memory estimate and advice for `cfg`, or why it could not run."""
    try:
        from core.training.doctor import report
    except ImportError as exc:
        return f"doctor: not available ({exc})"
    try:
        return report(cfg)
    except Exception as exc:  # the doctor must not break the screen; say what happened instead
        return f"doctor: {type(exc).__name__}: {exc}"


class ConfigScreen(Screen):
    """Shape a training config and launch it."""

    AUTO_FOCUS = "#config-table"
    BINDINGS = [
        Binding("ctrl+s", "save", "Save YAML", id="config.save"),
        Binding("ctrl+l", "launch", "Launch run", id="config.launch"),
        Binding("ctrl+z", "reset_key", "Reset key", id="config.reset"),
        Binding("slash", "focus_value", "Edit value", key_display="/", id="config.edit"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.preset = "ci-fast"
        self.overrides: dict[str, str] = {}
        self.cfg: Any = None
        self.preset_values: dict[str, Any] = {}
        self.values: dict[str, Any] = {}
        self.keys: list[str] = []
        self.row_keys: list[str | None] = []  # per table row: its key, or None for a section heading
        self.problems: list[str] = []
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        try:
            from core.training.config import PRESETS
        except ImportError as exc:  # the config engine is a separate part; say so instead of crashing
            yield Static(f"the config model is not available: {exc}", id="config-status")
            yield Footer()
            return
        with Horizontal(id="config-top"):
            yield Select([(p, p) for p in PRESETS], value=self.preset, allow_blank=False, id="config-preset")
            yield Static("", id="config-status")
        with Horizontal(id="config-body"):
            yield DataTable(id="config-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="config-side"):
                yield Static("", id="config-key")
                yield Input(placeholder="value (Enter applies)", id="config-value")
                yield Static("", id="config-message")
                yield Static("", id="config-help")
                yield Static("", id="config-diff")
                yield Static("", id="config-doctor")
        yield Footer()

    def on_mount(self) -> None:
        if not self.query("#config-table"):
            return
        table = self.query_one("#config-table", DataTable)
        table.add_column("key", width=36)
        table.add_column("value", width=22)
        table.add_column("preset", width=12)
        self.rebuild()

    # -- model ----------------------------------------------------------------------------------
    def rebuild(self, new_key: str | None = None) -> None:
        """Reload preset + overrides; a bad override is refused with its one-line reason."""
        from core.errors import UserError
        from core.training.config import load_config, validate

        base = load_config(self.preset)
        self.preset_values = flatten(base.model_dump(mode="json"))
        try:
            cfg = load_config(self.preset, None, [f"{k}={v}" for k, v in self.overrides.items()])
        except UserError as exc:
            self.error = str(exc)
            if new_key is not None:
                self.overrides.pop(new_key, None)
            cfg = load_config(self.preset, None, [f"{k}={v}" for k, v in self.overrides.items()])
        else:
            self.error = None
        self.cfg = cfg
        self.values = flatten(cfg.model_dump(mode="json"))
        self.problems = list(validate(cfg))
        self._fill_table()
        self._show_status()
        self._estimate(cfg)

    def _cells(self, key: str) -> tuple[str, str, str]:
        value, preset_value = self.values[key], self.preset_values.get(key)
        changed = value != preset_value
        leaf = key.rpartition(".")[2]
        return (("* " if changed else "  ") + leaf, format_config_value(value),
                format_config_value(preset_value) if changed else "")

    def _fill_table(self) -> None:
        table = self.query_one("#config-table", DataTable)
        if list(self.values) == self.keys:  # same keys (an edit): touch only the cells that changed
            for key in self.keys:
                for column, text in zip(table.columns, self._cells(key)):
                    if table.get_cell(key, column) != text:
                        table.update_cell(key, column, text)
            return
        row = table.cursor_row
        table.clear()
        self.keys = list(self.values)
        self.row_keys = []
        section = None
        for key in self.keys:
            parent = key.rpartition(".")[0]
            if parent != section:
                section = parent
                table.add_row(Text(parent or "(top level)", style="bold"), "", "")
                self.row_keys.append(None)
            table.add_row(*self._cells(key), key=key)
            self.row_keys.append(key)
        if self.row_keys:
            table.move_cursor(row=min(row or 1, len(self.row_keys) - 1))
            key = self.selected_key()
            if key is not None:
                self._show_key(key)

    def _show_status(self) -> None:
        message = self.query_one("#config-message", Static)
        lines = []
        if self.error:
            lines.append(f"✖ {self.error}")
        lines += [f"⚠ {p}" for p in self.problems]
        message.update("\n".join(lines) if lines else "✔ valid")
        message.set_class(bool(self.error or self.problems), "-error")
        changed = {k: v for k, v in self.values.items() if v != self.preset_values.get(k)}
        diff = "\n".join(f"{k}: {format_config_value(self.preset_values.get(k))} -> {format_config_value(v)}"
                         for k, v in changed.items())
        self.query_one("#config-diff", Static).update(f"diff vs preset {self.preset}:\n{diff or '(none)'}")
        state = "valid" if not self.problems else f"{len(self.problems)} problem(s)"
        self.query_one("#config-status", Static).update(f"preset {self.preset}, {len(changed)} change(s), {state}")

    @work(thread=True, exclusive=True, group="config-doctor", exit_on_error=False)
    def _estimate(self, cfg: Any) -> None:
        text = doctor_text(cfg)
        self.app.call_from_thread(self.query_one("#config-doctor", Static).update, text)

    def _show_key(self, key: str) -> None:
        from core.training.config import TrainingConfig

        self.query_one("#config-key", Static).update(key)
        self.query_one("#config-value", Input).value = format_config_value(self.values.get(key))
        meaning, advice = NOTES.get(key, ("", ""))
        text = "\n".join(t for t in (meaning, field_description(TrainingConfig, key),
                                     f"tuning: {advice}" if advice else "") if t)
        self.query_one("#config-help", Static).update(text or "(no notes for this key)")

    def selected_key(self) -> str | None:
        table = self.query_one("#config-table", DataTable)
        if not 0 <= table.cursor_row < len(self.row_keys):
            return None
        return self.row_keys[table.cursor_row]

    # -- events ---------------------------------------------------------------------------------
    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "config-preset" and isinstance(event.value, str) and event.value != self.preset:
            self.preset = event.value
            self.rebuild()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = self.selected_key() if event.data_table.id == "config-table" else None
        if key is not None:
            self._show_key(key)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_focus_value()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        key = self.selected_key()
        if key is None:
            return
        self.set_value(key, event.value)
        self.query_one("#config-table", DataTable).focus()

    def set_value(self, key: str, text: str) -> None:
        """Apply `key=text` like `--set`; the validation message shows the outcome."""
        if format_config_value(self.preset_values.get(key)) == text.strip():
            self.overrides.pop(key, None)
        else:
            self.overrides[key] = text.strip()
        self.rebuild(new_key=key)

    # -- actions --------------------------------------------------------------------------------
    def action_focus_value(self) -> None:
        self.query_one("#config-value", Input).focus()

    def action_reset_key(self) -> None:
        key = self.selected_key()
        if key is not None and key in self.overrides:
            del self.overrides[key]
            self.rebuild()

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.cfg.to_yaml(), encoding="utf-8")
        return path

    def action_save(self) -> None:
        if self.cfg is None:
            return
        path = self.save(Path.cwd() / f"devops-rl-{self.preset}.yaml")
        self.notify(f"saved {path} (devops-rl train --config {path.name})")

    def action_launch(self) -> None:
        from core.runs import new_run_id
        from devops_tui.launcher import MODE_FOR_PRESET, launch

        if self.cfg is None or self.error or self.problems:
            self.notify("fix the config problems first", severity="error")
            return
        mode = MODE_FOR_PRESET.get(self.preset, "train")
        run_id = new_run_id(mode)
        config_file = self.save(self.app.runs_root / ".cockpit" / f"{run_id}.config.yaml")
        run = launch(mode, self.app.runs_root, config_file=config_file, run_id=run_id)
        self.app.register_launch(run)
        self.notify(f"started {run_id} (pid {run.pid})")
        self.app.open_run(run.path)
