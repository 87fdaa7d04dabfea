"""A small OpenAI-compatible server (`/v1/chat/completions`, `/v1/models`) for a local Hugging Face model.

Serves a model folder, the built-in tiny model or a run's latest checkpoint with the model's chat template,
so eval works without vLLM; stdlib `ThreadingHTTPServer`, loopback by default, optional API key.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from core.errors import UserError

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_BODY_BYTES = 8 * 1024 * 1024
@dataclass(frozen=True)
class ServedModel:
    """What `serve` will load: the folder, the name clients send as `model`, and where it came from."""

    path: Path
    name: str
    source: str


def latest_checkpoint_model(checkpoints: Path) -> tuple[int, Path] | None:
    """The newest `global_step_<N>` folder under `checkpoints` that holds a model (a config.json)."""
    from core.training.checkpoint import step_folders

    for step, entry in reversed(step_folders(checkpoints)):
        for folder in (entry, entry / "actor" / "huggingface"):  # ours, then verl's layout
            if (folder / "config.json").is_file():
                return step, folder
    return None


def resolve_served_model(spec: str) -> ServedModel:
    """Turn `builtin:tiny`, a run id or folder, a checkpoint folder, a model folder or a cached HF id into a model."""
    from core.training.tiny_model import BUILTIN_TINY, resolve_model_path

    text = str(spec).strip()
    if not text:
        raise UserError("model: empty; pass builtin:tiny, a model folder, a run id/folder or a cached Hugging Face id")
    if text == BUILTIN_TINY:
        return ServedModel(resolve_model_path(text), "tiny", text)
    run_folder = _run_folder(text)
    if run_folder is not None:
        latest = latest_checkpoint_model(run_folder / "checkpoints")
        if latest is None:
            raise UserError(
                f"run {run_folder}: no checkpoint with a model yet (no checkpoints/global_step_*/config.json); "
                "wait for the first checkpoint (trainer.save_freq) or serve another model"
            )
        step, folder = latest
        return ServedModel(folder, f"{run_folder.name}@step{step}", str(run_folder))
    path = resolve_model_path(text)
    return ServedModel(path, path.name if Path(text).expanduser().exists() else text, text)


def _run_folder(text: str) -> Path | None:
    """The run folder `text` names (`core.runs.find_run`), absolute, else None."""
    from core.runs import find_run

    found = find_run(text)
    return found.resolve() if found is not None else None


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
            raise UserError(f"{served.path}: cannot load the model ({str(exc).splitlines()[0]}); pass a save_pretrained folder") from exc
        self.model.eval()
        if not getattr(self.tokenizer, "chat_template", None):
            raise UserError(f"{served.path}: the tokenizer has no chat template (tokenizer_config.json 'chat_template'); serve a chat/instruct model")
        self.max_context = int(getattr(self.model.config, "max_position_embeddings", 0) or 0) or None
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

    def chat(self, messages: list[dict], *, max_tokens: int, temperature: float, top_p: float = 1.0,
             seed: int | None = None, stop: list[str] | None = None,
             on_text: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Generate one assistant reply: {"text", "prompt_tokens", "completion_tokens", "finish_reason"};
        `on_text` receives the reply piece by piece while it is generated (for streaming)."""
        import torch

        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        input_ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"].to(self.device)
        prompt_tokens = int(input_ids.shape[1])
        if self.max_context is not None:
            room = self.max_context - prompt_tokens
            if room <= 0:
                raise ValueError(f"the prompt is {prompt_tokens} tokens; this model's context is {self.max_context} tokens")
            max_tokens = min(max_tokens, room)
        kwargs: dict[str, Any] = {"max_new_tokens": max_tokens, "eos_token_id": self.stop_ids or None,
                                  "pad_token_id": self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else (self.stop_ids or [0])[0]}
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with self._lock, torch.no_grad():
            if seed is not None:
                torch.manual_seed(seed)
            if on_text is not None:
                kwargs["streamer"] = _DeltaStreamer(self, stop or [], on_text)
            output = self.model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
        new_ids = output[0, prompt_tokens:].tolist()
        finish_reason = "length"
        if new_ids and new_ids[-1] in self.stop_ids:
            new_ids, finish_reason = new_ids[:-1], "stop"
        text, stopped = cut_at_stop(self.tokenizer.decode(new_ids, skip_special_tokens=True), stop or [])
        finish_reason = "stop" if stopped else finish_reason
        return {"text": text, "prompt_tokens": prompt_tokens, "completion_tokens": len(new_ids), "finish_reason": finish_reason}


