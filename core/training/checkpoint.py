"""Training checkpoints: `checkpoints/global_step_<N>/` with weights, optimizer, scheduler, RNG and data position.

Each checkpoint is a loadable model folder (safetensors + tokenizer) written to a temporary folder and
renamed into place, so a crash mid-save never leaves a checkpoint that `--resume` would trust.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

STEP_DIR = re.compile(r"^global_step_(\d+)$")
STATE_FILE = "trainer_state.json"  # written last: its presence marks a complete checkpoint
LATEST_FILE = "latest_checkpointed_iteration.txt"  # verl's name, for tools that read it


def rng_state() -> dict[str, Any]:
    """Every random generator a run draws from: Python, NumPy, torch CPU and CUDA."""
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` returned (CUDA only when this machine has it)."""
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def step_folders(root: Path) -> list[tuple[int, Path]]:
    """Every `global_step_<N>` folder under `root`, oldest first, as (step, folder), complete or not."""
    if not root.is_dir():
        return []
    return sorted((int(m.group(1)), entry) for entry in root.iterdir() if (m := STEP_DIR.match(entry.name)))


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under `root`, oldest first, as (step, folder)."""
    return [(step, folder) for step, folder in step_folders(root) if (folder / STATE_FILE).is_file()]


def latest_checkpoint(root: Path) -> tuple[int, Path] | None:
    """The newest complete checkpoint, or None."""
    found = list_checkpoints(root)
    return found[-1] if found else None


def save_checkpoint(
    root: Path, step: int, *, model, tokenizer, optimizer, scheduler, trainer_state: dict[str, Any], keep: int
) -> Path:
    """Write `root/global_step_<step>` atomically and delete all but the newest `keep` checkpoints."""
    import torch

    target = root / f"global_step_{step}"
    if (target / STATE_FILE).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".global_step_{step}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        from core.training.tiny_model import quiet_progress_bars

        with quiet_progress_bars():
            model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        torch.save(rng_state(), tmp / "rng.pt")
        (tmp / STATE_FILE).write_text(json.dumps({**trainer_state, "global_step": step}, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)  # an incomplete leftover from a crash
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (root / LATEST_FILE).write_text(f"{step}\n", encoding="utf-8")
    for _, old in list_checkpoints(root)[: -max(1, keep)]:
        shutil.rmtree(old, ignore_errors=True)
        log.debug("removed old checkpoint %s", old)
    return target


def load_checkpoint(folder: Path, *, optimizer, scheduler) -> dict[str, Any]:
    """Restore optimizer, scheduler and RNG from `folder` (the model loads from the folder itself);
    returns the trainer state (step, data position...)."""
    import torch

    optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=False))
    scheduler.load_state_dict(torch.load(folder / "scheduler.pt", weights_only=False))
    set_rng_state(torch.load(folder / "rng.pt", weights_only=False))
    return json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
