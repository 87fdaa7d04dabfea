"""A small OpenAI-compatible HTTP server (`/v1/chat/completions`, `/v1/models`) for one local model.

stdlib `ThreadingHTTPServer`, loopback by default, optional API key; `close()` stops generations in flight
at their next token and waits for every connection, so Ctrl-C never leaves a thread inside torch.
"""

from __future__ import annotations

import hmac
import json
import logging
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from core.agent.chat_api import ApiError, ChatRequest, ChunkMaker, completion_body, parse_request
from core.agent.inference import GenerationCancelled, LocalModel, PromptTooLong
from core.errors import UserError

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_BODY_BYTES = 8 * 1024 * 1024
CLOSE_GRACE_S = 10.0  # a generation stops at its next token; this covers one forward pass of a large model on CPU
SHUTTING_DOWN = "the server is shutting down"


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes; without this, Nagle + delayed ACK add ~40 ms per answer.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.request)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.untrack(self.request)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: HTTPStatus, payload: dict) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

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
            if self.server.stopping.is_set():
                self.close_connection = True
                raise ApiError(HTTPStatus.SERVICE_UNAVAILABLE, SHUTTING_DOWN, kind="server_error", code="shutting_down")
            if path == "/health" and method == "GET":
                self._send(HTTPStatus.OK, {"status": "ok"})
                return
            if not self._authorized():
                raise ApiError(HTTPStatus.UNAUTHORIZED, "Incorrect or missing API key (send 'Authorization: Bearer <key>')",
                               kind="authentication_error", code="invalid_api_key")
            if path == "/v1/models" and method == "GET":
                self._send(HTTPStatus.OK, {"object": "list", "data": [self.server.model_card()]})
            elif path.startswith("/v1/models/") and method == "GET":
                self._model(unquote(path[len("/v1/models/"):]))
            elif path == "/v1/chat/completions" and method == "POST":
                model = self.server.model
                request = parse_request(self._body(), model.name, model.vocab_size)
                if request.stream:
                    self._stream(request)
                else:
                    self._send(HTTPStatus.OK, completion_body(model.name, self._generate(request)))
            else:
                raise ApiError(HTTPStatus.NOT_FOUND, f"no route {method} {path}; this server has GET /v1/models, "
                               "GET /v1/models/{id} and POST /v1/chat/completions", kind="NotFoundError", code="unknown_url")
        except ApiError as error:
            self._send(error.status, error.body())
        except ConnectionError:  # the client went away; nothing to answer
            log.debug("%s closed the connection", self.address_string())
            self.close_connection = True
        except Exception as exc:  # a bug or a model failure: answer 500 and keep serving
            log.exception("request failed")
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR,
                       ApiError(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}", kind="server_error").body())

    def _model(self, model_id: str) -> None:
        if model_id != self.server.model.name:
            raise ApiError(HTTPStatus.NOT_FOUND,
                           f"The model `{model_id}` does not exist; this server serves `{self.server.model.name}`",
                           kind="NotFoundError", code="model_not_found", param="model")
        self._send(HTTPStatus.OK, self.server.model_card())

    def _generate(self, request: ChatRequest, on_text=None) -> dict:
        try:
            return self.server.model.chat(request.template_messages(), request.sampling(), on_text=on_text,
                                          cancel=self.server.stopping)
        except PromptTooLong as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(exc), code="context_length_exceeded", param="messages") from exc
        except GenerationCancelled as exc:
            self.close_connection = True
            raise ApiError(HTTPStatus.SERVICE_UNAVAILABLE, f"{SHUTTING_DOWN}; the answer was not finished",
                           kind="server_error", code="shutting_down") from exc

    def _stream(self, request: ChatRequest) -> None:
        """Server-sent events as OpenAI streams them: role, content pieces, finish reason, [usage], [DONE]."""
        chunks = ChunkMaker(self.server.model.name, request.obfuscate)
        started = False  # an error before the first piece is still a plain JSON error

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
            self.wfile.write(f"data: {data}\n\n".encode())
            self.wfile.flush()

        def piece(text: str) -> None:
            if not started:
                event(chunks.choice({"role": "assistant", "content": ""}))
            event(chunks.choice({"content": text}))

        try:
            result = self._generate(request, on_text=piece)
        except ConnectionError:
            raise
        except Exception as exc:
            if not started:
                raise
            if not isinstance(exc, ApiError):
                log.exception("streamed request failed")
                exc = ApiError(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}", kind="server_error")
            event(exc.body())  # what OpenAI sends when a stream fails midway; the client raises it
            event("[DONE]")
            return
        if not started:
            event(chunks.choice({"role": "assistant", "content": ""}))
        event(chunks.choice({}, result["finish_reason"]))
        if request.include_usage:
            event(chunks.usage(result))
        event("[DONE]")

    def _body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY_BYTES:
            self.close_connection = True  # the body (if any) stays unread, so this connection cannot carry another request
            raise ApiError(HTTPStatus.BAD_REQUEST, f"request body must be 1..{MAX_BODY_BYTES} bytes of JSON with a valid "
                           f"Content-Length (got {self.headers.get('Content-Length')!r:.40})", code="invalid_body")
        return self.rfile.read(length)

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")


