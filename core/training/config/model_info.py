"""Model metadata for the config's checks: a model's config.json from disk or the table of well-known models.

The doctor's parameter count and `validate`'s context-length check read it without loading any weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# The config.json figures of well-known models, for when their files are not on this machine
# (the doctor's parameter count and the context-length check use them).
KNOWN_MODELS: dict[str, dict[str, Any]] = {
    name: dict(zip(("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                    "intermediate_size", "vocab_size", "tie_word_embeddings", "max_position_embeddings", "head_dim"), row))
    for name, row in {
        "Qwen/Qwen2.5-0.5B-Instruct": (896, 24, 14, 2, 4864, 151936, True, 32768, None),
        "Qwen/Qwen2.5-1.5B-Instruct": (1536, 28, 12, 2, 8960, 151936, True, 32768, None),
        "Qwen/Qwen2.5-3B-Instruct": (2048, 36, 16, 2, 11008, 151936, True, 32768, None),
        "Qwen/Qwen2.5-7B-Instruct": (3584, 28, 28, 4, 18944, 152064, False, 32768, None),
        "Qwen/Qwen2.5-14B-Instruct": (5120, 48, 40, 8, 13824, 152064, False, 32768, None),
        "Qwen/Qwen2.5-32B-Instruct": (5120, 64, 40, 8, 27648, 152064, False, 32768, None),
        "Qwen/Qwen3-0.6B": (1024, 28, 16, 8, 3072, 151936, True, 40960, 128),
        "Qwen/Qwen3-1.7B": (2048, 28, 16, 8, 6144, 151936, True, 40960, 128),
        "Qwen/Qwen3-4B": (2560, 36, 32, 8, 9728, 151936, True, 40960, 128),
        "Qwen/Qwen3-8B": (4096, 36, 32, 8, 12288, 151936, False, 40960, 128),
        "meta-llama/Llama-3.1-8B-Instruct": (4096, 32, 32, 8, 14336, 128256, False, 131072, None),
        "meta-llama/Llama-3.2-1B-Instruct": (2048, 16, 32, 8, 8192, 128256, True, 131072, 64),
        "meta-llama/Llama-3.2-3B-Instruct": (3072, 28, 24, 8, 8192, 128256, True, 131072, 128),
    }.items()
}


def model_config_json(model_path: str, *, build_builtin: bool = False) -> dict | None:
    """The model's config.json when it is local (builtin:tiny: its recipe unless built), else KNOWN_MODELS, else None."""
    import json

    from core.training import tiny_model

    if model_path == tiny_model.BUILTIN_TINY:
        if build_builtin:
            folder = tiny_model.ensure_tiny_model()
        else:
            return {"model_type": "qwen2", "tie_word_embeddings": True, **tiny_model.TINY_RECIPE}
    else:
        folder = Path(model_path).expanduser()
        if not folder.is_dir() and model_path.count("/") == 1:
            folder = _hf_cached_folder(model_path) or folder
    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = KNOWN_MODELS.get(model_path)
        return {k: v for k, v in known.items() if v is not None} if known else None


def _hf_cached_folder(repo_id: str) -> Path | None:
    """The newest snapshot of a Hugging Face model in the local hub cache that has a config.json.

    Looked up on disk (`$HF_HUB_CACHE`, `$HF_HOME/hub`, ~/.cache/huggingface/hub) rather than through
    huggingface_hub, whose import alone costs a quarter of a second on every `config` command.
    """
    import os

    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    snapshots = Path(hub) / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime) if snapshots.is_dir() else []
    return found[-1].parent if found else None


def model_context_length(model_path: str) -> int | None:
    """max_position_embeddings of the model, from its config.json or the table of well-known models."""
    info = model_config_json(model_path) or {}
    return info.get("max_position_embeddings") or (info.get("text_config") or {}).get("max_position_embeddings")
