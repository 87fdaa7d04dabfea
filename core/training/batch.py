"""One training step's data: the rollout batch (prompts + responses as padded tensors) and the prompt stream.

`Batch` is what the trainer generates, scores and updates on; `PromptStream` deals the training prompts in a
seeded order per epoch and saves its position in checkpoints, so a resumed run draws the same prompts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from core.errors import UserError


@dataclass
class Batch:
    """One step's rollouts: left-padded prompts followed by right-padded responses."""

    input_ids: Any  # (B, P + R)
    attention_mask: Any
    position_ids: Any
    response_mask: Any  # (B, R) float
    records: list[dict]
    uids: list[str]
    texts: list[str]
    prompt_lengths: list[int]
    scores: Any = None  # (B,)
    breakdowns: list[dict] = field(default_factory=list)

    @property
    def response_length(self) -> int:
        return self.response_mask.shape[1]

    def select(self, rows: list[int]) -> Batch:
        import torch

        idx = torch.tensor(rows, dtype=torch.long)
        return Batch(
            input_ids=self.input_ids[idx],
            attention_mask=self.attention_mask[idx],
            position_ids=self.position_ids[idx],
            response_mask=self.response_mask[idx],
            records=[self.records[i] for i in rows],
            uids=[self.uids[i] for i in rows],
            texts=[self.texts[i] for i in rows],
            prompt_lengths=[self.prompt_lengths[i] for i in rows],
            scores=self.scores[idx] if self.scores is not None else None,
            breakdowns=[self.breakdowns[i] for i in rows] if self.breakdowns else [],
        )


def concat_batches(parts: list[Batch], pad_id: int) -> Batch:
    """Join rollouts of several generation rounds (dynamic sampling), re-padding to a common width."""
    import torch

    if len(parts) == 1:
        return parts[0]
    prompt_w = max(p.input_ids.shape[1] - p.response_length for p in parts)
    resp_w = max(p.response_length for p in parts)

    def pad(t, left: int, right: int, value):
        return torch.nn.functional.pad(t, (left, right), value=value)

    cols = {"input_ids": [], "attention_mask": [], "response_mask": []}
    for p in parts:
        left = prompt_w - (p.input_ids.shape[1] - p.response_length)
        right = resp_w - p.response_length
        cols["input_ids"].append(pad(p.input_ids, left, right, pad_id))
        cols["attention_mask"].append(pad(p.attention_mask, left, right, 0))
        cols["response_mask"].append(pad(p.response_mask, 0, right, 0.0))
    attention = torch.cat(cols["attention_mask"])
    return Batch(
        input_ids=torch.cat(cols["input_ids"]),
        attention_mask=attention,
        position_ids=(attention.cumsum(-1) - 1).clamp(min=0),
        response_mask=torch.cat(cols["response_mask"]),
        records=[r for p in parts for r in p.records],
        uids=[u for p in parts for u in p.uids],
        texts=[t for p in parts for t in p.texts],
        prompt_lengths=[n for p in parts for n in p.prompt_lengths],
        scores=torch.cat([p.scores for p in parts]),
        breakdowns=[b for p in parts for b in p.breakdowns],
    )


class PromptStream:
    """Training prompts in a seeded order per epoch; its position is saved in checkpoints."""

    def __init__(self, records: list[dict], *, shuffle: bool, seed: int, epoch: int = 0, offset: int = 0) -> None:
        if not records:
            raise UserError("the training split is empty; add tasks to tasks/data or lower devops.val_fraction")
        self.records, self.shuffle, self.seed = records, shuffle, seed
        self.epoch, self.offset = epoch, offset
        self._order = self._order_for(epoch)

    def _order_for(self, epoch: int) -> list[int]:
        order = list(range(len(self.records)))
        if self.shuffle:
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order

    def take(self, count: int) -> list[dict]:
        out = []
        while len(out) < count:
            if self.offset >= len(self._order):
                self.epoch, self.offset = self.epoch + 1, 0
                self._order = self._order_for(self.epoch)
            out.append(self.records[self._order[self.offset]])
            self.offset += 1
        return out

    def state(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset}
