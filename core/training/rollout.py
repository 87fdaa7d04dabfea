"""Rollout sampling for the native backend: `n` responses per prompt from the policy, as a `Batch`.

Prompts are encoded once per task (chat template, `data.max_prompt_length`/`data.truncation`) and cached.
"""

from __future__ import annotations

from core.training.actor import TrainingFailed
from core.training.batch import Batch


class RolloutSampler:
    """Samples responses with `transformers`' `generate` from the policy it was built with."""

    def __init__(self, cfg, tokenizer, policy, device):
        self.data, self.rollout = cfg.data, cfg.actor_rollout_ref.rollout
        self.lr = cfg.actor_rollout_ref.actor.optim.lr
        self.tokenizer, self.policy, self.device = tokenizer, policy, device
        self._prompt_cache: dict[str, list[int]] = {}

    def eos_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        gen_eos = getattr(self.policy.generation_config, "eos_token_id", None)
        ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        return sorted(i for i in ids if i is not None)

    def prompt_ids(self, record: dict) -> list[int]:
        from core.training.sft import truncate_prompt

        key = record["task_id"]
        if key not in self._prompt_cache:
            text = self.tokenizer.apply_chat_template(record["prompt"], tokenize=False, add_generation_prompt=True)
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            self._prompt_cache[key] = truncate_prompt(ids, self.data.max_prompt_length, self.data.truncation, key)
        return self._prompt_cache[key]

    def generate(self, records: list[dict], n: int, *, first_uid: int, step: int) -> Batch:
        """Sample `n` responses per record (interleaved: the group of a prompt is contiguous); the groups' uids
        count up from `first_uid`, and `step` is what a NaN/inf failure reports."""
        import torch

        prompts = [self.prompt_ids(record) for record in records]
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        rows = [p for p in prompts for _ in range(n)]
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in rows], device=self.device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows], device=self.device)
        kwargs = {"max_new_tokens": self.data.max_response_length, "pad_token_id": pad, "eos_token_id": self.eos_ids()}
        top_k = self.rollout.top_k if self.rollout.top_k > 0 else 0  # verl's -1 (vLLM) and 0 (HF) mean "off"
        kwargs.update(do_sample=True, temperature=self.rollout.temperature, top_p=self.rollout.top_p, top_k=top_k)
        self.policy.eval()
        try:
            with torch.no_grad():
                out = self.policy.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
        except RuntimeError as exc:  # sampling from NaN/inf probabilities: the weights diverged
            if "inf" not in str(exc) and "nan" not in str(exc):
                raise
            raise TrainingFailed(
                f"the model's probabilities became NaN/inf at step {step} (the weights diverged); the last "
                f"good checkpoint is kept. Lower actor_rollout_ref.actor.optim.lr (now {self.lr})"
            ) from exc
        responses = out[:, width:]
        if responses.shape[1] == 0:
            responses = torch.full((len(rows), 1), pad, device=self.device)
        is_eos = torch.isin(responses, torch.tensor(self.eos_ids(), device=self.device))
        # Mask: every token up to and including the first end-of-sequence token.
        after_eos = (is_eos.cumsum(-1) - is_eos.long()) > 0
        response_mask = (~after_eos).float()
        full_attention = torch.cat([attention, response_mask.long()], dim=-1)
        texts = self.tokenizer.batch_decode(
            [r[: int(m.sum())] for r, m in zip(responses, response_mask)], skip_special_tokens=True
        )
        return Batch(
            input_ids=torch.cat([input_ids, responses], dim=-1),
            attention_mask=full_attention,
            position_ids=(full_attention.cumsum(-1) - 1).clamp(min=0),
            response_mask=response_mask,
            records=[r for r in records for _ in range(n)],
            uids=[f"{first_uid + i}" for i in range(len(records)) for _ in range(n)],
            texts=texts,
            prompt_lengths=[len(p) for p in rows],
        )
