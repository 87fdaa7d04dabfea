"""Choosing the torch device for training, warm-starts and serving: one rule for `auto`, one error for a missing GPU.

`select_device("auto")` is CUDA when torch sees a GPU, else the CPU; asking for CUDA without one is a UserError.
"""

from __future__ import annotations

import re

from core.errors import UserError


def select_device(setting: str = "auto", *, option: str = "devops.device"):
    """The torch.device for `setting` (auto, cpu, cuda or cuda:N), as set by `option` (a config key or a --flag),
    which the error names together with the fix."""
    import torch

    flag = option.startswith("--")
    said, fix = (f"{option} {setting}", f"{option} cpu") if flag else (f"{option}: {setting}", f"--set {option}=cpu")
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if setting != "cpu" and not re.fullmatch(r"cuda(:\d+)?", setting):
        raise UserError(f"{said}: unknown device; one of auto, cpu, cuda")
    if setting != "cpu" and not torch.cuda.is_available():
        raise UserError(f"{said}: no CUDA GPU visible to torch here; use {fix} (or auto)")
    return torch.device(setting)
