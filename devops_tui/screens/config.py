"""The Config screen: pick a preset, edit any key of the typed config with inline validation, and launch.

Keys, types, defaults and each key's meaning and tuning advice come from `core.training.config` (the model's
field descriptions); the screen adds the diff against the preset, a check that the model can be found, the
doctor's memory estimate, and saves to YAML. The first config (seconds: verl's key tree) is built in a worker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Input, Select, Static

from devops_tui.widgets.footer import CockpitFooter, TitleBar

MODEL_KEY = "actor_rollout_ref.model.path"


def format_config_value(value: Any) -> str:
    """A value as one would type it after `--set key=`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


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


def model_check(path: str) -> tuple[str | None, str | None]:
    """(problem, note) about the model path: a folder that does not exist or has no config.json is a problem; a
    Hugging Face id that is not in the local cache is a note (training downloads it, which needs the network)."""
    import re

    from core.training.config.model_info import _hf_cached_folder
    from core.training.tiny_model import BUILTIN_TINY

    if path == BUILTIN_TINY:
        return None, None
    folder = Path(path).expanduser()
    if folder.is_dir():
        return (None, None) if (folder / "config.json").is_file() else (
            f"{MODEL_KEY}: {path}: a folder without config.json; point it at a saved model folder", None)
    if re.fullmatch(r"[\w.-]+/[\w.-]+", path) and not path.startswith("."):
        if _hf_cached_folder(path) is not None:
            return None, None
        return None, f"{path} is not in the local Hugging Face cache: training downloads it (needs the network)"
    return f"{MODEL_KEY}: {path}: no such model folder; give a folder with config.json, a Hugging Face id or " \
           "builtin:tiny", None


@dataclass
class ConfigBuilt(Message):
    """A rebuilt config and what is wrong with it, checked in a worker (`generation` orders rebuilds)."""

    generation: int
    cfg: Any
    preset_values: dict[str, Any]
    values: dict[str, Any]
    problems: list[str]
    note: str | None
    error: str | None = None  # why the last edit was refused (the config in force does not have it)
    refused: str | None = None
    refused_value: str | None = None


def build_config(generation: int, preset: str, overrides: dict[str, str], new_key: str | None) -> ConfigBuilt:
    """Load `preset` with `overrides` and validate it; when the edit of `new_key` makes it unloadable, the config
    without that edit, and why it was refused."""
    from core.errors import UserError
    from core.training.config import load_config, validate

    preset_values = load_config(preset).flat()
    error = refused = None
    try:
        cfg = load_config(preset, None, [f"{k}={v}" for k, v in overrides.items()])
    except UserError as exc:
        error, refused = str(exc), new_key
        kept = {k: v for k, v in overrides.items() if k != new_key}
        cfg = load_config(preset, None, [f"{k}={v}" for k, v in kept.items()])
    values = cfg.flat()
    missing, note = model_check(str(values.get(MODEL_KEY, "")))
    return ConfigBuilt(generation, cfg, preset_values, values, list(validate(cfg)) + ([missing] if missing else []),
                       note, error, refused, overrides.get(refused) if refused else None)


@dataclass
class ConfigModelReady(Message):
    """The config engine is loaded: the presets and the current preset's values (built in a worker)."""

    presets: tuple[str, ...]


