"""Checkpoints load safely: tensors and plain data only (`weights_only=True`), RNG state as JSON.

A real tiny model, optimizer and scheduler are saved and restored; an old-format checkpoint and a tampered
optimizer file are refused with one line, and the tampered file's code never runs.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from core.errors import UserError


class _Payload:
    """Pickles to a call that would create a marker file when unpickled (what `weights_only=False` would run)."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture()
def trained(tmp_path):
    """A checkpoint of the built-in tiny model after one optimizer step, and fresh optimizer/scheduler to load into."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.training.checkpoint import save_checkpoint
    from core.training.core_algos import lr_schedule
    from core.training.tiny_model import ensure_tiny_model

    path = ensure_tiny_model()
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)

    def fresh():
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule("cosine", 2, 10))

    optimizer, scheduler = fresh()
    model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    optimizer.step()
    scheduler.step()
    folder = save_checkpoint(tmp_path / "checkpoints", 1, model=model, tokenizer=tokenizer, optimizer=optimizer,
                             scheduler=scheduler, trainer_state={"data": {"epoch": 0, "offset": 4}}, keep=3)
    return folder, optimizer, scheduler, fresh


def test_a_checkpoint_restores_optimizer_scheduler_and_every_random_generator(trained):
    from core.training.checkpoint import load_checkpoint

    folder, optimizer, scheduler, fresh = trained
    assert json.loads((folder / "rng.json").read_text())["torch"]  # plain JSON, no pickle
    expected = (random.random(), float(np.random.rand()), torch.rand(1).item())
    new_optimizer, new_scheduler = fresh()
    state = load_checkpoint(folder, optimizer=new_optimizer, scheduler=new_scheduler)
    assert (random.random(), float(np.random.rand()), torch.rand(1).item()) == expected
    assert state["global_step"] == 1 and state["data"] == {"epoch": 0, "offset": 4}
    assert new_scheduler.state_dict() == scheduler.state_dict()
    saved, loaded = optimizer.state_dict()["state"], new_optimizer.state_dict()["state"]
    assert saved.keys() == loaded.keys()
    assert all(torch.equal(saved[k]["exp_avg"], loaded[k]["exp_avg"]) for k in saved)


def test_a_checkpoint_from_before_safe_loading_is_refused_with_one_line(trained):
    from core.training.checkpoint import load_checkpoint

    folder, _, _, fresh = trained
    (folder / "rng.json").unlink()
    torch.save({"numpy": np.random.get_state()}, folder / "rng.pt")  # the old format pickled NumPy's state
    optimizer, scheduler = fresh()
    with pytest.raises(UserError, match="written by an older devops-rl") as info:
        load_checkpoint(folder, optimizer=optimizer, scheduler=scheduler)
    assert "\n" not in str(info.value) and str(folder) in str(info.value)


def test_a_tampered_optimizer_file_is_refused_and_its_code_never_runs(trained, tmp_path):
    from core.training.checkpoint import load_checkpoint

    folder, _, _, fresh = trained
    marker = tmp_path / "pwned"
    torch.save({"state": {}, "param_groups": [], "extra": _Payload(marker)}, folder / "optimizer.pt")
    optimizer, scheduler = fresh()
    with pytest.raises(UserError, match="holds more than tensors and plain data") as info:
        load_checkpoint(folder, optimizer=optimizer, scheduler=scheduler)
    assert "\n" not in str(info.value)
    assert not marker.exists()
