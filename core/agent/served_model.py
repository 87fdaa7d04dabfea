"""Which model `serve` and `eval --local` load: `builtin:tiny`, a model folder, a cached Hugging Face id,
or a run (id, id prefix or folder) whose newest checkpoint holding a model is served as `<run_id>@step<N>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.errors import UserError


@dataclass(frozen=True)
class ServedModel:
    """What `serve` will load: the folder, the name clients send as `model`, and where it came from."""

    path: Path
    name: str
    source: str


def latest_checkpoint_model(checkpoints: Path) -> tuple[int, Path] | None:
    """The newest `global_step_<N>` folder under `checkpoints` that holds a model (a config.json)."""
    from core.training.checkpoint import step_folders

    for step, entry in reversed(step_folders(checkpoints)):
        for folder in (entry, entry / "actor" / "huggingface"):  # ours, then verl's layout
            if (folder / "config.json").is_file():
                return step, folder
    return None


def resolve_served_model(spec: str) -> ServedModel:
    """Turn `builtin:tiny`, a run id or folder, a checkpoint folder, a model folder or a cached HF id into a model."""
    from core.training.tiny_model import BUILTIN_TINY, resolve_model_path

    text = str(spec).strip()
    if not text:
        raise UserError("model: empty; pass builtin:tiny, a model folder, a run id/folder or a cached Hugging Face id")
    if text == BUILTIN_TINY:
        return ServedModel(resolve_model_path(text), "tiny", text)
    run_folder = _run_folder(text)
    if run_folder is not None:
        latest = latest_checkpoint_model(run_folder / "checkpoints")
        if latest is None:
            raise UserError(
                f"run {run_folder}: no checkpoint with a model yet (no checkpoints/global_step_*/config.json); "
                "wait for the first checkpoint (trainer.save_freq) or serve another model"
            )
        step, folder = latest
        return ServedModel(folder, f"{run_folder.name}@step{step}", str(run_folder))
    path = resolve_model_path(text)
    return ServedModel(path, path.name if Path(text).expanduser().exists() else text, text)


def _run_folder(text: str) -> Path | None:
    """The run folder `text` names (`core.runs.find_run`), absolute, else None."""
    from core.runs import find_run

    found = find_run(text)
    return found.resolve() if found is not None else None