def cut_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """`text` up to the first stop string, and whether one was found."""
    cut = min((text.index(m) for m in stop if m and m in text), default=None)
    return (text, False) if cut is None else (text[:cut], True)


class _DeltaStreamer:
    """A transformers streamer (put/end) that hands each new piece of decoded text to a callback."""

    def __init__(self, model: LocalModel, stop: list[str], emit: Callable[[str], None]) -> None:
        self.model, self.stop, self.emit = model, stop, emit
        self.ids: list[int] = []
        self.sent = ""
        self.prompt_seen = False

    def put(self, value) -> None:
        if not self.prompt_seen:  # generate() first hands over the prompt
            self.prompt_seen = True
            return
        self.ids.extend(i for i in value.reshape(-1).tolist() if i not in self.model.stop_ids)
        text, _ = cut_at_stop(self.model.tokenizer.decode(self.ids, skip_special_tokens=True), self.stop)
        if text.endswith("\ufffd") or len(text) <= len(self.sent):  # half a UTF-8 character, or nothing new
            return
        self.emit(text[len(self.sent):])
        self.sent = text

    def end(self) -> None:
        pass


class ApiError(Exception):
    """An error answered in OpenAI's shape: {"error": {"message", "type", "code"}}."""

    def __init__(self, status: HTTPStatus, message: str, kind: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.code = status, message, kind, code


def _number(body: dict, key: str, default: float, low: float, high: float) -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"'{key}' must be a number in [{low}, {high}], got {value!r}", code="invalid_value")
    return float(value)


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(HTTPStatus.BAD_REQUEST, "'messages' must be a non-empty list of {role, content}", code="invalid_value")
    clean = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
            raise ApiError(HTTPStatus.BAD_REQUEST, f"messages[{i}].role must be system, user or assistant", code="invalid_value")
        content = message.get("content")
        if isinstance(content, list):  # the content-parts form: keep the text parts
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text")
        if not isinstance(content, str):
            raise ApiError(HTTPStatus.BAD_REQUEST, f"messages[{i}].content must be a string", code="invalid_value")
        clean.append({"role": message["role"], "content": content})
    return clean


def parse_request(model: LocalModel, body: dict) -> dict[str, Any]:
    """Check a `/v1/chat/completions` body; the keyword arguments for `LocalModel.chat` (ApiError if bad)."""
    requested = body.get("model")
    if requested not in (None, model.name):
        raise ApiError(HTTPStatus.NOT_FOUND, f"The model `{requested}` does not exist; this server serves `{model.name}`",
                       kind="NotFoundError", code="model_not_found")
    if body.get("n", 1) != 1:
        raise ApiError(HTTPStatus.BAD_REQUEST, "only n=1 is supported", code="unsupported")
    messages = _messages(body)
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 2048
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"'max_tokens' must be a positive integer, got {max_tokens!r}", code="invalid_value")
    temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0) or 1.0
    seed = body.get("seed")
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else list(stop or [])
    return {"messages": messages, "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p,
            "seed": seed if isinstance(seed, int) else None, "stop": stop}


def _generate(model: LocalModel, request: dict, on_text: Callable[[str], None] | None = None) -> dict:
    try:
        return model.chat(**request, on_text=on_text)
    except ValueError as exc:
        raise ApiError(HTTPStatus.BAD_REQUEST, str(exc), code="context_length_exceeded") from exc


def _usage(result: dict) -> dict[str, int]:
    return {"prompt_tokens": result["prompt_tokens"], "completion_tokens": result["completion_tokens"],
            "total_tokens": result["prompt_tokens"] + result["completion_tokens"]}


