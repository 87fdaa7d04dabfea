"""Messages that background workers post to the cockpit's screens (workers never touch widgets).

High-rate announcements coalesce (`can_replace`): the data waits in the feed, the message only says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual.message import Message


@dataclass
class RunDataReady(Message):
    """New metrics/log lines/samples wait in the feed `feed_id`; drain it (one message per burst)."""

    feed_id: int

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunDataReady) and message.feed_id == self.feed_id


@dataclass
class RunsListed(Message):
    """A fresh listing of the runs folder (the newest replaces an unhandled older one)."""

    runs: list

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunsListed)


@dataclass
class OpenRun(Message):
    """Show this run folder (or verl metrics JSONL) on the Live screen."""

    path: Path
