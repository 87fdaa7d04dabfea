"""`serve` against the chat completions API, parameter by parameter, through the official openai client and raw
HTTP: every parameter the installed openai client knows is honoured (checked on the answer) or a 400 naming it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

BASE = {"model": "tiny", "messages": [{"role": "user", "content": "Write a Dockerfile."}], "max_tokens": 6, "temperature": 0}


def _openai_params() -> set[str]:
    from openai.types.chat.completion_create_params import CompletionCreateParamsBase

    return set(CompletionCreateParamsBase.__annotations__) | {"stream"}


@pytest.fixture(scope="module")
def tiny_server():
    from core.agent.inference import LocalModel
    from core.agent.served_model import resolve_served_model
    from core.agent.server import start_server

    server = start_server(LocalModel(resolve_served_model("builtin:tiny"), device="cpu"), "127.0.0.1", 0)
    yield server
    assert server.close()


def _events(raw: str) -> list[dict]:
    """The `data:` events of a server-sent stream; the raw stream must end with `[DONE]`."""
    data = [line[len("data: "):] for line in raw.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]", raw[-300:]
    return [json.loads(d) for d in data[:-1]]


def _send(server, transport: str, body: dict) -> tuple[int, dict | list]:
    """(status, the JSON answer, or the list of stream chunks) for one request through one transport."""
    if transport == "http":
        request = urllib.request.Request(server.base_url + "/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                raw = response.read().decode()
                return 200, _events(raw) if response.headers.get_content_type() == "text/event-stream" else json.loads(raw)
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())
    import openai

    client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=60)
    known = {k: v for k, v in body.items() if k in _openai_params()}
    extra = {k: v for k, v in body.items() if k not in known}
    try:
        result = client.chat.completions.create(**known, extra_body=extra or None)
    except openai.APIStatusError as error:
        return error.status_code, {"error": error.body}
    return 200, [chunk.model_dump() for chunk in result] if body.get("stream") else result.model_dump()


def _text(result: dict | list) -> str:
    if isinstance(result, list):
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in result if c["choices"])
    return result["choices"][0]["message"]["content"]


def _same_as_base(result, base) -> None:
    assert _text(result) == _text(base)


def _differs(result, base) -> None:
    assert _text(result) != _text(base)


def _tokens(n: int):
    def check(result, base) -> None:
        assert result["usage"]["completion_tokens"] == n

    return check


def _same_prompt_as_system(result, base) -> None:
    assert result["usage"]["prompt_tokens"] == base["system_prompt_tokens"]


def _stopped_at_once(result, base) -> None:  # greedy answers of the tiny model start with a newline
    assert _text(result) == "" and result["choices"][0]["finish_reason"] == "stop"
    assert result["usage"]["completion_tokens"] == 0


def _starts_with_ok(result, base) -> None:
    assert _text(result).startswith("okok")


def _streamed_same_as_base(result, base) -> None:
    assert isinstance(result, list) and _text(result) == _text(base)
    assert result[0]["choices"][0]["delta"]["role"] == "assistant"


def _usage_chunk_last(result, base) -> None:
    assert result[-1]["choices"] == [] and result[-1]["usage"]["completion_tokens"] == base["usage"]["completion_tokens"]


def _obfuscated(result, base) -> None:
    assert all(c.get("obfuscation") for c in result if c["choices"]) and _text(result) == _text(base)


def _seeded(result, base) -> None:
    assert _text(result) == base["seeded"] and _text(result) != _text(base)


TOOL = {"type": "function", "function": {"name": "kubectl", "parameters": {"type": "object", "properties": {}}}}
SAMPLED = {"temperature": 1.0, "seed": 7}
# (parameter, the request's changes, expectation: a check of the answer, or the status of an error naming the parameter)
ROWS = [
    ("model", {"model": "tiny"}, _same_as_base),
    ("model", {"model": "gpt-x"}, 404),
    ("model", {"model": 5}, 400),
    ("messages", {"messages": [{"role": "developer", "content": "You are terse."},
                               {"role": "user", "content": "Write a Dockerfile."}]},
     _same_prompt_as_system),
    ("messages", {"messages": [{"role": "user", "content": [{"type": "text", "text": "Write a "},
                                                            {"type": "text", "text": "Dockerfile."}]}]},
     _same_as_base),
    ("messages", {"messages": []}, 400),
    ("messages", {"messages": [{"role": "tool", "content": "x", "tool_call_id": "1"}]}, 400),
    ("messages", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
     400),
    ("messages", {"messages": [{"role": "user", "content": "hi", "name": "alice"}]}, 400),
    ("max_tokens", {"max_tokens": 3}, _tokens(3)),
    ("max_tokens", {"max_tokens": 0}, 400),
    ("max_tokens", {"max_tokens": 2.5}, 400),
    ("max_completion_tokens", {"max_completion_tokens": 2}, _tokens(2)),
    ("max_completion_tokens", {"max_completion_tokens": -1}, 400),
    ("temperature", {"temperature": 0}, _same_as_base),
    ("temperature", {**SAMPLED}, _seeded),
    ("temperature", {"temperature": 2.5}, 400),
    ("temperature", {"temperature": "hot"}, 400),
    ("top_p", {"temperature": 1.0, "top_p": 0}, _same_as_base),
    ("top_p", {"top_p": 1.5}, 400),
    ("seed", {**SAMPLED}, _seeded),
    ("seed", {"temperature": 1.0, "seed": 8}, _differs),
    ("seed", {"seed": "x"}, 400),
    ("stop", {"stop": "\n"}, _stopped_at_once),
    ("stop", {"stop": ["zzz", "\n"]}, _stopped_at_once),
    ("stop", {"stop": 5}, 400),
    ("stop", {"stop": [1]}, 400),
    ("presence_penalty", {"presence_penalty": 2.0}, _differs),
    ("presence_penalty", {"presence_penalty": 3}, 400),
    ("frequency_penalty", {"frequency_penalty": 2.0}, _differs),
    ("frequency_penalty", {"frequency_penalty": -3}, 400),
    ("logit_bias", {"logit_bias": {"OK_ID": 100}}, _starts_with_ok),
    ("logit_bias", {"logit_bias": {"abc": 1}}, 400),
    ("logit_bias", {"logit_bias": {"OK_ID": 101}}, 400),
    ("stream", {"stream": True}, _streamed_same_as_base),
    ("stream", {"stream": False}, _same_as_base),
    ("stream", {"stream": "yes"}, 400),
    ("stream_options", {"stream": True, "stream_options": {"include_usage": True}}, _usage_chunk_last),
    ("stream_options", {"stream": True, "stream_options": {"include_obfuscation": True}}, _obfuscated),
    ("stream_options", {"stream": True, "stream_options": {"include_everything": True}}, 400),
    ("n", {"n": 1}, _same_as_base),
    ("n", {"n": None}, _same_as_base),
    ("n", {"n": 2}, 400),
    ("user", {"user": "user-1"}, _same_as_base),
    ("user", {"user": 5}, 400),
    ("safety_identifier", {"safety_identifier": "hash-1"}, _same_as_base),
    ("metadata", {"metadata": {"team": "sre"}}, _same_as_base),
    ("metadata", {"metadata": {"team": 1}}, 400),
    ("prompt_cache_key", {"prompt_cache_key": "devops"}, _same_as_base),
    ("prompt_cache_retention", {"prompt_cache_retention": "24h"}, _same_as_base),
    ("prompt_cache_options", {"prompt_cache_options": {"mode": "implicit"}}, _same_as_base),
    ("parallel_tool_calls", {"parallel_tool_calls": False}, _same_as_base),
    ("tools", {"tools": [TOOL]}, 400),
    ("tools", {"tools": []}, _same_as_base),
    ("tool_choice", {"tool_choice": "auto"}, 400),
    ("tool_choice", {"tool_choice": "none"}, _same_as_base),
    ("functions", {"functions": [TOOL["function"]]}, 400),
    ("function_call", {"function_call": "auto"}, 400),
    ("response_format", {"response_format": {"type": "json_object"}}, 400),
    ("response_format", {"response_format": {"type": "text"}}, _same_as_base),
    ("logprobs", {"logprobs": True}, 400),
    ("logprobs", {"logprobs": False}, _same_as_base),
    ("top_logprobs", {"top_logprobs": 2}, 400),
    ("audio", {"audio": {"voice": "alloy", "format": "wav"}}, 400),
    ("modalities", {"modalities": ["text", "audio"]}, 400),
    ("modalities", {"modalities": ["text"]}, _same_as_base),
    ("prediction", {"prediction": {"type": "content", "content": "FROM python"}}, 400),
    ("reasoning_effort", {"reasoning_effort": "low"}, 400),
    ("verbosity", {"verbosity": "low"}, 400),
    ("web_search_options", {"web_search_options": {}}, 400),
    ("moderation", {"moderation": {"model": "omni-moderation-latest"}}, 400),
    ("store", {"store": True}, 400),
    ("store", {"store": False}, _same_as_base),
    ("service_tier", {"service_tier": "flex"}, 400),
    ("service_tier", {"service_tier": "auto"}, _same_as_base),
    ("not_a_parameter", {"not_a_parameter": 1}, 400),
]


@pytest.fixture(scope="module")
def base(tiny_server) -> dict:
    """The plain answer every row is compared with, and what some checks need beside it."""
    status, answer = _send(tiny_server, "http", BASE)
    assert status == 200
    system = {**BASE, "messages": [{"role": "system", "content": "You are terse."}, *BASE["messages"]]}
    answer["system_prompt_tokens"] = _send(tiny_server, "http", system)[1]["usage"]["prompt_tokens"]
    answer["seeded"] = _text(_send(tiny_server, "http", {**BASE, **SAMPLED})[1])
    return answer


def test_every_parameter_of_the_openai_client_has_a_row():
    assert _openai_params() <= {row[0] for row in ROWS}


@pytest.mark.parametrize("transport", ["openai", "http"])
@pytest.mark.parametrize("param, change, expected", ROWS, ids=[f"{r[0]}={json.dumps(r[1].get(r[0]))[:30]}" for r in ROWS])
def test_each_parameter_is_honoured_or_refused_by_name(tiny_server, base, transport, param, change, expected):
    ok_id = str(tiny_server.model.tokenizer("ok", add_special_tokens=False)["input_ids"][0])
    change = json.loads(json.dumps(change).replace("OK_ID", ok_id))
    status, result = _send(tiny_server, transport, {**BASE, **change})
    if callable(expected):
        assert status == 200, result
        expected(result, base)
        return
    assert status == expected, result
    error = result["error"]
    assert error["param"] and error["param"].split("[")[0].split(".")[0] == param, error
    assert param in error["message"] and "\n" not in error["message"]
    assert error["type"] == ("NotFoundError" if expected == 404 else "invalid_request_error")
