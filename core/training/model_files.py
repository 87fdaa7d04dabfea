"""Model folders for training: checked before transformers loads them, each broken file named in one line.

`check_model_files` reads the JSON files and safetensors headers; `load_models` loads the policy and reference.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from core.errors import UserError

MODEL_JSON_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")


def check_model_files(folder: Path) -> None:
    """Read what a model folder's loading depends on (its JSON files, each safetensors header) and name the file that
    is broken, instead of the error several layers down in transformers. Cheap: no weights are read."""
    import json

    from safetensors import SafetensorError, safe_open

    from core.errors import shorten

    folder = Path(folder)
    for name in MODEL_JSON_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise UserError(f"{shorten(path)}: not a readable JSON file ({shorten(exc, 100)}); restore the model's "
                            "files (save_pretrained writes them)") from None
        if not isinstance(data, dict):
            raise UserError(f"{shorten(path)}: holds a JSON {type(data).__name__}, not an object; restore the model's "
                            "files (save_pretrained writes them)")
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), "pt"):
                pass
        except (OSError, SafetensorError) as exc:
            raise UserError(f"{shorten(path)}: not a complete safetensors file ({shorten(exc, 100)}); the copy is "
                            "truncated or damaged: restore it") from None


@contextmanager
def model_errors(folder: Path) -> Iterator[None]:
    """Turn what transformers raises on a model folder it cannot load into one line naming the folder."""
    import torch

    from core.errors import shorten

    try:
        yield
    except torch.OutOfMemoryError:
        raise  # the folder is fine; the device is full
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{shorten(folder)}: cannot load the model ({type(exc).__name__}: {shorten(first, 160)}); "
                        "check that the folder holds a complete save_pretrained model") from None


def load_models(cfg, device, model_path: Path, policy_path: Path):
    """(tokenizer, policy, reference or None) for training on `device` (bf16 where a CUDA GPU supports it, else
    float32); a UserError naming the folder and file when one cannot be loaded."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    use_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    dtype = torch.bfloat16 if use_bf16 else torch.float32
    kl = cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward
    for folder in (policy_path, model_path) if kl else (policy_path,):
        check_model_files(folder)
    with model_errors(policy_path):
        tokenizer = AutoTokenizer.from_pretrained(policy_path)
        policy = AutoModelForCausalLM.from_pretrained(policy_path, dtype=dtype).to(device)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if cfg.actor_rollout_ref.model.enable_gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    ref = None
    if kl:
        with model_errors(model_path):
            ref = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(device)
        ref.eval().requires_grad_(False)
    return tokenizer, policy, ref