def chat_completion(model: LocalModel, body: dict) -> dict:
    """Answer one non-streaming `/v1/chat/completions` request body in OpenAI's response shape."""
    result = _generate(model, parse_request(model, body))
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model.name,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result["text"]},
                     "finish_reason": result["finish_reason"], "logprobs": None}],
        "usage": _usage(result),
    }


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        import socket

        # Headers and body go out in two writes; without this, Nagle + delayed ACK add ~40 ms per answer.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: HTTPStatus, payload: dict) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, error: ApiError) -> None:
        self._send(error.status, {"error": {"message": error.message, "type": error.kind, "param": None, "code": error.code}})

    def _authorized(self) -> bool:
        expected = self.server.api_key
        if not expected:
            return True
        header = self.headers.get("Authorization", "")
        given = header[7:].strip() if header.lower().startswith("bearer ") else ""
        return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            if path == "/health" and method == "GET":
                self._send(HTTPStatus.OK, {"status": "ok"})
                return
            if not self._authorized():
                raise ApiError(HTTPStatus.UNAUTHORIZED, "Incorrect or missing API key (send 'Authorization: Bearer <key>')",
                               kind="authentication_error", code="invalid_api_key")
            if path == "/v1/models" and method == "GET":
                self._send(HTTPStatus.OK, {"object": "list", "data": [
                    {"id": self.server.model.name, "object": "model", "created": self.server.started, "owned_by": "devops-rl"}]})
            elif path == "/v1/chat/completions" and method == "POST":
                body = self._body()
                if body.get("stream"):
                    self._stream(body)
                else:
                    self._send(HTTPStatus.OK, chat_completion(self.server.model, body))
            else:
                raise ApiError(HTTPStatus.NOT_FOUND, f"no route {method} {path}; this server has GET /v1/models and POST /v1/chat/completions",
                               kind="NotFoundError", code="unknown_url")
        except ApiError as error:
            self._error(error)
        except Exception as exc:  # a bug or a model failure: answer 500 and keep serving
            log.exception("request failed")
            self._error(ApiError(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}", kind="server_error"))

    def _stream(self, body: dict) -> None:
        """Server-sent events as OpenAI streams them: role, content pieces, finish reason, [usage], [DONE]."""
        model = self.server.model
        request = parse_request(model, body)
        base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model.name}
        started = False  # a context-length error before the first piece is still a plain JSON error

        def event(payload: dict | str) -> None:
            nonlocal started
            if not started:
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                started = True
            data = payload if isinstance(payload, str) else json.dumps(payload)
            self.wfile.write(f"data: {data}\n\n".encode("utf-8"))
            self.wfile.flush()

        def choice(delta: dict, finish_reason: str | None = None) -> dict:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]}

        def piece(text: str) -> None:
            if not started:
                event(choice({"role": "assistant", "content": ""}))
            event(choice({"content": text}))

        result = _generate(model, request, on_text=piece)
        if not started:
            event(choice({"role": "assistant", "content": ""}))
        event(choice({}, result["finish_reason"]))
        if (body.get("stream_options") or {}).get("include_usage"):
            event({**base, "choices": [], "usage": _usage(result)})
        event("[DONE]")

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_BODY_BYTES:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"request body must be 1..{MAX_BODY_BYTES} bytes of JSON", code="invalid_body")
        try:
            body = json.loads(self.rfile.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"request body is not JSON: {exc}", code="invalid_body") from exc
        if not isinstance(body, dict):
            raise ApiError(HTTPStatus.BAD_REQUEST, "request body must be a JSON object", code="invalid_body")
        return body

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")


class ChatServer(ThreadingHTTPServer):
    """The HTTP server; `base_url` is what an OpenAI client takes (`http://host:port/v1`)."""

    daemon_threads = True

    def __init__(self, model: LocalModel, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None) -> None:
        self.model = model
        self.api_key = api_key or None
        self.started = int(time.time())
        if ":" in host:
            import socket

            self.address_family = socket.AF_INET6
        try:
            super().__init__((host, port), _Handler)
        except OSError as exc:
            raise UserError(f"--host/--port: cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port or free it") from exc

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else host
        return f"http://{shown}:{port}/v1"


def start_server(model: LocalModel, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None) -> ChatServer:
    """Start serving in a daemon thread and return the server (call `.shutdown()` then `.server_close()`)."""
    server = ChatServer(model, host, port, api_key)
    thread = threading.Thread(target=server.serve_forever, name="devops-rl-serve", daemon=True)
    thread.start()
    return server
