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

from core.errors import UserError, shorten
from core.files import read_regular

log = logging.getLogger(__name__)

STEP_DIR = re.compile(r"^global_step_(\d+)$")
STATE_FILE = "trainer_state.json"  # written last: its presence marks a complete checkpoint
RNG_FILE = "rng.json"  # plain data, so loading a checkpoint never unpickles anything but tensors
LATEST_FILE = "latest_checkpointed_iteration.txt"  # verl's name, for tools that read it


def rng_state() -> dict[str, Any]:
    """Every random generator a run draws from (Python, NumPy, torch CPU and CUDA) as plain JSON data."""
    import numpy as np
    import torch

    version, words, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": {"version": version, "state": list(words), "gauss": gauss},
        "numpy": {"kind": kind, "keys": keys.tolist(), "pos": int(pos), "has_gauss": int(has_gauss),
                  "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` returned (CUDA only when this machine has it)."""
    import numpy as np
    import torch

    py, npy = state["python"], state["numpy"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss"]))
    np.random.set_state((npy["kind"], np.array(npy["keys"], dtype=np.uint32), npy["pos"], npy["has_gauss"],
                         npy["cached_gaussian"]))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


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


def set_aside(folder: Path) -> Path:
    """Rename a checkpoint that cannot be loaded to `<name>.unreadable` (then `.unreadable-2`, ...): out of the way of
    `--resume` and of the step's next save, and never deleted, so nothing is lost."""
    for n in range(1, 1000):
        target = folder.with_name(f"{folder.name}.unreadable" + (f"-{n}" if n > 1 else ""))
        if not target.exists():
            os.rename(folder, target)
            return target
    raise UserError(f"{folder}: too many set-aside copies beside it; remove the *.unreadable* folders you do not need")


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
    for stale in root.glob(".global_step_*.tmp-*"):  # a save cut short by a crash; one writer per run, so not live
        shutil.rmtree(stale, ignore_errors=True)
    from safetensors import SafetensorError

    try:
        tmp.mkdir()
        from core.training.tiny_model import quiet_progress_bars

        with quiet_progress_bars():
            model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        (tmp / RNG_FILE).write_text(json.dumps(rng_state()), encoding="utf-8")
        (tmp / STATE_FILE).write_text(json.dumps({**trainer_state, "global_step": step}, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)  # an incomplete leftover from a crash
        os.rename(tmp, target)
    except (OSError, SafetensorError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and not any(s in str(exc) for s in ("inline_container", "writ")):
            raise  # only torch.save's stream writer failing (a full disk says "unexpected pos ..."), not any RuntimeError
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).strip().splitlines()[0]
        free = shutil.disk_usage(root).free / 2**20
        raise UserError(f"{shorten(root)}: cannot write the checkpoint of step {step} ({shorten(reason, 80)}; "
                        f"{free:.1f} MiB free there); free space (or lower devops.keep_checkpoints), then --resume from "
                        "the last checkpoint") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (root / LATEST_FILE).write_text(f"{step}\n", encoding="utf-8")
    for _, old in list_checkpoints(root)[: -max(1, keep)]:
        shutil.rmtree(old, ignore_errors=True)
        log.debug("removed old checkpoint %s", old)
    return target


def load_checkpoint(folder: Path, *, optimizer, scheduler) -> dict[str, Any]:
    """Restore optimizer, scheduler and RNG from `folder` (the model loads from the folder itself);
    returns the trainer state (step, data position...).

    Only tensors and plain data are unpickled (`weights_only=True`), so a tampered checkpoint cannot run code;
    a checkpoint from before that (its RNG state pickled in rng.pt) is refused with one line.
    """
    import pickle

    import torch

    if not (folder / RNG_FILE).is_file():
        raise UserError(f"{folder}: this checkpoint was written by an older devops-rl (RNG state in rng.pt, which cannot "
                        "be loaded safely); start a new run, or resume from a checkpoint written by this version")
    try:
        optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=True))
        scheduler.load_state_dict(torch.load(folder / "scheduler.pt", weights_only=True))
    except pickle.UnpicklingError as exc:
        raise UserError(f"{folder}: the optimizer or scheduler state holds more than tensors and plain data, so it is "
                        f"not loaded ({str(exc).splitlines()[0]}); resume from another checkpoint") from None
    try:
        set_rng_state(_json_object(folder / RNG_FILE))
    except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as exc:
        what = f"no {exc}" if isinstance(exc, KeyError) else shorten(str(exc).splitlines()[0] if str(exc) else exc, 80)
        raise UserError(f"{shorten(folder / RNG_FILE)}: not the random-generator state this version writes ({what}); "
                        "resume from another checkpoint") from None
    return _json_object(folder / STATE_FILE)


def _json_object(path: Path) -> dict[str, Any]:
    """A checkpoint's JSON file as an object; UserError naming it when it is not readable JSON or not an object."""
    try:
        data = json.loads(read_regular(path))
    except (OSError, ValueError) as exc:
        raise UserError(f"{shorten(path)}: not readable JSON ({shorten(exc, 80)}); resume from another checkpoint") from None
    if not isinstance(data, dict):
        raise UserError(f"{shorten(path)}: holds a JSON {type(data).__name__}, not an object; resume from another "
                        "checkpoint")
    return data
