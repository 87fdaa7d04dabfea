"""The DevOps Architect agent over any OpenAI-compatible endpoint (OpenAI, vLLM, `devops-rl serve`).

Answers a task with the system prompt and scores the answer with the reward. The openai client retries
408/409/429/5xx and connection errors (honouring Retry-After); 401/403/404 become one-line errors that never
show the API key, and an answer that is not a chat completion is a per-task error, never a scored empty answer.
Every try has a deadline (`--timeout` for the whole request, a server dripping bytes included) and a reply a size
limit; a server that was reached but times out, breaks off or sends too much fails that task, not the eval.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2  # the openai client's HTTP library (its import costs ~60 ms; this module is imported by eval only)
from pydantic import BaseModel, ValidationError

from core.errors import UserError
from core.log import mask_secrets

log = logging.getLogger(__name__)

API_KEY_ENV_VARS = ("DEVOPS_RL_API_KEY", "OPENAI_API_KEY")
NO_KEY = "EMPTY"  # what vLLM's docs send when the server needs no key; the client library wants something
DEFAULT_TEMPERATURE = 0.7
DEFAULT_MAX_TOKENS = 2048
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_RETRIES = 4
MAX_REPLY_BYTES = 16 * 2**20  # a chat completion of 2,048 tokens is ~10 KB; past this a reply is not one
_calls = threading.local()  # the deadlines of the tries of the request this thread is making


def api_key_from_env() -> tuple[str | None, str | None]:
    """(key, name of the variable it came from): DEVOPS_RL_API_KEY first, then OPENAI_API_KEY."""
    for name in API_KEY_ENV_VARS:
        value = os.environ.get(name, "").strip()
        if value:
            return value, name
    return None, None


def check_request_settings(*, temperature: float, max_tokens: int, timeout: float, retries: int) -> None:
    """UserError for sampling and request settings no endpoint can take (the CLI's names in the message)."""
    if not 0.0 <= temperature <= 2.0:
        raise UserError(f"--temperature: {temperature} is outside [0, 2]")
    if max_tokens < 1:
        raise UserError(f"--max-tokens: {max_tokens} must be at least 1")
    if not (timeout > 0 and math.isfinite(timeout)):
        raise UserError(f"--timeout: {timeout} must be a positive number of seconds per request")
    if retries < 0:
        raise UserError(f"--retries: {retries} must be 0 or more")


class EndpointError(Exception):
    """One request failed for good (after retries, or a 4xx other than 401/404); the eval records it per task."""


class ReplyTooLarge(Exception):
    """A reply past MAX_REPLY_BYTES (an endless body without a length, a wrong endpoint streaming a file)."""


class _Deadline:
    """One try of one request: a timer that, `seconds` after the request was sent, shuts its connection down, so
    whatever the server does (drip a byte every half second, send an endless body) the try ends; it records what
    happened for `DevOpsAgent.complete` to explain (reached the server, ran out of time, reply too large)."""

    def __init__(self, seconds: float) -> None:
        self.reached = self.expired = self.too_large = False
        self._socket = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict) -> None:
        """httpcore's `trace` extension: the socket of the connection, once made (one connection per request)."""
        if event == "connection.connect_tcp.complete" and info.get("return_value") is not None:
            with self._lock:
                self.reached = True
                self._socket = info["return_value"].get_extra_info("socket")
                if self.expired:
                    self._shutdown()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            self._shutdown()

    def _shutdown(self) -> None:
        import socket

        if self._socket is not None:
            try:
                self._socket.shutdown(socket.SHUT_RDWR)  # the blocked read returns at once: the try fails
            except OSError:
                pass

    def cancel(self) -> None:
        self._timer.cancel()


