"""The built-in tiny model (`builtin:tiny`): a Qwen2 causal LM and a byte-level BPE tokenizer built locally.

Built deterministically from a seed on the task corpus in seconds, cached as a `save_pretrained` folder
under `cache_dir()/models/`, and `resolve_model_path` turns any model argument into a local folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from core.errors import UserError

log = logging.getLogger(__name__)

BUILTIN_TINY = "builtin:tiny"
# Bump when the build code changes in a way the recipe does not capture (new files, new template...).
BUILD_VERSION = 1

# Qwen2's own pre-tokenizer regex (transformers' Qwen2Tokenizer rebuilds its pipeline with exactly this).
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

# Qwen2.5's chat template, trimmed of tool calls: a default system turn, <|im_start|>role ... <|im_end|>.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- set loop_messages = messages %}"
    "{%- endif %}"
    "{%- for message in loop_messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# The architecture and tokenizer settings; part of the cache key.
TINY_RECIPE: dict = {
    "seed": 1234,
    "vocab_size": 4096,
    "hidden_size": 96,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "initializer_range": 0.02,
    "min_frequency": 2,
}

# Used only while tasks/data is empty, so the tokenizer still knows ordinary DevOps words.
_FALLBACK_CORPUS = (
    "Design a CI/CD pipeline with automated tests, rollback, monitoring, alerts and documentation.\n"
    "Use Kubernetes deployments with readiness probes, resource limits, RBAC and secrets from a vault.\n"
    "Write Terraform modules, Dockerfiles, Prometheus alerts, Grafana dashboards and runbooks.\n"
)


@contextmanager
def quiet_progress_bars():
    """Silence transformers' progress bars ("Loading weights", "Writing shards") for small local files,
    restoring the previous setting after."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def task_corpus() -> str:
    """The text the tokenizer learns from: the system prompt, every task prompt and reference answer."""
    from tasks.prompt import system_prompt

    parts = [system_prompt()]
    try:
        from tasks import load_tasks

        tasks = load_tasks()
    except UserError as exc:
        log.warning("tiny model: task files unusable (%s); building the tokenizer on the system prompt only", exc)
        tasks = []
    for task in tasks:
        parts.append(task.desc)
        parts.extend(task.expected_outputs)
        if task.reference_answer:
            parts.append(task.reference_answer)
    if not tasks:
        parts.append(_FALLBACK_CORPUS)
    return "\n\n".join(parts)


def recipe_hash(corpus: str, recipe: dict | None = None) -> str:
    """Hash of the build recipe and corpus: the cache folder's name, so a new corpus means a new model."""
    payload = json.dumps({"recipe": recipe or TINY_RECIPE, "build": BUILD_VERSION}, sort_keys=True)
    return hashlib.sha256((payload + "\0" + corpus).encode("utf-8")).hexdigest()[:16]


