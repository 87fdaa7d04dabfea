"""The cockpit application: six modes (Runs, Dataset, Config, Live, Results, Compare), global keys and quitting.

Screens live in `devops_tui/screens/`; this file only wires them together and owns the runs it started.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from textual.app import App
from textual.binding import Binding

from core.errors import UserError
from devops_tui.launcher import LaunchedRun
from devops_tui.messages import OpenRun
from devops_tui.screens.compare import CompareScreen
from devops_tui.screens.config import ConfigScreen
from devops_tui.screens.confirm import ConfirmScreen
from devops_tui.screens.dataset import DatasetScreen
from devops_tui.screens.help import HelpScreen
from devops_tui.screens.live import LiveScreen
from devops_tui.screens.results import ResultsScreen
from devops_tui.screens.runs import RunsScreen

log = logging.getLogger(__name__)

KEYMAP_FILE_NAME = "keys.yaml"


def load_keymap(path: Path) -> dict[str, str]:
    """`binding-id: keys` pairs from a YAML file (missing file = no changes); UserError when malformed."""
    if not path.is_file():
        return {}
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML ({exc}); write one 'binding-id: key' per line") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise UserError(f"{path}: expected 'binding-id: key' lines, e.g. 'app.quit: ctrl+x'")
    return data


class CockpitApp(App[None]):
    """Pick tasks, shape the config, launch or attach to runs, watch them live and compare results."""

    TITLE = "devops-rl"
    SUB_TITLE = "GRPO training cockpit"
    CSS_PATH = "cockpit.tcss"
    ENABLE_COMMAND_PALETTE = False
    MODES = {
        "runs": RunsScreen,
        "dataset": DatasetScreen,
        "config": ConfigScreen,
        "live": LiveScreen,
        "results": ResultsScreen,
        "compare": CompareScreen,
    }
    DEFAULT_MODE = "runs"
    SCREENS_GROUP = Binding.Group("screens", compact=True)
    BINDINGS = [
        Binding("1", "switch_mode('runs')", "Runs", id="app.runs", group=SCREENS_GROUP),
        Binding("2", "switch_mode('dataset')", "Dataset", id="app.dataset", group=SCREENS_GROUP),
        Binding("3", "switch_mode('config')", "Config", id="app.config", group=SCREENS_GROUP),
        Binding("4", "switch_mode('live')", "Live", id="app.live", group=SCREENS_GROUP),
        Binding("5", "switch_mode('results')", "Results", id="app.results", group=SCREENS_GROUP),
        Binding("6", "switch_mode('compare')", "Compare", id="app.compare", group=SCREENS_GROUP),
        Binding("question_mark,f1", "help", "Help", key_display="?", id="app.help"),
        Binding("q,ctrl+q", "quit", "Quit", id="app.quit", priority=False),
        Binding("f12", "save_svg", "Screenshot (SVG)", id="app.screenshot", show=False),
        # Priority: an input box never swallows it (only while one has the focus, see check_action).
        Binding("escape", "leave_input", "Leave the input box (the screen's keys work again)", id="app.leave_input",
                show=False, priority=True),
    ]

    def __init__(self, *, attach: Path | None = None, runs_root: Path | None = None,
                 clock: Callable[[], float] = time.time, keymap: dict[str, str] | None = None,
                 task_paths: list[Path] | None = None) -> None:
        super().__init__()
        from core.paths import runs_root as default_runs_root

        self.runs_root = Path(runs_root) if runs_root is not None else default_runs_root()
        self.clock = clock
        self.run_target: Path | None = Path(attach) if attach is not None else None
        self.launched: dict[Path, LaunchedRun] = {}
        self.compare_targets: list[Path] = []
        self._keymap = keymap or {}
        self.task_paths = task_paths  # None: the built-in task set

    def on_mount(self) -> None:
        if self._keymap:
            self.set_keymap(self._keymap)
        if self.run_target is not None:
            self.switch_mode("live")

    # -- runs -----------------------------------------------------------------------------------
    def open_run(self, path: Path) -> None:
        """Show `path` (a run folder or a metrics JSONL) on the Live screen."""
        self.run_target = Path(path)
        self._show_mode("live", lambda screen: screen.attach(self.run_target))

    def on_open_run(self, message: OpenRun) -> None:
        self.open_run(message.path)

    def compare_runs(self, paths: list[Path]) -> None:
        """Show these runs side by side on the Compare screen."""
        self.compare_targets = [Path(p) for p in paths]
        self._show_mode("compare", lambda screen: screen.show_runs(self.compare_targets))

    def _show_mode(self, mode: str, update) -> None:
        """Switch to `mode`: a screen already there gets `update(screen)` (it switches runs), a new one reads the
        app's target when it mounts."""
        try:
            stack = self.get_screen_stack(mode)
        except KeyError:
            stack = []
        if stack:
            update(stack[0])
        self.switch_mode(mode)

    def register_launch(self, run: LaunchedRun) -> None:
        self.launched[run.path] = run

    def live_launched_runs(self) -> list[LaunchedRun]:
        return [run for run in self.launched.values() if run.alive()]

    # -- keys ----------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "leave_input":
            from textual.widgets import Input

            return isinstance(self.focused, Input)
        return True

    def action_leave_input(self) -> None:
        """Give the focus back to the screen's main widget (a table), or to the screen itself."""
        from textual.widgets import Input

        screen = self.screen
        target = screen.query(screen.AUTO_FOCUS).first() if isinstance(screen.AUTO_FOCUS, str) and \
            screen.query(screen.AUTO_FOCUS) else None
        screen.set_focus(None if target is None or isinstance(target, Input) else target)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_save_svg(self) -> None:
        """Save what the screen shows as an SVG in the working folder (for reports and READMEs)."""
        path = self.save_screenshot(path=str(Path.cwd()))
        self.notify(f"saved {path}")

    async def action_quit(self) -> None:
        """Quit; runs started elsewhere keep going, runs started here are stopped only if you say so."""
        running = self.live_launched_runs()
        if not running:
            self.exit()
            return
        names = ", ".join(run.path.name for run in running)

        def decide(choice: str | None) -> None:
            if choice == "stop":
                for run in running:
                    run.stop()
                self.exit()
            elif choice == "leave":
                self.exit()
            else:
                self.notify("quit cancelled: the cockpit stays open", timeout=3)

        self.push_screen(
            ConfirmScreen(
                f"{len(running)} run(s) started here still going: {names}",
                choices=[("stop", "Stop and quit"), ("leave", "Leave running, quit"), ("cancel", "Cancel")],
                default="leave",  # Enter never stops a run by accident: the runs go on, as they do when started elsewhere
            ),
            decide,
        )


def run_cockpit(attach: Path | None = None, task_paths: list[Path] | None = None) -> None:
    """Run the cockpit in this terminal (the terminal is restored on exit, also after an error)."""
    import platformdirs

    from core.log import setup_logging

    setup_logging(console=False)  # a console handler would write over the screen; the file keeps all
    keymap = load_keymap(Path(platformdirs.user_config_dir("devops-rl")) / KEYMAP_FILE_NAME)
    app = CockpitApp(attach=attach, keymap=keymap, task_paths=task_paths)
    app.run()
    if app.return_code:
        raise SystemExit(app.return_code)