class _LimitedStream(httpx2.SyncByteStream):
    """A reply body that may not pass MAX_REPLY_BYTES; closing it ends the try's deadline."""

    def __init__(self, inner, deadline: _Deadline, limit: int) -> None:
        self._inner, self._deadline, self._limit = inner, deadline, limit

    def __iter__(self):
        size = 0
        for chunk in self._inner:
            size += len(chunk)
            if size > self._limit:
                self._deadline.too_large = True
                raise ReplyTooLarge(f"the answer is larger than {self._limit // 2**20} MiB")
            yield chunk

    @property
    def elapsed(self):
        return getattr(self._inner, "elapsed", None)

    def close(self) -> None:
        self._deadline.cancel()
        self._inner.close()


def _start_try(timeout: float, request) -> None:
    """httpx's request hook: every try (the openai client's retries included) gets its own deadline, which the
    request being made in this thread (`DevOpsAgent._deadlines`) keeps to explain a failure."""
    deadline = _calls.current = _Deadline(timeout)
    getattr(_calls, "tries", []).append(deadline)
    request.extensions = {**request.extensions, "trace": deadline.trace}


def _check_reply(response) -> None:
    """httpx's response hook (headers in): the body is read through the size limit, and a declared length past
    it is refused before any of it is read."""
    deadline = _calls.current
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_REPLY_BYTES:
        deadline.too_large = True
        raise ReplyTooLarge(f"the answer is {int(length):,} bytes, over the {MAX_REPLY_BYTES // 2**20} MiB limit")
    response.stream = _LimitedStream(response.stream, deadline, MAX_REPLY_BYTES)


def check_base_url(base_url: str) -> str:
    """`base_url` when it is an http(s) URL with a host that can be parsed; UserError naming the problem (a
    password in it is masked)."""
    shown = mask_secrets(base_url)
    if not base_url.startswith(("http://", "https://")):
        raise UserError(f"--base-url: '{shown}' is not an http(s) URL; e.g. http://127.0.0.1:8000/v1")
    try:
        host = httpx2.URL(base_url).host
    except (httpx2.InvalidURL, ValueError) as exc:
        raise UserError(f"--base-url: '{shown}' is not a valid URL ({mask_secrets(str(exc))}); "
                        "e.g. http://127.0.0.1:8000/v1 or http://[::1]:8000/v1") from None
    if not host:
        raise UserError(f"--base-url: '{shown}' names no host; e.g. http://127.0.0.1:8000/v1")
    return base_url


class _Message(BaseModel):
    content: str | None = None


class _Choice(BaseModel):
    message: _Message
    finish_reason: str | None = None


class _Usage(BaseModel):
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    total_tokens: int | None = 0


class _Completion(BaseModel):
    """What eval needs of a chat completion; anything else (HTML, an error page, no choices) is refused."""

    choices: list[_Choice]
    usage: _Usage | None = None


@dataclass
class AgentAnswer:
    """One answer of the agent: its text, reward breakdown, token usage and wall time in seconds."""

    text: str
    breakdown: Any  # core.rewards.RewardBreakdown
    usage: dict[str, int] = field(default_factory=dict)
    elapsed: float = 0.0
    finish_reason: str | None = None

    @property
    def reward(self) -> float:
        return float(self.breakdown.final_reward)