def build_tokenizer(corpus: str, vocab_size: int, min_frequency: int = 2):
    """Train a byte-level BPE with Qwen2's normalizer, pre-tokenizer and decoder; returns a `tokenizers.Tokenizer`."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, trainers
    from tokenizers.models import BPE

    tokenizer = Tokenizer(BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # One "document" per line keeps the trainer's input order fixed, hence the merges reproducible.
    tokenizer.train_from_iterator([line for line in corpus.splitlines() if line.strip()], trainer=trainer)
    return tokenizer


def _build(target: Path, corpus: str, recipe: dict) -> None:
    """Write the tokenizer and a seeded, randomly initialised Qwen2ForCausalLM into `target`."""
    import torch
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    raw = build_tokenizer(corpus, recipe["vocab_size"], recipe["min_frequency"])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=None,
        bos_token=None,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=recipe["max_position_embeddings"],
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(target)
    # Declare Qwen2's tokenizer class so AutoTokenizer loads it as Qwen2 does (same pipeline, so same ids).
    config_file = target / "tokenizer_config.json"
    tok_config = json.loads(config_file.read_text(encoding="utf-8"))
    tok_config.update({"tokenizer_class": "Qwen2Tokenizer", "add_prefix_space": False, "errors": "replace"})
    config_file.write_text(json.dumps(tok_config, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    vocab = raw.get_vocab()
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=recipe["hidden_size"],
        intermediate_size=recipe["intermediate_size"],
        num_hidden_layers=recipe["num_hidden_layers"],
        num_attention_heads=recipe["num_attention_heads"],
        num_key_value_heads=recipe["num_key_value_heads"],
        max_position_embeddings=recipe["max_position_embeddings"],
        rope_theta=recipe["rope_theta"],
        initializer_range=recipe["initializer_range"],
        tie_word_embeddings=True,
        bos_token_id=vocab[ENDOFTEXT],
        eos_token_id=vocab[IM_END],
        pad_token_id=vocab[ENDOFTEXT],
    )
    torch.manual_seed(recipe["seed"])
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=vocab[ENDOFTEXT],
        eos_token_id=[vocab[IM_END], vocab[ENDOFTEXT]],
        pad_token_id=vocab[ENDOFTEXT],
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
    )
    with quiet_progress_bars():
        model.save_pretrained(target, safe_serialization=True)
    (target / "devops-rl-recipe.json").write_text(
        json.dumps({"recipe": recipe, "build": BUILD_VERSION, "corpus_chars": len(corpus)}, indent=2) + "\n",
        encoding="utf-8",
    )


def ensure_tiny_model(cache: Path | None = None, *, corpus: str | None = None, recipe: dict | None = None) -> Path:
    """The `builtin:tiny` model folder, built on first use (seconds) and cached by recipe + corpus hash.

    One process builds while others wait on a lock and then find it built; the build goes to a
    temporary folder renamed into place, so a reader never sees a half-written one.
    """
    from core.paths import build_lock, cache_dir

    corpus = task_corpus() if corpus is None else corpus
    recipe = dict(TINY_RECIPE if recipe is None else recipe)
    models = Path(cache) if cache is not None else cache_dir() / "models"
    models.mkdir(parents=True, exist_ok=True)
    target = models / f"tiny-{recipe_hash(corpus, recipe)}"
    if (target / "config.json").is_file():
        return target
    with build_lock(target):
        if (target / "config.json").is_file():  # another process built it while we waited
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=models))
        try:
            log.info("building the built-in tiny model in %s", target)
            _build(tmp, corpus, recipe)
            try:
                os.rename(tmp, target)
            except OSError:
                if not (target / "config.json").is_file():  # not "another process won the race"
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_model_path(path: str | Path) -> Path:
    """A local model folder for `builtin:tiny`, a local folder, or a Hugging Face id already in the HF cache."""
    text = str(path).strip()
    if text == BUILTIN_TINY:
        return ensure_tiny_model()
    if text.startswith("builtin:"):
        raise UserError(f"model.path: unknown built-in model '{text}'; the only built-in model is '{BUILTIN_TINY}'")
    local = Path(text).expanduser()
    if local.exists():
        if local.is_dir() and (local / "config.json").is_file():
            return local.resolve()
        raise UserError(f"model.path: {local} is not a model folder (no config.json); pass a save_pretrained folder")
    if text.count("/") == 1 and not text.startswith((".", "/", "~")):
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError

        try:
            return Path(snapshot_download(repo_id=text, local_files_only=True))
        except (LocalEntryNotFoundError, OSError, ValueError):
            pass
        raise UserError(
            f"model.path: '{text}' is not in the local Hugging Face cache; download it first "
            f"('huggingface-cli download {text}') or use '{BUILTIN_TINY}'"
        )
    raise UserError(f"model.path: no such folder '{text}'; pass a model folder, a cached Hugging Face id or '{BUILTIN_TINY}'")
