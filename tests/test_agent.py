"""DevOpsAgent against real HTTP servers on 127.0.0.1 through the real openai client: retries on 5xx/429/408/409
(waiting as Retry-After says), recovery, one-line 401/404 errors that never show the key, an unreachable port,
and answers that are not chat completions.
"""

from __future__ import annotations

import email.utils
import socket
import time

import pytest

from core.errors import UserError

ANSWER = """## Plan
1. Build the image in CI with `docker build`, run tests, scan it with Trivy.
2. Deploy with a Kubernetes Deployment (readiness and liveness probes, resource limits, RBAC).
3. Monitor with Prometheus alerts and Grafana dashboards; document the rollback in a runbook.
"""


@pytest.fixture
def scripted(chat_endpoint):
    """A ChatEndpoint answering ANSWER as model `scripted-model` unless told otherwise."""

    def make(**kwargs):
        kwargs.setdefault("models", ("scripted-model",))
        return chat_endpoint(kwargs.pop("text", ANSWER), **kwargs)

    return make


@pytest.fixture
def no_keys(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("DEVOPS_RL_API_KEY", raising=False)


def _task():
    import tasks

    return tasks.load_tasks()[0]


def _agent(server, **kwargs):
    from core.agent.client import DevOpsAgent

    return DevOpsAgent(server.base_url, server.models[0], **kwargs)


def test_answer_sends_prompt_and_defaults_and_scores_the_reply(scripted, no_keys):
    from core.rewards import score
    from tasks.prompt import system_prompt

    server = scripted()
    task = _task()
    answer = _agent(server).answer(task)
    sent = server.requests[0]
    assert sent["messages"] == [{"role": "system", "content": system_prompt()}, {"role": "user", "content": task.desc}]
    assert sent["temperature"] == 0.7 and sent["max_tokens"] == 2048
    assert answer.text == ANSWER
    assert answer.breakdown.to_dict() == score(ANSWER, task).to_dict()
    assert answer.usage == {"prompt_tokens": 11, "completion_tokens": 22, "total_tokens": 33}
    assert answer.elapsed > 0 and answer.finish_reason == "stop"


def test_key_comes_from_the_environment(scripted, monkeypatch):
    monkeypatch.setenv("DEVOPS_RL_API_KEY", "sk-devopsrl-env-key-123456")
    server = scripted()
    _agent(server, temperature=0.2, max_tokens=64).answer(_task())
    assert server.auth_headers == ["Bearer sk-devopsrl-env-key-123456"]
    assert server.requests[0]["temperature"] == 0.2 and server.requests[0]["max_tokens"] == 64
    assert "sk-devopsrl" not in repr(_agent(server))


def test_500_then_recovers_after_retries(scripted, no_keys):
    server = scripted(script=[(500, ()), (502, ()), (503, ())])
    answer = _agent(server, retries=4).answer(_task())
    assert answer.text == ANSWER
    assert len(server.requests) == 4


@pytest.mark.parametrize("header", [
    ("Retry-After", "2"),
    ("retry-after-ms", "2000"),
    ("Retry-After", "HTTP-date 3 s ahead"),
])
def test_429_waits_as_long_as_retry_after_says_then_succeeds(scripted, no_keys, header):
    """Without the header the first retry comes within 0.5 s; the server asked for about 2 s, so the second
    request must come at least 1.5 s after the first (a lower bound: a slow machine only makes it later)."""
    name, value = header
    if value.startswith("HTTP-date"):
        value = email.utils.formatdate(time.time() + 3, usegmt=True)  # whole seconds: 2 to 3 s from now
    server = scripted(script=[(429, ((name, value),))])
    assert _agent(server).answer(_task()).text == ANSWER
    assert len(server.requests) == 2
    assert server.times[1] - server.times[0] >= 1.5


def test_408_and_409_are_retried_too(scripted, no_keys):
    server = scripted(script=[(408, ()), (409, ())])
    assert _agent(server, retries=2).answer(_task()).text == ANSWER
    assert len(server.requests) == 3


def test_5xx_that_never_recovers_is_a_per_task_failure(scripted, no_keys):
    from core.agent.client import EndpointError

    server = scripted(script=[(500, ())] * 10)
    with pytest.raises(EndpointError, match=r"HTTP 500: scripted 500 \(after 3 tries\)"):
        _agent(server, retries=2).answer(_task())
    assert len(server.requests) == 3


def test_400_is_not_retried(scripted, no_keys):
    from core.agent.client import EndpointError

    server = scripted(script=[(400, ())])
    with pytest.raises(EndpointError, match="HTTP 400"):
        _agent(server).answer(_task())
    assert len(server.requests) == 1


def test_401_is_one_line_and_never_shows_the_key(scripted, monkeypatch):
    key = "sk-wrong-key-abcdefghijklmnop"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.delenv("DEVOPS_RL_API_KEY", raising=False)
    server = scripted(script=[(401, ())])
    with pytest.raises(UserError) as info:
        _agent(server).answer(_task())
    message = str(info.value)
    assert "401" in message and "OPENAI_API_KEY" in message and "\n" not in message
    assert key not in message and key[:12] not in message
    assert len(server.requests) == 1  # not retried


def test_401_without_any_key_says_which_variables_to_set(scripted, no_keys):
    server = scripted(script=[(401, ())])
    with pytest.raises(UserError, match="no API key is set; export DEVOPS_RL_API_KEY or OPENAI_API_KEY"):
        _agent(server).answer(_task())


def test_404_names_the_models_the_endpoint_serves(scripted, no_keys):
    from core.agent.client import DevOpsAgent

    server = scripted(script=[(404, ())], models=("qwen-a", "qwen-b"))
    with pytest.raises(UserError) as info:
        DevOpsAgent(server.base_url, "no-such-model").answer(_task())
    assert str(info.value).endswith("404 Not Found for model 'no-such-model'; models served there: qwen-a, qwen-b")


def test_unreachable_port_is_one_line_after_retries(no_keys):
    from core.agent.client import DevOpsAgent

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    agent = DevOpsAgent(f"http://127.0.0.1:{port}/v1", "m", retries=2, timeout=5)
    with pytest.raises(UserError) as info:
        agent.answer(_task())
    message = str(info.value)
    assert message.startswith(f"http://127.0.0.1:{port}/v1: cannot connect after 3 tries")
    assert "devops-rl serve" in message and "\n" not in message


@pytest.mark.parametrize("body, content_type, fragment", [
    (b"<html><body>502 Bad Gateway</body></html>", "text/html",
     "HTTP 200 but the answer is not JSON (text/html): '<html><body>502"),
    (b'{"choices": [', "application/json", "HTTP 200 but the answer is not JSON (application/json)"),
    (b'{"id": "x", "object": "chat.completion"}', "application/json",
     "HTTP 200 but not a chat completion: choices: field required"),
    (b'{"choices": []}', "application/json", "HTTP 200 but not a chat completion: 'choices' is empty"),
    (b'{"choices": [{"message": "hi"}]}', "application/json", "not a chat completion: choices.0.message"),
    (b'{"choices": [{"message": {"content": 5}}]}', "application/json", "not a chat completion: choices.0.message.content"),
    (b"[1, 2]", "application/json", "not a chat completion"),
])
def test_an_answer_that_is_not_a_chat_completion_is_a_per_task_error(scripted, no_keys, body, content_type, fragment):
    from core.agent.client import EndpointError

    server = scripted(raw=(content_type, body))
    with pytest.raises(EndpointError) as info:
        _agent(server).answer(_task())
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert len(server.requests) == 1  # a malformed 200 is not retried


@pytest.mark.parametrize("kwargs, fragment", [
    ({"base_url": "127.0.0.1:8000"}, "--base-url"),
    ({"model": ""}, "--model"),
    ({"temperature": 3.0}, "--temperature"),
    ({"max_tokens": 0}, "--max-tokens"),
    ({"timeout": -1}, "--timeout"),
    ({"timeout": float("inf")}, "--timeout"),
    ({"retries": -1}, "--retries"),
])
def test_bad_settings_are_user_errors(kwargs, fragment):
    from core.agent.client import DevOpsAgent

    settings = {"base_url": "http://127.0.0.1:1/v1", "model": "m", **kwargs}
    with pytest.raises(UserError, match=fragment):
        DevOpsAgent(settings.pop("base_url"), settings.pop("model"), **settings)
