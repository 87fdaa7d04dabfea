"""The `/v1/chat/completions` contract of `serve`: the request checked with pydantic (every OpenAI parameter is
honoured or refused with a 400 naming it), and the response, chunk and error bodies in OpenAI's shape.
"""

from __future__ import annotations

import secrets
import time
import uuid
from http import HTTPStatus
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from core.agent.inference import Sampling

DEFAULT_MAX_TOKENS = 2048
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed takes

# Parameters the server does not implement: the values that mean "not used" pass, anything else is a 400
# naming the parameter, never silently ignored.
UNSUPPORTED: dict[str, tuple[tuple[Any, ...], str]] = {
    "n": ((1,), "only n=1 is supported"),
    "tools": (([],), "this server has no tool calling"),
    "tool_choice": (("none",), "this server has no tool calling"),
    "functions": (([],), "this server has no function calling"),
    "function_call": (("none",), "this server has no function calling"),
    "response_format": (({"type": "text"},), "this server has no structured output (json_object, json_schema)"),
    "logprobs": ((False,), "this server returns no log probabilities"),
    "top_logprobs": ((), "this server returns no log probabilities"),
    "audio": ((), "this server answers in text only"),
    "modalities": ((["text"],), "this server answers in text only"),
    "prediction": ((), "this server has no predicted outputs"),
    "reasoning_effort": ((), "the served model is not a reasoning model"),
    "verbosity": ((), "this server has no verbosity control"),
    "web_search_options": ((), "this server has no web search"),
    "moderation": ((), "this server has no moderation"),
    "store": ((False,), "this server does not store completions"),
    "service_tier": (("auto", "default"), "this server has one service tier ('default')"),
}


MAX_TOKENS_LIMIT = 2**31 - 1  # OpenAI's API takes a 32-bit count; up to it, the model's context caps the answer


