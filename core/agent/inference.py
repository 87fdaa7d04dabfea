"""Generation for `serve`: a causal LM and its tokenizer behind one lock, the chat template, OpenAI's sampling
parameters (stop strings that end generation, penalties, logit bias, seed) and streaming without stop-string leaks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.agent.served_model import ServedModel
from core.errors import UserError

UTF8_MAX_BYTES = 4  # a byte-level token can hold a quarter of a character, so L characters span up to 4L tokens


class GenerationCancelled(Exception):
    """The server is shutting down: the generation stopped before its answer was finished."""


class PromptTooLong(ValueError):
    """The prompt leaves no room to answer in the model's context."""


@dataclass(frozen=True)
class Sampling:
    """How to generate one answer, in OpenAI's terms (checked by `core.agent.chat_api`)."""

    max_tokens: int = 2048
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)

    @property
    def greedy(self) -> bool:
        # top_p 0 keeps only the most likely token: the same as greedy decoding, whatever the temperature
        return self.temperature == 0 or self.top_p == 0


class LocalModel:
    """A causal LM and its tokenizer behind one lock; `chat()` applies the chat template and generates."""

    def __init__(self, served: ServedModel, *, device: str = "auto") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from core.training.device import select_device
        from core.training.tiny_model import quiet_progress_bars

        self.served = served
        self.name = served.name
        device = str(select_device(device, option="--device"))
        self.device = device
        try:
            with quiet_progress_bars():
                self.tokenizer = AutoTokenizer.from_pretrained(served.path)
                dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
                self.model = AutoModelForCausalLM.from_pretrained(served.path, dtype=dtype).to(device)
        except (OSError, ValueError) as exc:
            raise UserError(f"{served.path}: cannot load the model ({str(exc).splitlines()[0]}); "
                            "pass a save_pretrained folder") from exc
        self.model.eval()
        if not getattr(self.tokenizer, "chat_template", None):
            raise UserError(f"{served.path}: the tokenizer has no chat template (tokenizer_config.json 'chat_template'); "
                            "serve a chat/instruct model")
        self.max_context = int(getattr(self.model.config, "max_position_embeddings", 0) or 0) or None
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        self.stop_ids = self._stop_ids()
        self._lock = threading.Lock()

    def _stop_ids(self) -> list[int]:
        ids = set()
        for source in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(int(i) for i in source)
        for token in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
            token_id = self.tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and token_id != self.tokenizer.unk_token_id and token_id >= 0:
                ids.add(token_id)
        return sorted(ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def chat(self, messages: list[dict], sampling: Sampling, *, on_text: Callable[[str], None] | None = None,
             cancel: threading.Event | None = None) -> dict[str, Any]:
        """Generate one assistant reply: {"text", "prompt_tokens", "completion_tokens", "finish_reason"}.

        `on_text` receives the reply piece by piece while it is generated (for streaming); setting `cancel`
        stops the generation at its next token and raises GenerationCancelled.
        """
        import torch

        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        input_ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"].to(self.device)
        prompt_tokens = int(input_ids.shape[1])
        max_tokens = sampling.max_tokens
        if self.max_context is not None:
            room = self.max_context - prompt_tokens
            if room <= 0:
                raise PromptTooLong(f"the prompt is {prompt_tokens} tokens; this model's context is {self.max_context} tokens")
            max_tokens = min(max_tokens, room)
        check = StopCheck(self, sampling.stop, prompt_tokens, cancel)
        kwargs: dict[str, Any] = {"max_new_tokens": max_tokens, "eos_token_id": self.stop_ids or None,
                                  "pad_token_id": (self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None
                                                   else (self.stop_ids or [0])[0]),
                                  "stopping_criteria": [check]}
        if sampling.presence_penalty or sampling.frequency_penalty or sampling.logit_bias:
            kwargs["logits_processor"] = [Penalties(sampling, prompt_tokens)]
        if sampling.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        streamer = StopSafeStreamer(self, sampling.stop, on_text) if on_text is not None else None
        with self._lock, torch.no_grad():
            if cancel is not None and cancel.is_set():
                raise GenerationCancelled("the server is shutting down")
            if sampling.seed is not None:
                torch.manual_seed(sampling.seed)
            output = self.model.generate(input_ids, attention_mask=torch.ones_like(input_ids), streamer=streamer, **kwargs)
        if check.cancelled:
            raise GenerationCancelled("the server is shutting down")
        new_ids = output[0, prompt_tokens:].tolist()
        finish_reason = "length"
        if new_ids and new_ids[-1] in self.stop_ids:
            new_ids, finish_reason = new_ids[:-1], "stop"
        text, stopped = cut_at_stop(self.decode(new_ids), sampling.stop)
        if stopped:
            finish_reason = "stop"
            new_ids = new_ids[: self._tokens_for(text, new_ids)]
        if streamer is not None:
            streamer.flush(text)
        return {"text": text, "prompt_tokens": prompt_tokens, "completion_tokens": len(new_ids), "finish_reason": finish_reason}

    def _tokens_for(self, text: str, ids: list[int]) -> int:
        """How many of `ids` it takes to produce `text` (the answer before a stop string): what usage counts."""
        count = len(ids)
        while count > 0 and self.decode(ids[: count - 1]).startswith(text):
            count -= 1
        return count


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """`text` up to the first stop string, and whether one was found."""
    cut = min((text.index(m) for m in stop if m and m in text), default=None)
    return (text, False) if cut is None else (text[:cut], True)


def held_back(text: str, stop: Sequence[str]) -> int:
    """How many characters at the end of `text` could be the start of a stop string (not to be sent yet)."""
    longest = 0
    for marker in stop:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:size]):
                longest = size
                break
    return longest