class DevOpsAgent:
    """The agent: `answer(task)` asks the model and scores the answer; `complete(messages)` only asks."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        temperature: float = DEFAULT_TEMPERATURE,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        timeout: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        system_prompt: str | None = None,
        seed: int | None = None,
    ) -> None:
        check_base_url(base_url)
        if not model:
            raise UserError("--model: empty; pass the model name the endpoint serves (see GET <base-url>/models)")
        check_request_settings(temperature=temperature, max_tokens=max_tokens, timeout=timeout, retries=retries)
        self.base_url = base_url.rstrip("/")
        self.shown_url = mask_secrets(self.base_url)  # for messages: a password in the URL is never shown
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.retries = retries
        self.seed = seed
        if system_prompt is None:
            from tasks.prompt import system_prompt as default_prompt

            system_prompt = default_prompt()
        self.system_prompt = system_prompt
        self._key, self._key_source = api_key_from_env()
        self._openai = None
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:  # never the key
        return f"DevOpsAgent(base_url={self.shown_url!r}, model={self.model!r})"

    @property
    def _client(self):
        """One openai client shared by every thread (httpx's pool is thread-safe; building one costs ~0.1 s).

        Each request has a connection of its own (no keep-alive), so that its deadline can shut exactly it down.
        """
        with self._client_lock:
            if self._openai is None:
                from openai import DefaultHttpxClient, OpenAI

                http = DefaultHttpxClient(timeout=self.timeout, limits=httpx2.Limits(max_keepalive_connections=0),
                                          event_hooks={"request": [functools.partial(_start_try, self.timeout)],
                                                       "response": [_check_reply]})
                self._openai = OpenAI(base_url=self.base_url, api_key=self._key or NO_KEY, timeout=self.timeout,
                                      max_retries=self.retries, http_client=http)
                for name in ("httpx", "httpx2"):  # one INFO line per request otherwise (openai ships httpx2 now)
                    logging.getLogger(name).setLevel(logging.WARNING)
            return self._openai

    def messages(self, task) -> list[dict[str, str]]:
        desc = task.desc if hasattr(task, "desc") else task["desc"]
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": desc}]

    def answer(self, task) -> AgentAnswer:
        """Ask the model about `task` (a `tasks.Task` or its mapping) and score the answer."""
        from core.rewards import score

        started = time.perf_counter()
        text, usage, finish_reason = self.complete(self.messages(task))
        elapsed = time.perf_counter() - started
        return AgentAnswer(text=text, breakdown=score(text, task), usage=usage, elapsed=elapsed, finish_reason=finish_reason)

    def complete(self, messages: list[dict[str, str]]) -> tuple[str, dict[str, int], str | None]:
        """(text, usage, finish_reason) for one chat request; the openai client retries transient failures."""

        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature,
                                  "max_tokens": self.max_tokens}
        if self.seed is not None:
            kwargs["seed"] = self.seed
        with self._deadlines() as tries:
            return self._complete(kwargs, tries)

    @contextmanager
    def _deadlines(self):
        """The tries of one request made in this thread, each under its deadline; their timers end with it."""
        _calls.tries = tries = []
        try:
            yield tries
        finally:
            del _calls.tries
            for deadline in tries:
                deadline.cancel()

    def _complete(self, kwargs: dict, tries: list[_Deadline]) -> tuple[str, dict[str, int], str | None]:
        import openai

        try:
            raw = self._client.chat.completions.with_raw_response.create(**kwargs)
            raw.http_response.read()  # the body, under the try's deadline and the size limit
        except openai.AuthenticationError as exc:
            raise UserError(self._auth_message(exc)) from None
        except openai.PermissionDeniedError:
            raise UserError(f"{self.shown_url}: 403 Forbidden for model '{self.model}'; the key from "
                            f"{self._key_source or 'the environment'} may not use this model") from None
        except openai.NotFoundError as exc:
            raise UserError(self._not_found_message(exc)) from None
        except openai.APIConnectionError as exc:
            if any(t.reached for t in tries):  # a live server that misbehaved: this task fails, the eval goes on
                raise EndpointError(self._broken_reply_message(exc, tries)) from None
            raise UserError(self._unreachable_message(exc, _tries(exc.request))) from None
        except openai.APIStatusError as exc:
            count = _tries(exc.response.request)
            raise EndpointError(_describe(exc) + (f" (after {count} tries)" if count > 1 else "")) from None
        except (ReplyTooLarge, httpx2.HTTPError) as exc:  # raised past the openai client, which retries only its own
            raise EndpointError(self._broken_reply_message(exc, tries)) from None
        return _read_completion(raw.http_response)

    def _broken_reply_message(self, exc: Exception, tries: list[_Deadline]) -> str:
        count = f" (after {len(tries)} tries)" if len(tries) > 1 else ""
        if any(t.too_large for t in tries):
            return f"the answer is larger than {MAX_REPLY_BYTES // 2**20} MiB, so it was not read{count}"
        if any(t.expired for t in tries):
            return f"no complete answer within --timeout {self.timeout:g}s{count}"
        cause = exc.__cause__ or exc
        reason = str(cause).splitlines()[0][:120] if str(cause) else type(cause).__name__
        return mask_secrets(f"the server broke off the answer ({reason}){count}")

    def _auth_message(self, exc: Exception) -> str:
        if self._key is None:
            return (f"{self.shown_url}: 401 Unauthorized and no API key is set; "
                    f"export {' or '.join(API_KEY_ENV_VARS)} with a key this endpoint accepts")
        return (f"{self.shown_url}: 401 Unauthorized: the endpoint rejected the API key from {self._key_source} (not shown); "
                f"set {self._key_source} to a key this endpoint accepts")

    def _not_found_message(self, exc: Exception) -> str:
        served = self.served_models()
        hint = f"models served there: {', '.join(served[:8])}" if served else "check that --base-url ends in /v1"
        return f"{self.shown_url}: 404 Not Found for model '{self.model}'; {hint}"

    def _unreachable_message(self, exc: Exception, tries: int) -> str:
        cause = exc.__cause__ or exc.__context__
        reason = str(cause).splitlines()[0][:120] if cause else type(exc).__name__
        what = "timed out" if "Timeout" in type(exc).__name__ else "cannot connect"
        return (f"{self.shown_url}: {what} after {tries} {'try' if tries == 1 else 'tries'} ({mask_secrets(reason)}); "
                "is the server running? start one with 'devops-rl serve builtin:tiny' or check --base-url")

    def served_models(self) -> list[str]:
        """The model ids the endpoint lists (empty when it cannot say)."""
        try:
            return [m.id for m in self._client.models.list().data]
        except Exception:  # only a hint for an error message
            log.debug("listing models failed", exc_info=True)
            return []


def _describe(exc: Exception) -> str:
    """A short masked description of an openai error: status and the server's message, one line."""
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
    text = str(message or exc).splitlines()[0][:200] if str(message or exc) else type(exc).__name__
    return mask_secrets(f"HTTP {status}: {text}" if status else f"{type(exc).__name__}: {text}")


def _tries(request) -> int:
    """How many times the openai client sent `request` (it numbers its retries in a header)."""
    try:
        return int(request.headers.get("x-stainless-retry-count", 0)) + 1
    except (AttributeError, ValueError):
        return 1


def _read_completion(response) -> tuple[str, dict[str, int], str | None]:
    """(text, usage, finish_reason) of a 200 answer; EndpointError when it is not a chat completion."""
    try:
        completion = _Completion.model_validate_json(response.content)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        if first["type"] == "json_invalid":
            kind = response.headers.get("content-type", "no content type").split(";")[0]
            snippet = " ".join(response.text[:80].split())
            raise EndpointError(
                mask_secrets(f"HTTP {response.status_code} but the answer is not JSON ({kind}): {snippet!r}")) from None
        where = ".".join(str(p) for p in first["loc"]) or "the body"
        raise EndpointError(f"HTTP {response.status_code} but not a chat completion: {where}: {first['msg'].lower()}") from None
    if not completion.choices:
        raise EndpointError(f"HTTP {response.status_code} but not a chat completion: 'choices' is empty")
    choice = completion.choices[0]
    usage = {}
    if completion.usage is not None:
        usage = {"prompt_tokens": int(completion.usage.prompt_tokens or 0),
                 "completion_tokens": int(completion.usage.completion_tokens or 0),
                 "total_tokens": int(completion.usage.total_tokens or 0)}
    return choice.message.content or "", usage, choice.finish_reason