class ApiError(Exception):
    """An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: HTTPStatus, message: str, kind: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def _string_or_list(kind: str, *, nullable: bool = True):
    """A parameter OpenAI takes as one string or a list: always a list here; other types are refused (null too, unless
    `nullable`: a message's content is null only beside tool calls, which this server does not take)."""

    def convert(value: Any) -> Any:
        if value is None and not nullable:
            raise ValueError(f"must be a string or a list of {kind}, not null")
        if value is None:
            return []
        if isinstance(value, str):
            return [value] if kind == "strings" else [{"type": "text", "text": value}]
        if isinstance(value, list):
            return value
        raise ValueError(f"must be a string or a list of {kind}")

    return BeforeValidator(convert)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TextPart(_Strict):
    type: Literal["text"]
    text: str
    prompt_cache_breakpoint: dict[str, Any] | None = None  # a cache hint: no effect on the answer


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: Annotated[list[TextPart], _string_or_list("text parts", nullable=False)]

    def as_template_input(self) -> dict[str, str]:
        # OpenAI's `developer` role is the newer name of `system`; chat templates know only `system`
        return {"role": "system" if self.role == "developer" else self.role, "content": "".join(p.text for p in self.content)}


class StreamOptions(_Strict):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class ChatRequest(_Strict):
    """A `/v1/chat/completions` body. Fields without effect on the answer (user, metadata, cache hints) are accepted."""

    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    seed: int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    stop: Annotated[list[str], _string_or_list("strings")] = []
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None
    safety_identifier: str | None = None
    metadata: dict[str, str] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None  # only means something with tools, which are refused
    n: int | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    response_format: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    audio: dict[str, Any] | None = None
    modalities: list[str] | None = None
    prediction: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    verbosity: str | None = None
    web_search_options: dict[str, Any] | None = None
    moderation: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None

    def template_messages(self) -> list[dict[str, str]]:
        return [m.as_template_input() for m in self.messages]

    def sampling(self) -> Sampling:
        max_tokens = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        return Sampling(max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
                        temperature=1.0 if self.temperature is None else self.temperature,
                        top_p=1.0 if self.top_p is None else self.top_p, seed=self.seed,
                        stop=tuple(s for s in self.stop if s),
                        presence_penalty=self.presence_penalty or 0.0, frequency_penalty=self.frequency_penalty or 0.0,
                        logit_bias={int(k): v for k, v in (self.logit_bias or {}).items()})

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def obfuscate(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_obfuscation)


def _param(loc: tuple) -> str:
    """A pydantic location as OpenAI names a parameter: `messages[0].content[1].type`."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name


def _invalid(error: ValidationError) -> ApiError:
    first = error.errors(include_url=False)[0]
    param, kind = _param(first["loc"]), first["type"]
    if kind == "json_invalid":
        return ApiError(HTTPStatus.BAD_REQUEST, f"request body is not JSON: {first['msg']}", code="invalid_body")
    if not param:
        return ApiError(HTTPStatus.BAD_REQUEST, "request body must be a JSON object", code="invalid_body")
    if kind == "extra_forbidden":
        return ApiError(HTTPStatus.BAD_REQUEST, f"Unrecognized request argument supplied: {param}",
                        code="unknown_parameter", param=param)
    if kind == "missing":
        return ApiError(HTTPStatus.BAD_REQUEST, f"Missing required parameter: '{param}'",
                        code="missing_required_parameter", param=param)
    message = first["msg"].removeprefix("Value error, ")
    return ApiError(HTTPStatus.BAD_REQUEST, f"Invalid '{param}': {message} (got {first['input']!r:.80})",
                    code="invalid_value", param=param)


def _neutral(value: Any, allowed: tuple[Any, ...]) -> bool:
    return value is None or any(value == a and type(value) is type(a) for a in allowed)


def parse_request(raw: bytes, model_name: str, vocab_size: int) -> ChatRequest:
    """Check a `/v1/chat/completions` body against the model served; ApiError (400/404) naming what is wrong."""
    try:
        request = ChatRequest.model_validate_json(raw)
    except ValidationError as exc:
        raise _invalid(exc) from None
    for name, (allowed, why) in UNSUPPORTED.items():
        if not _neutral(getattr(request, name), allowed):
            raise ApiError(HTTPStatus.BAD_REQUEST, f"Unsupported parameter: '{name}': {why}; remove it",
                           code="unsupported_parameter", param=name)
    for key, bias in (request.logit_bias or {}).items():
        if not key.isdigit() or int(key) >= vocab_size or not -100 <= bias <= 100:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"Invalid 'logit_bias': {key!r}: {bias} needs a token id below {vocab_size} "
                           "and a bias in [-100, 100]", code="invalid_value", param="logit_bias")
    if request.model not in (None, model_name):
        raise ApiError(HTTPStatus.NOT_FOUND, f"The model `{request.model}` does not exist; this server serves `{model_name}`",
                       kind="NotFoundError", code="model_not_found", param="model")
    return request


def usage(result: dict) -> dict[str, int]:
    return {"prompt_tokens": result["prompt_tokens"], "completion_tokens": result["completion_tokens"],
            "total_tokens": result["prompt_tokens"] + result["completion_tokens"]}


def completion_body(model_name: str, result: dict) -> dict:
    """One non-streaming answer in OpenAI's `chat.completion` shape."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_name,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result["text"]},
                     "finish_reason": result["finish_reason"], "logprobs": None}],
        "usage": usage(result),
    }


class ChunkMaker:
    """The `chat.completion.chunk` events of one streamed answer (same id and creation time for all)."""

    def __init__(self, model_name: str, obfuscate: bool) -> None:
        self.base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time()),
                     "model": model_name}
        self.obfuscate = obfuscate

    def choice(self, delta: dict, finish_reason: str | None = None) -> dict:
        chunk = {**self.base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}
        if self.obfuscate:  # random padding so the size of an event does not tell its text's length
            chunk["obfuscation"] = secrets.token_urlsafe(secrets.randbelow(16) + 1)
        return chunk

    def usage(self, result: dict) -> dict:
        return {**self.base, "choices": [], "usage": usage(result)}
