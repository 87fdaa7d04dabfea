"""Tests of the built-in tiny model: transformers loads it, ids round-trip, builds are reproducible and atomic.

Every build here uses a temporary cache folder; `resolve_model_path` is checked for each kind of argument.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import UserError
from core.training import tiny_model
from core.training.tiny_model import BUILTIN_TINY, ensure_tiny_model, resolve_model_path

CORPUS = (
    "Deploy the service to Kubernetes with a readiness probe and resource limits.\n"
    "Write a GitHub Actions pipeline: lint, test, build the Docker image, push, deploy, roll back.\n"
    "Alert on the p99 latency with Prometheus and link the runbook in the alert.\n"
) * 3
SAMPLES = [
    "kubectl apply -f deploy.yaml && kubectl rollout status deploy/api",
    "  indented\n\n\ttabs and   spaces  ",
    "Unicode: résumé, naïve, 你好, emoji 🚀, e\u0301 (combining accent)",
    "Numbers 12345 and it's, we'll, they've",
    "<|im_start|>user\nhello<|im_end|>\n",
]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return ensure_tiny_model(tmp_path_factory.mktemp("cache"), corpus=CORPUS)


def test_transformers_loads_it_as_qwen2_and_ids_round_trip(built):
    from tokenizers import Tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    raw = Tokenizer.from_file(str(built / "tokenizer.json"))
    assert type(tok).__name__ == "Qwen2Tokenizer"
    assert AutoConfig.from_pretrained(built).model_type == "qwen2"
    for text in SAMPLES:
        ids = tok(text)["input_ids"]
        assert ids == raw.encode(text).ids, text
        # NFC normalisation is the only change allowed on the way back.
        import unicodedata

        assert tok.decode(ids) == unicodedata.normalize("NFC", text)
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert tok(special)["input_ids"] == [tok.convert_tokens_to_ids(special)]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"

    model = AutoModelForCausalLM.from_pretrained(built)
    n_params = sum(p.numel() for p in model.parameters())
    assert 100_000 <= n_params <= 5_000_000
    assert model.config.vocab_size == len(tok)


def test_chat_template_is_qwen_style_and_generation_runs(built):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Deploy it."}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nDeploy it.<|im_end|>\n<|im_start|>assistant\n"
    no_system = tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)
    assert no_system.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")

    model = AutoModelForCausalLM.from_pretrained(built)
    ids = tok(text, return_tensors="pt")["input_ids"]
    torch.manual_seed(0)
    out = model.generate(ids, max_new_tokens=8, do_sample=True, pad_token_id=tok.pad_token_id)
    assert out.shape[1] > ids.shape[1]


def test_build_is_reproducible_and_cached(tmp_path, built):
    again = ensure_tiny_model(tmp_path / "other", corpus=CORPUS)
    assert again.name == built.name
    for name in ("model.safetensors", "tokenizer.json", "config.json", "tokenizer_config.json"):
        assert _digest(again / name) == _digest(built / name), name
    # Cached: the second call returns the same folder without rebuilding it.
    stamp = (again / "model.safetensors").stat().st_mtime_ns
    assert ensure_tiny_model(tmp_path / "other", corpus=CORPUS) == again
    assert (again / "model.safetensors").stat().st_mtime_ns == stamp
    # A different corpus is a different model.
    assert ensure_tiny_model(tmp_path / "other", corpus=CORPUS + "terraform plan\n").name != again.name


def test_two_processes_building_at_once_end_with_one_complete_folder(tmp_path):
    code = (
        "import sys; from pathlib import Path; from core.training.tiny_model import ensure_tiny_model;"
        "print(ensure_tiny_model(Path(sys.argv[1]), corpus=sys.argv[2]))"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path), CORPUS], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outputs[0] == outputs[1]
    # No temporary folders left (the build lock's small file stays, as flock needs it to exist).
    assert [p.name for p in tmp_path.iterdir() if p.suffix != ".lock"] == [Path(outputs[0]).name]
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(outputs[0])


def test_resolve_builtin_and_local_folders(tmp_path, monkeypatch, built):
    monkeypatch.setattr(tiny_model, "ensure_tiny_model", lambda: built)
    assert resolve_model_path(BUILTIN_TINY) == built
    assert resolve_model_path(str(built)) == built.resolve()
    with pytest.raises(UserError, match="unknown built-in model 'builtin:huge'"):
        resolve_model_path("builtin:huge")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="not a model folder"):
        resolve_model_path(tmp_path / "empty")
    with pytest.raises(UserError, match="no such folder"):
        resolve_model_path(str(tmp_path / "missing" / "model"))


def test_resolve_hugging_face_ids_only_from_the_local_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--acme--tiny-llm"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert resolve_model_path("acme/tiny-llm") == snapshot
    with pytest.raises(UserError, match="not in the local Hugging Face cache"):
        resolve_model_path("acme/never-downloaded")
