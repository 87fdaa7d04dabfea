"""Tests of the SFT warm-start: loss only on the answer tokens, the loss falls, and the output folder trains on.

Uses the built-in tiny model and the real task files; `devops-rl sft` runs as a real subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import UserError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoTokenizer

    from core.training.tiny_model import ensure_tiny_model

    path = ensure_tiny_model()
    return path, AutoTokenizer.from_pretrained(path)


def _train_tasks(count: int):
    from tasks import load_tasks, split_tasks

    return split_tasks(load_tasks(), 0.2, 0)[0][:count]


def test_labels_cover_exactly_the_answer_and_its_end_token(tiny):
    from core.training.sft import IGNORE_INDEX, build_examples
    from tasks.prompt import system_prompt

    _, tok = tiny
    task = _train_tasks(1)[0]
    (ids, labels), = build_examples([task], tok, system_prompt(), max_length=4096)
    prompt = tok.apply_chat_template(
        [{"role": "system", "content": system_prompt()}, {"role": "user", "content": task.desc}],
        tokenize=False, add_generation_prompt=True,
    )
    n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
    assert labels[:n_prompt] == [IGNORE_INDEX] * n_prompt
    answer = labels[n_prompt:]
    assert IGNORE_INDEX not in answer and answer == ids[n_prompt:]
    assert answer[-1] == tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.decode(answer[:-1]) == task.reference_answer

    # Truncation keeps the whole prompt and cuts the answer; a limit below the prompt is a clear error.
    (short_ids, short_labels), = build_examples([task], tok, system_prompt(), max_length=n_prompt + 20)
    assert len(short_ids) == n_prompt + 20 and short_labels[:n_prompt] == labels[:n_prompt]
    with pytest.raises(UserError, match="raise --max-length"):
        build_examples([task], tok, system_prompt(), max_length=n_prompt)


def test_sft_lowers_the_loss_and_writes_a_loadable_model(tiny, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from core.training.sft import SftSettings, run_sft

    path, _ = tiny
    out = tmp_path / "warm"
    summary = run_sft(path, out, SftSettings(steps=20, lr=3e-3, batch_size=2, max_length=700), _train_tasks(6), device="cpu")
    assert summary["last_loss"] < summary["first_loss"] - 0.5
    model = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(path)
    assert not torch.equal(model.model.embed_tokens.weight, base.model.embed_tokens.weight)
    info = json.loads((out / "devops-rl-sft.json").read_text())
    assert info["steps"] == 20 and info["base_model"] == str(path)


def test_warmstart_is_cached(tiny, monkeypatch, tmp_path):
    from core.training import sft

    path, _ = tiny
    settings = sft.SftSettings(steps=3, batch_size=1, max_length=700)
    tasks = _train_tasks(2)
    first = sft.ensure_warmstart(path, settings, tasks, device="cpu")
    monkeypatch.setattr(sft, "run_sft", lambda *a, **k: pytest.fail("a cached warm-start was rebuilt"))
    assert sft.ensure_warmstart(path, settings, tasks, device="cpu") == first
    assert (first / "config.json").is_file()


def test_sft_command_writes_a_folder_train_accepts(tmp_path):
    out = tmp_path / "sft-model"
    result = subprocess.run(
        [sys.executable, "-m", "core.cli.main", "sft", "--steps", "4", "--batch-size", "1", "--max-length", "1024",
         "--output", str(out), "--device", "cpu"],
        cwd=REPO, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stderr
    assert f"model folder: {out}" in result.stdout and "sft step 4/4" in result.stdout
    from core.training.tiny_model import resolve_model_path

    assert resolve_model_path(str(out)) == out.resolve()


def test_prompt_truncation_matches_the_data_settings():
    from core.training.sft import truncate_prompt

    ids = list(range(10))
    assert truncate_prompt(ids, 4, "left", "t") == [6, 7, 8, 9]
    assert truncate_prompt(ids, 4, "right", "t") == [0, 1, 2, 3]
    assert truncate_prompt(ids, 5, "middle", "t") == [0, 1, 7, 8, 9]
    assert truncate_prompt(ids, 10, "error", "t") == ids
    with pytest.raises(UserError, match="task 't' has a 10-token prompt, over 4; raise data.max_prompt_length"):
        truncate_prompt(ids, 4, "error", "t")


def test_answer_loss_equals_the_models_own_loss_and_gradients(tiny):
    """The shared-prefix loss SFT trains with gives the loss and the gradients of `model(labels=...)`, on rows
    padded on the right as SFT collates them, with a task twice (a prefix longer than the system prompt)."""
    import torch
    from transformers import AutoModelForCausalLM

    from core.training.sft import _collate, answer_loss, build_examples
    from tasks.prompt import system_prompt

    path, tok = tiny
    tasks = _train_tasks(3)
    examples = build_examples([tasks[0], tasks[1], tasks[0], tasks[2]], tok, system_prompt(), max_length=900,
                              max_answer_tokens=64)
    examples[2] = (examples[2][0][:-5], examples[2][1][:-5])  # the repeated task, shorter: padded after a shared prefix
    input_ids, labels, attention = _collate(examples, tok.pad_token_id)
    assert attention[:, 0].all() and not attention[2, -1]  # padded on the right
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)

    def loss_and_grads(compute):
        model.zero_grad(set_to_none=True)
        loss = compute()
        loss.backward()
        return loss.item(), [p.grad.clone() for p in model.parameters()]

    ours, our_grads = loss_and_grads(lambda: answer_loss(model, input_ids, attention, labels))
    theirs, their_grads = loss_and_grads(lambda: model(input_ids=input_ids, attention_mask=attention, labels=labels).loss)
    assert ours == pytest.approx(theirs, rel=1e-5)
    for mine, reference in zip(our_grads, their_grads):
        torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-6)


def test_answers_are_fitted_to_the_budget_at_a_paragraph_boundary_outside_code(tiny):
    from core.training.sft import fit_answer

    _, tok = tiny
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    fitted = 0
    for task in _train_tasks(40):
        ids = fit_answer(tok, task.reference_answer, 128)
        assert len(ids) <= 128
        if ids[-1] != eos:  # only a first paragraph over the budget is cut, and then it is its start
            assert task.reference_answer.startswith(tok.decode(ids)) and "\n\n" not in tok.decode(ids)
            continue
        text = tok.decode(ids[:-1])
        assert task.reference_answer.startswith(text) and text.count("```") % 2 == 0
        rest = task.reference_answer[len(text):]
        assert rest == "" or rest.startswith("\n\n")
        fitted += 1
    assert fitted >= 10  # most answers keep whole paragraphs
    whole = fit_answer(tok, _train_tasks(1)[0].reference_answer, None)
    assert whole[-1] == eos and tok.decode(whole[:-1]) == _train_tasks(1)[0].reference_answer
