"""The sample inspector: browse every step's samples; one answer with its prompt, reward, rubric criteria,
dimensions and penalties with their evidence; its group (the n answers to one prompt, with advantages); and
the same prompt across steps side by side.

Steps are read back on demand from the run's sample index in a thread worker, which posts a message.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import DataTable, Static

from core.formatting import format_number
from devops_tui.samples import rubric_of, sample_key

VIEWS = ("answer", "group", "across steps")
EVIDENCE_SHOWN = 4  # per dimension or criterion; the run folder keeps them all
STATUS_MARKS = {"passed": "✔", "partial": "◐", "failed": "✖"}


def clean(text: object) -> str:
    """Printable text (a young policy emits any token): control characters and replacement marks become `·`."""
    return "".join(ch if ch.isprintable() or ch in "\n\t" else "·" for ch in str(text or "")).replace("\ufffd", "·")


def _num(value, digits: int = 3, signed: bool = False) -> str:
    return format_number(value if isinstance(value, (int, float)) and not isinstance(value, bool) else None,
                         style="fixed", digits=digits, signed=signed)


def group_of(samples: list[dict], sample: dict) -> list[dict]:
    """The answers to the same prompt in this step: the same group id, else the same task."""
    if sample.get("group") is not None:
        return [s for s in samples if s.get("group") == sample.get("group")]
    return [s for s in samples if sample_key(s) == sample_key(sample)]


def _section(text: Text, title: str) -> None:
    text.append(f"\n── {title} ", style="bold")
    text.append("─" * max(0, 40 - len(title)) + "\n", style="dim")


class _Blocks:
    """Text with indented paragraphs: an indented line is its own padded block, so when it wraps its second row
    starts under its first, not at column 0 (rubric evidence wrapped to the left edge)."""

    def __init__(self) -> None:
        self.parts: list[RenderableType] = []
        self.text = Text()

    def indented(self, line: str, style: str, indent: int = 6) -> None:
        self._flush()
        self.parts.append(Padding(Text(line, style=style), (0, 0, 0, indent)))

    def _flush(self) -> None:
        if self.text:
            if self.text.plain.endswith("\n"):
                self.text.right_crop(1)
            self.parts.append(self.text)
            self.text = Text()

    def group(self) -> Group:
        self._flush()
        return Group(*self.parts)


def _evidence(blocks: _Blocks, items) -> None:
    items = [clean(e) for e in (items or []) if str(e).strip()]
    for item in items[:EVIDENCE_SHOWN]:
        blocks.indented(item[:240], "dim")
    if len(items) > EVIDENCE_SHOWN:
        blocks.indented(f"(+{len(items) - EVIDENCE_SHOWN} more in samples.jsonl)", "dim italic")


def breakdown_text(breakdown: dict | None) -> Group:
    """The rubric criteria, each dimension and each applied penalty, with their evidence."""
    blocks = _Blocks()
    if not breakdown:
        blocks.text.append("\n(no reward breakdown logged for this answer)\n", style="dim")
        return blocks.group()
    score, criteria = rubric_of(breakdown)
    evidence = breakdown.get("evidence") or {}
    if criteria:
        _section(blocks.text, "rubric" + (f" {_num(score, 2)}" if score is not None else ""))
        for c in criteria:
            status = str(c.get("status") or "")
            mark = STATUS_MARKS.get(status, "·")
            style = {"passed": "green", "partial": "yellow", "failed": "red"}.get(status, "")
            blocks.text.append(f"  {mark} ", style=style)
            blocks.text.append(f"{c.get('id', '?')}", style="bold")
            blocks.text.append(f"  {_num(c.get('score'), 2)}" + (f"  w {_num(c.get('weight'), 2)}"
                                                                 if c.get("weight") is not None else "")
                               + ("  forbid" if c.get("forbid") else "") + "\n")
            if c.get("description"):
                blocks.indented(clean(c["description"])[:200], "italic")
            _evidence(blocks, c.get("evidence"))
    dims = breakdown.get("dimensions") or {}
    if dims:
        _section(blocks.text, "dimensions")
        for name, value in dims.items():
            blocks.text.append(f"  {name:<18} {_num(value, 2)}\n")
            _evidence(blocks, evidence.get(name))
    penalties = {k: v for k, v in (breakdown.get("penalties") or {}).items() if v}
    _section(blocks.text, "penalties")
    if not penalties:
        blocks.text.append("  none\n", style="dim")
    for name, value in penalties.items():
        blocks.text.append(f"  {name:<18} -{_num(value, 2)}\n", style="bold")
        _evidence(blocks, evidence.get(name))
    return blocks.group()


def answer_text(sample: dict, step: int | None, samples: list[dict]) -> Group:
    """One answer: where it is from, reward, advantage, rubric, the prompt, the whole answer, then its breakdown."""
    group = group_of(samples, sample)
    text = Text()
    text.append(f"{sample.get('task_id') or '?'}", style="bold")
    place = f" · step {step}" if step is not None else ""
    if sample.get("group") is not None:
        place += f" · group {sample['group']} (answer {group.index(sample) + 1} of {len(group)})"
    text.append(place + "\n")
    score, _ = rubric_of(sample.get("breakdown"))
    text.append(f"reward {_num(sample.get('reward'))}", style="bold")
    if sample.get("advantage") is not None:
        text.append(f"   advantage {_num(sample.get('advantage'), 2, signed=True)}")
    if score is not None:
        text.append(f"   rubric {_num(score, 2)}")
    text.append("\n")
    _section(text, "prompt")
    text.append(clean(sample.get("prompt") or "(not logged)").strip() + "\n")
    _section(text, "answer")
    text.append(clean(sample.get("response")).rstrip())
    return Group(text, breakdown_text(sample.get("breakdown")))


def group_text(sample: dict, step: int | None, samples: list[dict]) -> Text:
    """The n answers to one prompt with their rewards and advantages, best advantage first."""
    group = group_of(samples, sample)
    rewards = [s.get("reward") for s in group if isinstance(s.get("reward"), (int, float))]
    text = Text()
    text.append(f"{sample.get('task_id') or '?'}", style="bold")
    text.append(f" · step {step} · {len(group)} answers · rewards {_num(min(rewards, default=None))}-"
                f"{_num(max(rewards, default=None))}\n")
    if rewards and max(rewards) == min(rewards):
        text.append("all answers scored the same: zero advantage, this group teaches nothing\n", style="italic")
    ordered = sorted(group, key=lambda s: -(s.get("advantage") if isinstance(s.get("advantage"), (int, float))
                                            else s.get("reward") or 0))
    for i, answer in enumerate(ordered, 1):
        score, _ = rubric_of(answer.get("breakdown"))
        _section(text, f"#{i}  reward {_num(answer.get('reward'))}  advantage "
                       f"{_num(answer.get('advantage'), 2, signed=True)}" + (f"  rubric {_num(score, 2)}"
                                                                             if score is not None else ""))
        text.append(clean(answer.get("response")).rstrip() + "\n")
    return text


def across_steps(key: str, occurrences: list[tuple[int, list[dict]]], width: int) -> RenderableType:
    """The same prompt over the run: one row per step, then its first and latest best answers side by side."""
    if not occurrences:
        return Text("this prompt appears in no other logged step", style="dim")
    table = Table(box=None, header_style="bold", pad_edge=False, expand=False)
    for name in ("step", "answers", "mean", "best", "rubric"):
        table.add_column(name, justify="right")
    for step, samples in occurrences:
        rewards = [s["reward"] for s in samples if isinstance(s.get("reward"), (int, float))]
        rubrics = [r for r in (rubric_of(s.get("breakdown"))[0] for s in samples) if r is not None]
        table.add_row(str(step), str(len(samples)), _num(sum(rewards) / len(rewards) if rewards else None),
                      _num(max(rewards, default=None)), _num(sum(rubrics) / len(rubrics) if rubrics else None, 2))

    def best(samples: list[dict]) -> dict:
        return max(samples, key=lambda s: s.get("reward") if isinstance(s.get("reward"), (int, float)) else -1)

    first_step, first = occurrences[0]
    last_step, last = occurrences[-1]
    side = Table(box=None, expand=True, show_lines=False, pad_edge=False)
    title = f"{key[:60]} in {len(occurrences)} steps"
    for step, samples in ((first_step, first), (last_step, last)) if last_step != first_step else ((first_step, first),):
        answer = best(samples)
        side.add_column(f"step {step}: reward {_num(answer.get('reward'))}", ratio=1, overflow="fold")
    cells = [clean(best(s).get("response")).rstrip() for _, s in
             ((first_step, first), (last_step, last))[: len(side.columns)]]
    side.add_row(*cells)
    return Group(Text(title, style="bold"), table, Text(""), side)


@dataclass
class SamplesLoaded(Message):
    """A step's samples read back by the inspector's worker (step None: the run has none yet)."""

    step: int | None
    samples: list[dict]
    steps: list[int]


@dataclass
class PromptLoaded(Message):
    """Every step that holds one prompt (task), read back by the inspector's worker."""

    key: str
    occurrences: list[tuple[int, list[dict]]]


