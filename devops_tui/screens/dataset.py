"""The Dataset screen: the tasks in a table, filtered by type, difficulty and text, with a detail pane.

The detail pane starts with the reward breakdown of the task's reference answer (scored in a worker), then the
prompt, the expected outputs and the reference answer as markdown; problems in the task files are listed above.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Input, Markdown, Select, Static

from devops_tui.widgets.footer import CockpitFooter, TitleBar
from tasks import DIFFICULTIES, TASK_TYPES, Task


def filter_tasks(tasks: list[Task], task_type: str | None, difficulty: str | None, text: str) -> list[Task]:
    """Tasks matching the type and difficulty (None = any) and containing every word of `text`."""
    words = text.lower().split()
    out = []
    for task in tasks:
        if task_type and task.type != task_type:
            continue
        if difficulty and task.difficulty != difficulty:
            continue
        haystack = " ".join((task.id, task.desc, *task.expected_outputs)).lower()
        if all(word in haystack for word in words):
            out.append(task)
    return out


def load_task_set(paths: list[Path] | None) -> tuple[list[Task], list[str]]:
    """Tasks of every valid file (a broken file hides only its own tasks) and all the problems found."""
    from core.errors import UserError
    from tasks import load_tasks, task_files, validate_task_files

    files = task_files(list(paths) if paths else None)
    try:
        return load_tasks(files), []  # the usual case: one pass, all files valid
    except UserError:
        pass
    tasks: list[Task] = []
    for path in files:
        try:
            tasks += load_tasks([path])
        except UserError:
            pass  # reported below, with every other problem
    return tasks, validate_task_files(files)


def sources_label(paths: list[Path] | None) -> str:
    """Where the tasks come from, for the count line: the built-in set or the `--tasks` paths (short)."""
    if not paths:
        return "built-in tasks/data"
    return "from " + ", ".join(short_source(str(p)) for p in paths)


def short_source(source: str) -> str:
    """`file:line` with the file relative to the working folder when it is inside it."""
    path, sep, line = source.rpartition(":")
    if not sep:
        path, line = source, ""
    try:
        path = str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        pass
    return f"{path}:{line}" if line else path


def task_markdown(task: Task) -> str:
    expected = "\n".join(f"- {item}" for item in task.expected_outputs)
    reference = task.reference_answer or "_no reference answer_"
    return (f"## {task.id}\n\n`{task.type}` · `{task.difficulty}` · `{short_source(task.source)}`\n\n"
            f"### Prompt\n\n{task.desc}\n\n### Expected outputs\n\n{expected}\n\n"
            f"### Reference answer\n\n{reference}\n")


def breakdown_text(task: Task) -> str:
    """The reward of the reference answer per dimension and penalty, or why it is not available."""
    if not task.reference_answer:
        return "no reference answer to score"
    try:
        from core.rewards import score
    except ImportError:
        return "reward breakdown: core.rewards.score is not installed yet"
    result = score(task.reference_answer, task)
    penalties = [f"{name} {value:.2f}" for name, value in result.penalties.items() if value]
    # Flowing text, not a table: the preview stays a few lines at any width, above the task's markdown.
    return (f"reference answer reward {result.final_reward:.3f}\n"
            + "  ".join(f"{name} {value:.2f}" for name, value in result.dimensions.items())
            + "\npenalties: " + (", ".join(penalties) if penalties else "none"))


@dataclass
class BreakdownScored(Message):
    """The reward breakdown of one task's reference answer, scored in a worker."""

    task_id: str
    text: str


@dataclass
class TasksLoaded(Message):
    tasks: list[Task]
    problems: list[str]