class ConfigScreen(Screen):
    """Shape a training config and launch it."""

    AUTO_FOCUS = "#config-table"
    BINDINGS = [
        Binding("ctrl+s", "save", "Save YAML", id="config.save"),
        Binding("ctrl+l", "launch", "Launch run", id="config.launch"),
        Binding("ctrl+z", "reset_key", "Reset key", id="config.reset"),
        # Priority, so the app moves the focus before it reads the next key: keys typed right after Enter go into
        # the value box (forwarded to the table they would switch screens or be lost).
        Binding("slash,enter", "focus_value", "Edit value", key_display="/", id="config.edit", priority=True),
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
        self.note: str | None = None
        self._value_width = 22
        self._generation = 0  # of the newest rebuild asked for: older results are dropped
        self._shown_generation = 0
        self._widths: tuple[int, int, int] = (0, 0, 0)

    def compose(self) -> ComposeResult:
        yield TitleBar("Config")
        with Horizontal(id="config-top"):
            yield Select([], prompt="preset", allow_blank=True, id="config-preset", disabled=True)
            yield Static("loading the config model...", id="config-status")
        with Horizontal(id="config-body"):
            yield DataTable(id="config-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="config-side"):
                yield Static("", id="config-key")
                yield Input(placeholder="value (Enter applies)", id="config-value")
                yield Static("", id="config-message")
                yield Static("", id="config-help")
                yield Static("", id="config-diff")
                yield Static("", id="config-doctor")
        yield CockpitFooter()

    def on_mount(self) -> None:
        import json

        task_paths = getattr(self.app, "task_paths", None)
        if task_paths:  # `tui --tasks PATH`: the runs launched here train on those tasks (an override, shown as one)
            self.overrides["devops.tasks"] = json.dumps([{"path": str(p)} for p in task_paths])
        self.query_one("#config-body").loading = True
        self._load_model()

    @work(thread=True, exclusive=True, group="config-model", exit_on_error=False)
    def _load_model(self) -> None:
        try:
            from core.training.config import PRESETS, load_config
        except ImportError as exc:  # the config engine is a separate part; say so instead of crashing
            self.app.call_from_thread(self.query_one("#config-status", Static).update,
                                      f"the config model is not available: {exc}")
            return
        load_config(self.preset)  # the slow first build (verl's key tree), off the event loop
        self.post_message(ConfigModelReady(tuple(PRESETS)))

    def on_config_model_ready(self, message: ConfigModelReady) -> None:
        select = self.query_one("#config-preset", Select)
        select.set_options([(p, p) for p in message.presets])
        select.value = self.preset
        select.disabled = False
        self.query_one("#config-body").loading = False
        self._size_columns()
        self.rebuild()
        self.query_one("#config-table", DataTable).focus()

    def on_resize(self, event) -> None:
        self._size_columns()

    def _size_columns(self) -> None:
        """Key, value and preset columns sized to the table: the value column takes what the key column leaves."""
        table = self.query_one("#config-table", DataTable)
        width = table.size.width or self.size.width * 3 // 5
        key = 36 if width >= 70 else 26
        preset = 12 if width >= 70 else 0  # narrow: the diff below the help still names the preset's values
        value = max(10, width - key - preset - (8 if preset else 6))
        if table.columns and (key, value, preset) == self._widths:
            return
        self._widths = (key, value, preset)
        self._value_width = value
        table.clear(columns=True)
        table.add_column("key", width=key)
        table.add_column("value", width=value)
        if preset:
            table.add_column("preset", width=preset)
        self.keys = []  # refill every row with the new widths
        if self.cfg is not None:
            self._fill_table()

    # -- model ----------------------------------------------------------------------------------
    def rebuild(self, new_key: str | None = None) -> None:
        """Check preset + overrides in a worker (validation reads the task set: ~0.3 s on a first visit); the
        screen shows the outcome when `ConfigBuilt` arrives. A refused override is dropped with its reason."""
        self._generation += 1
        self._build(self._generation, self.preset, dict(self.overrides), new_key)

    @work(thread=True, exclusive=True, group="config-build", exit_on_error=False)
    def _build(self, generation: int, preset: str, overrides: dict[str, str], new_key: str | None) -> None:
        self.post_message(build_config(generation, preset, overrides, new_key))

    def on_config_built(self, built: ConfigBuilt) -> None:
        if built.generation != self._generation:
            return  # an older edit's check: the newer one is on its way
        self._shown_generation = built.generation
        if built.refused is not None and self.overrides.get(built.refused) == built.refused_value:
            del self.overrides[built.refused]
        self.error, self.cfg, self.preset_values, self.values = built.error, built.cfg, built.preset_values, built.values
        self.problems, self.note = built.problems, built.note
        self._fill_table()
        self._show_status()
        key = self.selected_key()
        if key is not None:
            self._show_key(key)  # the edit box shows the value now in force (after undo or a preset change)
        self._estimate(built.cfg)

    @property
    def checking(self) -> bool:
        """A rebuild is on its way (what the screen shows is the config before the last edit)."""
        return self._shown_generation != self._generation

    def _cells(self, key: str) -> tuple[str, str, str]:
        value, preset_value = self.values[key], self.preset_values.get(key)
        changed = value != preset_value
        leaf = key.rpartition(".")[2]
        text = format_config_value(value)
        if len(text) > self._value_width:
            text = text[: self._value_width - 1] + "…"
        cells = (("* " if changed else "  ") + leaf, text, format_config_value(preset_value)[:12] if changed else "")
        return cells if self._widths[2] else cells[:2]

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
                table.add_row(Text(parent or "(top level)", style="bold"), *[""] * (len(table.columns) - 1))
                self.row_keys.append(None)
            table.add_row(*self._cells(key), key=key)
            self.row_keys.append(key)
        if self.row_keys:
            target = min(row or 1, len(self.row_keys) - 1)
            if table.size.height:
                table.move_cursor(row=target)
            else:  # not laid out yet (a loaded machine): scrolled into a zero-height view, the first heading would hide
                self.call_after_refresh(table.move_cursor, row=target)

    def _show_status(self) -> None:
        message = self.query_one("#config-message", Static)
        lines = []
        if self.error:
            lines.append(f"✖ not applied (the value in force is kept): {self.error}")
        lines += [f"⚠ {p}" for p in self.problems]
        message.update("\n".join(lines) if lines else "✔ valid" + (f" (note: {self.note})" if self.note else ""))
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
        from core.training.config import key_help

        self.query_one("#config-key", Static).update(key)
        self.query_one("#config-value", Input).value = format_config_value(self.values.get(key))
        help_ = key_help(key)
        parts = (help_.meaning, help_.kind, f"tuning: {help_.tune}" if help_.tune else "") if help_ else ()
        self.query_one("#config-help", Static).update("\n".join(p for p in parts if p) or "(no notes for this key)")

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
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "focus_value":  # only from the table: in the value box, `/` is typed and Enter applies
            return self.focused is None or self.focused.id == "config-table"
        return True

    def action_focus_value(self) -> None:
        self.set_focus(self.query_one("#config-value", Input))  # now, not after a refresh as `focus()` would

    def action_reset_key(self) -> None:
        key = self.selected_key()
        if key is not None and key in self.overrides:
            del self.overrides[key]
            self.rebuild()
        elif self.error:  # the refused edit was never applied: undoing it only clears its message
            self.error = None
            self._show_status()

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
        from core.errors import UserError
        from core.runs import new_run_id
        from core.training.train import mode_for_preset
        from devops_tui.launcher import launch

        # A refused edit (self.error) was never applied: the config in force is what the checks looked at.
        if self.cfg is None or self.checking:
            self.notify("the config is still being checked; launch again in a moment", severity="warning")
            return
        if self.problems:
            more = f" (+{len(self.problems) - 1} more on the right)" if len(self.problems) > 1 else ""
            self.notify(f"not launched: {self.problems[0]}{more}", severity="error")
            return
        mode = mode_for_preset(self.preset)
        run_id = new_run_id(mode)
        config_file = self.save(self.app.runs_root / ".cockpit" / f"{run_id}.config.yaml")
        try:
            run = launch(mode, self.app.runs_root, config_file=config_file, run_id=run_id)
        except UserError as exc:
            self.notify(f"not launched: {exc}", severity="error")
            return
        self.app.register_launch(run)
        self.notify(f"started {run_id} (pid {run.pid})")
        self.app.open_run(run.path)