class SampleInspector(Widget):
    """Steps on the left (`[` and `]` move), the step's answers below them, the chosen view on the right."""

    HELP_AREA = "samples tab"
    # Not in the footer: the title line says them, and a footer that changes with the tab costs every tab switch.
    BINDINGS = [
        Binding("left_square_bracket", "move(-1)", "Previous step", key_display="[", id="samples.previous",
                show=False),
        Binding("right_square_bracket", "move(1)", "Next step", key_display="]", id="samples.next", show=False),
        Binding("end", "latest", "Latest step", id="samples.latest", show=False),
        Binding("v", "cycle_view", "Answer/group/across steps", id="samples.view", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.source = None  # a SampleIndex or RolloutSamples
        self.steps: list[int] = []
        self.step: int | None = None
        self.samples: list[dict] = []
        self.follow = True  # show each new step as it arrives, until the user moves away from the latest
        self.view = VIEWS[0]
        self.occurrences: tuple[str, list] | None = None
        self._columns: list[tuple[str, int]] = []
        self.loads = 0

    def compose(self) -> ComposeResult:
        with Horizontal():
            with Vertical(id="samples-left"):
                yield Static("no samples yet", id="samples-title")
                yield DataTable(id="samples-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="samples-detail"):
                yield Static("", id="samples-body")

    def on_mount(self) -> None:
        self._size_columns()

    def on_resize(self, event) -> None:
        self._size_columns()

    def _size_columns(self) -> None:
        """Reward and advantage whole (`0.500`, `+0.90`), the task id takes what is left, the group only where it
        fits (the detail pane names it): a table wider than its pane cut the advantage and showed `0.0`."""
        table = self.query_one("#samples-table", DataTable)
        room = self.query_one("#samples-left").size.width - 2 - 2 * table.cell_padding  # the scrollbar, padding
        columns = [("task", 0), ("grp", 4), ("reward", 6), ("adv", 5)]
        if room < 29:  # a task id under 8 characters is no use
            columns.remove(("grp", 4))
        room -= sum(w for _, w in columns) + 2 * table.cell_padding * (len(columns) - 1)
        columns[0] = ("task", max(6, room))
        if columns == self._columns:
            return
        self._columns = columns
        table.clear(columns=True)
        for label, width in columns:
            table.add_column(label, width=width)
        self._fill_rows()

    def _fill_rows(self) -> None:
        table = self.query_one("#samples-table", DataTable)
        row = table.cursor_row
        table.clear()
        task_width = self._columns[0][1]
        for sample in self.samples:
            cells = {"task": str(sample.get("task_id") or "?")[:task_width], "grp": str(sample.get("group") or "")[:4],
                     "reward": _num(sample.get("reward")), "adv": _num(sample.get("advantage"), 2, signed=True)}
            table.add_row(*(cells[label] for label, _ in self._columns))
        if self.samples:
            table.move_cursor(row=min(max(row, 0), len(self.samples) - 1))

    def attach(self, source) -> None:
        """Follow another run's samples (None: the run has none)."""
        self.source = source
        self.steps, self.step, self.samples, self.follow, self.occurrences = [], None, [], True, None
        if self.is_mounted:
            self.query_one("#samples-table", DataTable).clear()
            self.query_one("#samples-title", Static).update("no samples yet" if source else "this run logs no samples")
            self.query_one("#samples-body", Static).update("")

    def refresh_source(self) -> None:
        """New samples were logged: show the newest step if following, else only update the step count."""
        if self.source is not None:
            self._load(self.step if not self.follow else None)

    @work(thread=True, exclusive=True, group="samples-load", exit_on_error=False)
    def _load(self, step: int | None) -> None:
        source = self.source
        steps = source.steps()
        if step is None or step not in steps:
            step = steps[-1] if steps else None
        self.post_message(SamplesLoaded(step, source.load(step) if step is not None else [], steps))

    @work(thread=True, exclusive=True, group="samples-prompt", exit_on_error=False)
    def _load_prompt(self, key: str) -> None:
        self.post_message(PromptLoaded(key, self.source.load_prompt(key)))

    def on_samples_loaded(self, message: SamplesLoaded) -> None:
        message.stop()
        self.loads += 1
        self.steps = message.steps
        changed = message.step != self.step or message.samples != self.samples
        self.step, self.samples = message.step, message.samples
        title = self.query_one("#samples-title", Static)
        if self.step is None:
            title.update("no samples yet")
            return
        position = self.steps.index(self.step) + 1 if self.step in self.steps else "?"
        title.update(f"step {self.step} ({position} of {len(self.steps)}) · [ ] step · "
                     f"v {VIEWS[(VIEWS.index(self.view) + 1) % 3]}"
                     + ("" if self.follow else " · end: latest"))
        if not changed:
            return
        self._fill_rows()
        self.show()

    def on_prompt_loaded(self, message: PromptLoaded) -> None:
        message.stop()
        self.occurrences = (message.key, message.occurrences)
        self.show()

    def selected(self) -> dict | None:
        table = self.query_one("#samples-table", DataTable)
        if not self.samples or not 0 <= table.cursor_row < len(self.samples):
            return None
        return self.samples[table.cursor_row]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.occurrences = None if self.view != "across steps" else self.occurrences
        self.show()

    def show(self) -> None:
        """Draw the chosen view of the selected answer."""
        body = self.query_one("#samples-body", Static)
        sample = self.selected()
        if sample is None:
            body.update("")
            return
        if self.view == "answer":
            body.update(answer_text(sample, self.step, self.samples))
        elif self.view == "group":
            body.update(group_text(sample, self.step, self.samples))
        else:
            key = sample_key(sample)
            if self.occurrences is None or self.occurrences[0] != key:
                body.update(Text(f"reading every step for {key[:60]}...", style="dim"))
                self._load_prompt(key)
                return
            body.update(across_steps(key, self.occurrences[1], body.size.width))
        self.query_one("#samples-detail", VerticalScroll).scroll_home(animate=False)

    # -- actions --------------------------------------------------------------------------------
    def action_move(self, delta: int) -> None:
        if not self.steps or self.step is None:
            return
        index = min(max(self.steps.index(self.step) + delta if self.step in self.steps else len(self.steps) - 1, 0),
                    len(self.steps) - 1)
        self.follow = index == len(self.steps) - 1
        self._load(self.steps[index])

    def action_latest(self) -> None:
        self.follow = True
        self._load(None)

    def action_cycle_view(self) -> None:
        self.view = VIEWS[(VIEWS.index(self.view) + 1) % len(VIEWS)]
        self.notify(f"samples: {self.view}", timeout=2)
        self._load(self.step)  # the title names the next view
        self.show()
