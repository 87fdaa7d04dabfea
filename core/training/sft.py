"""SFT warm-start: fine-tune a model on the tasks' reference answers, loss on the assistant tokens only.

`run_sft` writes an ordinary model folder that `train --model` accepts; `ensure_warmstart` caches a short
warm-start of the built-in model so `--mode ci-fast` starts RL from a model that already writes DevOps prose.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.errors import UserError

log = logging.getLogger(__name__)

IGNORE_INDEX = -100


@dataclass(frozen=True)
class SftSettings:
    """The knobs of a warm-start; all of them are part of the cache key."""

    steps: int = 200
    lr: float = 3e-3
    batch_size: int = 4
    max_length: int = 1024
    seed: int = 0
    warmup_ratio: float = 0.05
    # The RL run's prompt limit and truncation, so the warm-start sees the prompts RL will see.
    max_prompt_length: int | None = None
    truncation: str = "error"
    # Fit each answer to this many tokens, its end token included (`fit_answer`): RL samples short responses,
    # so the warm-start teaches a whole short answer that ends, not the cut-off start of a long one.
    max_answer_tokens: int | None = None


def truncate_prompt(ids: list[int], limit: int | None, how: str, task_id: str) -> list[int]:
    """Apply `data.max_prompt_length` / `data.truncation` (left keeps the end, right the start, middle both ends)."""
    if limit is None or len(ids) <= limit:
        return ids
    if how == "left":
        return ids[-limit:]
    if how == "right":
        return ids[:limit]
    if how == "middle":
        return ids[: limit // 2] + ids[len(ids) - (limit - limit // 2) :]
    raise UserError(
        f"data.max_prompt_length: task '{task_id}' has a {len(ids)}-token prompt, over {limit}; "
        "raise data.max_prompt_length or set data.truncation=left"
    )


def fit_answer(tokenizer, answer: str, budget: int | None) -> list[int]:
    """The answer's token ids and `<|im_end|>`, fitted to `budget` tokens at a paragraph boundary.

    Keeps the leading whole paragraphs (blank-line separated, never ending inside a code fence) that fit with the
    end token, so the model learns to finish within the budget; a first paragraph over the budget is cut (and
    the end token with it).
    """
    eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]

    if budget is None:
        return encode(answer)
    paragraphs = answer.split("\n\n")
    best = encode(paragraphs[0])[:budget]
    for end in range(2, len(paragraphs) + 1):
        text = "\n\n".join(paragraphs[:end])
        if text.count("```") % 2:
            continue
        ids = encode(text)
        if len(ids) > budget:
            break
        best = ids
    return best


def build_examples(
    tasks,
    tokenizer,
    system_prompt: str,
    max_length: int,
    *,
    max_prompt_length: int | None = None,
    truncation: str = "error",
    max_answer_tokens: int | None = None,
) -> list[tuple[list[int], list[int]]]:
    """(input ids, labels) per task with a reference answer; labels are -100 on the prompt.

    The prompt is tokenized exactly as at generation time (chat template with the generation prompt) and
    the answer plus `<|im_end|>` separately, so SFT teaches the very token sequence RL will sample.
    """
    examples = []
    for task in tasks:
        if not task.reference_answer:
            continue
        messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": task.desc}]
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt_ids = truncate_prompt(tokenizer(prompt, add_special_tokens=False)["input_ids"],
                                     max_prompt_length, truncation, task.id)
        answer_ids = fit_answer(tokenizer, task.reference_answer, max_answer_tokens)
        room = max_length - len(prompt_ids)
        if room < 16:
            raise UserError(
                f"sft max_length {max_length} leaves no room for the answer after the {len(prompt_ids)}-token prompt "
                f"of task '{task.id}'; raise --max-length"
            )
        answer_ids = answer_ids[:room]
        examples.append((prompt_ids + answer_ids, [IGNORE_INDEX] * len(prompt_ids) + answer_ids))
    if not examples:
        raise UserError("no task has a reference_answer to fine-tune on; add 'reference_answer' to tasks/data/*.yaml")
    return examples


def _collate(batch, pad_id: int):
    import torch

    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (ids, labs) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, : len(labs)] = torch.tensor(labs)
        attention[row, : len(ids)] = 1
    return input_ids, labels, attention


def answer_loss(model, input_ids, attention, labels):
    """Mean next-token cross-entropy over the labelled (answer) positions: the model's own `loss`, computed cheaper.

    Two savings, both exact: the tokens every row starts with (the system prompt, most of each prompt) go through
    the layers once, their keys and values shared by the rows; and the output projection runs only where a label
    is (over a 4k vocabulary it costs a small model more than its layers). Rows must be padded on the right.
    """
    import torch

    decoder = model.get_decoder()
    rows, width = input_ids.shape
    # The shared prefix ends where any row first differs, and leaves every row at least one token of its own.
    differs = (input_ids != input_ids[:1]).any(dim=0).nonzero()
    shared = min(int(differs[0]) if len(differs) else width, width - 1)
    if rows > 1 and shared > 0:
        head = decoder(input_ids=input_ids[:1, :shared], use_cache=True)
        head.past_key_values.batch_repeat_interleave(rows)
        tail = decoder(input_ids=input_ids[:, shared:], attention_mask=attention, past_key_values=head.past_key_values)
        hidden = torch.cat([head.last_hidden_state.expand(rows, -1, -1), tail.last_hidden_state], dim=1)
    else:
        hidden = decoder(input_ids=input_ids, attention_mask=attention).last_hidden_state
    targets = labels[:, 1:]
    keep = targets != IGNORE_INDEX
    logits = model.get_output_embeddings()(hidden[:, :-1][keep])
    return torch.nn.functional.cross_entropy(logits.float(), targets[keep])


def run_sft(
    model_path: Path,
    output: Path,
    settings: SftSettings,
    tasks,
    *,
    device: str = "auto",
    progress: Callable[[dict], None] | None = None,
) -> dict:
    """Fine-tune `model_path` on the reference answers and save model + tokenizer to `output` (atomically).

    `tasks` are the training split's (keep the validation tasks unseen). Returns {"steps", "first_loss",
    "last_loss", "seconds", "examples"}.
    """
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.training.core_algos import lr_schedule
    from core.training.device import select_device
    from tasks.prompt import system_prompt

    dev = select_device(device)
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    from core.training.tiny_model import quiet_progress_bars

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    with quiet_progress_bars():
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(dev)
    model.train()
    examples = build_examples(
        tasks, tokenizer, system_prompt(), settings.max_length, max_prompt_length=settings.max_prompt_length,
        truncation=settings.truncation, max_answer_tokens=settings.max_answer_tokens,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.01)
    warmup = max(1, int(settings.steps * settings.warmup_ratio))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule("cosine", warmup, settings.steps))
    order: list[int] = []
    losses: list[float] = []
    started = time.monotonic()
    for step in range(1, settings.steps + 1):
        batch = []
        while len(batch) < settings.batch_size:
            if not order:
                order = list(range(len(examples)))
                rng.shuffle(order)
            batch.append(examples[order.pop()])
        input_ids, labels, attention = (t.to(dev) for t in _collate(batch, tokenizer.pad_token_id))
        loss = answer_loss(model, input_ids, attention, labels)
        if not torch.isfinite(loss):
            raise UserError(f"sft: the loss became {loss.item()} at step {step}; lower --lr (now {settings.lr})")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if progress is not None:
            progress({"step": step, "total_steps": settings.steps, "loss": losses[-1], "lr": scheduler.get_last_lr()[0]})
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}-", dir=output.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        summary = {
            "steps": settings.steps,
            "first_loss": losses[0],
            "last_loss": sum(losses[-10:]) / len(losses[-10:]),
            "seconds": round(time.monotonic() - started, 2),
            "examples": len(examples),
        }
        (tmp / "devops-rl-sft.json").write_text(
            json.dumps({"base_model": str(model_path), "settings": settings.__dict__, **summary}, indent=2) + "\n",
            encoding="utf-8",
        )
        if output.exists():
            shutil.rmtree(output)
        try:
            os.rename(tmp, output)
        except OSError:
            if not (output / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary


WARMSTART_EVENT_EVERY_S = 2.0  # between two `warmstart` events in a run folder (600 steps take ~85 s on a CPU)


def warmstart_reporter(run_dir) -> Callable[[dict], None]:
    """The progress callback a trainer passes to `ensure_warmstart`: a `warmstart` event in the run folder (step,
    total_steps, loss) at most every 2 s and at the last step, for the cockpit, and a log line every tenth, for the
    console (`warm-start 312/600, loss 0.41`)."""
    last = {"time": -math.inf, "tenth": 0}

    def report(update: dict) -> None:
        step, total, loss = update["step"], update["total_steps"], update["loss"]
        now = time.monotonic()
        if now - last["time"] >= WARMSTART_EVENT_EVERY_S or step == total:
            last["time"] = now
            run_dir.event("warmstart", step=step, total_steps=total, loss=round(loss, 4))
        tenth = step * 10 // max(total, 1)
        if tenth > last["tenth"]:
            last["tenth"] = tenth
            log.info("warm-start %d/%d, loss %.2f", step, total, loss)

    return report


def ensure_warmstart(base: Path, settings: SftSettings, tasks, *, device: str = "auto",
                     progress: Callable[[dict], None] | None = None) -> Path:
    """A cached SFT warm-start of `base` (keyed by the base folder's weights, the tasks and the settings);
    `progress` gets each step of a build (`run_sft`'s), e.g. `warmstart_reporter(run_dir)`."""
    from core.paths import build_lock, cache_dir

    digest = hashlib.sha256()
    digest.update(hashlib.sha256((Path(base) / "model.safetensors").read_bytes()).digest())
    digest.update(json.dumps(settings.__dict__, sort_keys=True).encode())
    for task in tasks:
        digest.update(json.dumps(task.to_dict(), sort_keys=True).encode())
    target = cache_dir() / "models" / f"sft-{Path(base).name}-{digest.hexdigest()[:12]}"
    with build_lock(target):
        if (target / "config.json").is_file():
            log.info("SFT warm-start: using the cached model %s", target)
            return target
        log.info("SFT warm-start: %d steps on the reference answers (cached in %s)", settings.steps, target)
        summary = run_sft(Path(base), target, settings, tasks, device=device, progress=progress)
    log.info("SFT warm-start: loss %.3f -> %.3f in %.0fs", summary["first_loss"], summary["last_loss"], summary["seconds"])
    return target