class StopCheck:
    """A stopping criterion for `generate`: a stop string in the decoded tail, or the server shutting down.

    Only the last few tokens are decoded each step (enough to hold the longest stop string), so a long
    answer costs no more per token than a short one.
    """

    def __init__(self, model: LocalModel, stop: Sequence[str], prompt_tokens: int, cancel: threading.Event | None) -> None:
        self.model, self.stop, self.prompt_tokens, self.cancel = model, [s for s in stop if s], prompt_tokens, cancel
        self.window = UTF8_MAX_BYTES * max((len(s) for s in self.stop), default=0) + UTF8_MAX_BYTES
        self.cancelled = False

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        done = False
        if self.cancel is not None and self.cancel.is_set():
            self.cancelled = done = True
        elif self.stop:
            tail = input_ids[0, max(self.prompt_tokens, input_ids.shape[1] - self.window):].tolist()
            done = cut_at_stop(self.model.decode(i for i in tail if i not in self.model.stop_ids), self.stop)[1]
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


class Penalties:
    """OpenAI's presence/frequency penalties (over the answer so far) and logit bias, as a logits processor."""

    def __init__(self, sampling: Sampling, prompt_tokens: int) -> None:
        self.presence, self.frequency = sampling.presence_penalty, sampling.frequency_penalty
        self.bias_ids, self.bias_values = list(sampling.logit_bias), list(sampling.logit_bias.values())
        self.prompt_tokens = prompt_tokens

    def __call__(self, input_ids, scores):
        import torch

        if self.bias_ids:
            ids = torch.tensor(self.bias_ids, device=scores.device)
            scores[:, ids] += torch.tensor(self.bias_values, device=scores.device, dtype=scores.dtype)
        answer = input_ids[:, self.prompt_tokens:]
        if (self.presence or self.frequency) and answer.shape[1]:
            counts = torch.zeros_like(scores).scatter_add_(1, answer, torch.ones_like(answer, dtype=scores.dtype))
            scores = scores - self.frequency * counts - self.presence * (counts > 0).to(scores.dtype)
        return scores


class StopSafeStreamer:
    """A transformers streamer (put/end) that hands each new piece of decoded text to a callback.

    Text that might be the start of a stop string is held back until the next tokens show it is not, so
    a streamed answer never shows part of a stop string; `flush` sends what remains of the final answer.
    """

    def __init__(self, model: LocalModel, stop: Sequence[str], emit: Callable[[str], None]) -> None:
        self.model, self.stop, self.emit = model, [s for s in stop if s], emit
        self.ids: list[int] = []
        self.sent = ""
        self.prompt_seen = False

    def put(self, value) -> None:
        if not self.prompt_seen:  # generate() first hands over the prompt
            self.prompt_seen = True
            return
        self.ids.extend(i for i in value.reshape(-1).tolist() if i not in self.model.stop_ids)
        text, stopped = cut_at_stop(self.model.decode(self.ids), self.stop)
        if not stopped:
            text = text[: len(text) - held_back(text, self.stop)]
        self._send(text.rstrip("\ufffd"))  # half a UTF-8 character waits for its other half

    def _send(self, text: str) -> None:
        if len(text) > len(self.sent) and text.startswith(self.sent):
            self.emit(text[len(self.sent):])
            self.sent = text

    def end(self) -> None:
        pass

    def flush(self, final_text: str) -> None:
        if len(final_text) > len(self.sent):
            self.emit(final_text[len(self.sent):])
            self.sent = final_text