class DatasetScreen(Screen):
    """Browse and check the task set."""

    AUTO_FOCUS = "#dataset-table"
    BINDINGS = [
        Binding("slash", "focus_search", "Search", key_display="/", id="dataset.search"),
        Binding("escape", "clear_filters", "Clear filters", id="dataset.clear"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[Task] = []
        self.shown: list[Task] = []
        self.shown_task: str | None = None
        self._columns: list[tuple[str, int]] = []

    def compose(self) -> ComposeResult:
        yield TitleBar("Dataset")
        yield Static("", id="dataset-problems")
        with Horizontal(id="dataset-filters"):
            yield Select([(t, t) for t in TASK_TYPES], prompt="any type", id="filter-type")
            yield Select([(d, d) for d in DIFFICULTIES], prompt="any difficulty", id="filter-difficulty")
            yield Input(placeholder="filter text", id="filter-text")
        with Horizontal(id="dataset-body"):
            with Vertical(id="dataset-left"):
                yield Static("", id="dataset-count")
                yield DataTable(id="dataset-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="dataset-detail"):
                yield Static("", id="task-breakdown")
                yield Markdown("", id="task-markdown")
        yield CockpitFooter()

    def on_mount(self) -> None:
        self._set_columns(self.app.size.width)
        self.query_one("#dataset-body").loading = True
        self.query_one("#dataset-problems", Static).display = False
        self._load()

    def on_resize(self, event) -> None:
        if self._set_columns(event.size.width):
            self.apply_filters()

    def _set_columns(self, width: int) -> bool:
        """The table's columns for this width (the type column only where it fits); True when they changed."""
        columns = [("id", 12), ("type", 16), ("diff", 6), ("out", 3)] if width >= 100 else \
            [("id", 12), ("diff", 6), ("out", 3)]
        if columns == self._columns:
            return False
        self._columns = columns
        table = self.query_one(DataTable)
        table.clear(columns=True)
        for label, size in columns:
            table.add_column(label, width=size, key=label)
        return True

    @work(thread=True, exclusive=True, group="dataset-load", exit_on_error=False)
    def _load(self) -> None:
        self.post_message(TasksLoaded(*load_task_set(getattr(self.app, "task_paths", None))))

    def on_tasks_loaded(self, message: TasksLoaded) -> None:
        tasks, problems = message.tasks, message.problems
        self.query_one("#dataset-body").loading = False
        self.tasks = tasks
        box = self.query_one("#dataset-problems", Static)
        box.display = bool(problems)
        box.update("task file problems:\n" + "\n".join(problems[:5]) if problems else "")
        self.apply_filters()

    def apply_filters(self) -> None:
        task_type = self.query_one("#filter-type", Select).value
        difficulty = self.query_one("#filter-difficulty", Select).value
        text = self.query_one("#filter-text", Input).value
        self.shown = filter_tasks(self.tasks, task_type if isinstance(task_type, str) else None,
                                  difficulty if isinstance(difficulty, str) else None, text)
        table = self.query_one(DataTable)
        table.clear()
        for task in self.shown:
            cells = {"id": task.id, "type": task.type, "diff": task.difficulty[:6], "out": str(len(task.expected_outputs))}
            table.add_row(*(cells[label] for label, _ in self._columns), key=task.id)
        self.query_one("#dataset-count", Static).update(
            f"{len(self.shown)} of {len(self.tasks)} tasks · {sources_label(getattr(self.app, 'task_paths', None))}")
        if self.shown:
            self.show_task(self.shown[0])
        else:
            self.query_one("#task-markdown", Markdown).update("_no task matches the filters_")
            self.query_one("#task-breakdown", Static).update("")

    def show_task(self, task: Task) -> None:
        self.shown_task = task.id
        self.query_one("#task-breakdown", Static).update("scoring the reference answer...")
        self.query_one("#task-markdown", Markdown).update(task_markdown(task))
        self.query_one("#dataset-detail", VerticalScroll).scroll_home(animate=False)  # a new task starts at its top
        self._score(task)

    @work(thread=True, exclusive=True, group="dataset-score", exit_on_error=False)
    def _score(self, task: Task) -> None:
        self.post_message(BreakdownScored(task.id, breakdown_text(task)))

    def on_breakdown_scored(self, message: BreakdownScored) -> None:
        if message.task_id == self.shown_task:
            self.query_one("#task-breakdown", Static).update(message.text)

    def on_select_changed(self, event: Select.Changed) -> None:
        self.apply_filters()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.apply_filters()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if 0 <= event.cursor_row < len(self.shown):
            self.show_task(self.shown[event.cursor_row])

    def action_focus_search(self) -> None:
        self.query_one("#filter-text", Input).focus()

    def action_clear_filters(self) -> None:
        self.query_one("#filter-type", Select).clear()
        self.query_one("#filter-difficulty", Select).clear()
        self.query_one("#filter-text", Input).value = ""
        self.query_one(DataTable).focus()