class ChatServer(ThreadingHTTPServer):
    """The HTTP server; `base_url` is what an OpenAI client takes (`http://host:port/v1`)."""

    daemon_threads = True
    block_on_close = False  # close() joins the connection threads itself, with a deadline

    def __init__(self, model: LocalModel, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None) -> None:
        self.model = model
        self.api_key = api_key or None
        self.started = int(time.time())
        self.stopping = threading.Event()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._connections_lock = threading.Lock()
        self._serving: threading.Thread | None = None
        if ":" in host:
            self.address_family = socket.AF_INET6
        try:
            super().__init__((host, port), _Handler)
        except OSError as exc:
            raise UserError(f"--host/--port: cannot listen on {host}:{port} ({exc.strerror or exc}); "
                            "pick another --port or free it") from exc

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else host
        return f"http://{shown}:{port}/v1"

    def model_card(self) -> dict:
        return {"id": self.model.name, "object": "model", "created": self.started, "owned_by": "devops-rl"}

    def track(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections[connection] = threading.current_thread()

    def untrack(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.pop(connection, None)

    def handle_error(self, request, client_address) -> None:
        log.debug("connection from %s failed", client_address, exc_info=True)  # not a traceback on the console

    def close(self, grace_s: float = CLOSE_GRACE_S) -> bool:
        """Stop serving and wait for every connection: a generation in flight stops at its next token (its
        client gets a 503, or an error event then `[DONE]` in a stream), idle keep-alive connections are
        closed. False when a connection thread was still running after `grace_s`."""
        self.stopping.set()
        if self._serving is not None:
            self.shutdown()
        self.server_close()
        with self._connections_lock:
            open_now = dict(self._connections)
        for connection in open_now:  # a blocked read of the next request returns at once; answers are still written
            _shut(connection, socket.SHUT_RD)
        deadline = time.monotonic() + grace_s
        for thread in open_now.values():
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = {c: t for c, t in open_now.items() if t.is_alive()}
        for connection in stuck:  # a client that does not read its answer: cut it off
            _shut(connection, socket.SHUT_RDWR)
        for thread in stuck.values():
            thread.join(1.0)
        return not any(t.is_alive() for t in stuck.values())


def _shut(connection: socket.socket, how: int) -> None:
    try:
        connection.shutdown(how)
    except OSError:  # already closed by the other side
        pass


def start_server(model: LocalModel, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None) -> ChatServer:
    """Start serving in a daemon thread and return the server (stop it with `.close()`)."""
    server = ChatServer(model, host, port, api_key)
    server._serving = threading.Thread(target=server.serve_forever, name="devops-rl-serve", daemon=True)
    server._serving.start()
    return server
