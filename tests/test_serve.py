"""`devops-rl serve` and core.agent.server: the real server on 127.0.0.1 through the real openai client,
serving the tiny model or a run's latest checkpoint, with the key check, OpenAI-shaped errors and the CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from core.errors import UserError


@pytest.fixture(scope="module")
def tiny_server():
    from core.agent.inference import LocalModel
    from core.agent.served_model import resolve_served_model
    from core.agent.server import start_server

    model = LocalModel(resolve_served_model("builtin:tiny"), device="cpu")
    server = start_server(model, "127.0.0.1", 0)
    yield server
    assert server.close()


def _client(base_url: str, key: str = "EMPTY"):
    from openai import OpenAI

    return OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60)


def _chat(client, **kwargs):
    return client.chat.completions.create(**{"model": "tiny", "messages": [{"role": "user", "content": "Write a Dockerfile."}],
                                             "max_tokens": 8, **kwargs})


def test_models_and_chat_completion_through_openai_client(tiny_server):
    client = _client(tiny_server.base_url)
    assert [m.id for m in client.models.list().data] == ["tiny"]
    response = _chat(client, temperature=0.7)
    assert response.model == "tiny" and response.object == "chat.completion"
    assert response.choices[0].message.role == "assistant"
    assert response.choices[0].finish_reason in ("stop", "length")
    usage = response.usage
    assert 1 <= usage.completion_tokens <= 8 and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_prompt_goes_through_the_models_chat_template(tiny_server):
    model = tiny_server.model
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Write a Dockerfile."}]
    text = model.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are terse.<|im_end|>") and text.endswith("<|im_start|>assistant\n")
    expected = len(model.tokenizer(text, add_special_tokens=False)["input_ids"])
    response = _chat(_client(tiny_server.base_url), messages=messages)
    assert response.usage.prompt_tokens == expected


def test_temperature_zero_is_deterministic(tiny_server):
    client = _client(tiny_server.base_url)
    first = _chat(client, temperature=0, max_tokens=12).choices[0].message.content
    assert _chat(client, temperature=0, max_tokens=12).choices[0].message.content == first


@pytest.mark.parametrize("body, status, fragment", [
    ({"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}, 404, "does not exist"),
    ({"model": "tiny", "messages": []}, 400, "Invalid 'messages': List should have at least 1 item"),
    ({"model": "tiny", "messages": [{"role": "robot", "content": "hi"}]}, 400, "Invalid 'messages[0].role'"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": 5}, 400, "'temperature'"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "n": 2}, 400, "only n=1"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "hi " * 5000}], "stream": True}, 400, "this model's context is"),
])
def test_bad_requests_get_openai_shaped_errors(tiny_server, body, status, fragment):
    request = urllib.request.Request(tiny_server.base_url + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=30)
    assert info.value.code == status
    assert fragment in json.loads(info.value.read())["error"]["message"]


def test_streaming_gives_the_same_answer_piece_by_piece(tiny_server):
    client = _client(tiny_server.base_url)
    whole = _chat(client, temperature=0, max_tokens=16)
    stream = _chat(client, temperature=0, max_tokens=16, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 1 and "".join(pieces) == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_stop_strings_cut_the_answer(tiny_server):
    client = _client(tiny_server.base_url)
    whole = _chat(client, temperature=1.0, seed=7, max_tokens=16).choices[0].message.content
    assert _chat(client, temperature=1.0, seed=7, max_tokens=16).choices[0].message.content == whole  # seeded
    marker = whole[len(whole) // 2:][:3]
    assert marker.strip()
    cut = _chat(client, temperature=1.0, seed=7, max_tokens=16, stop=[marker]).choices[0]
    assert cut.message.content == whole[: whole.index(marker)] and cut.finish_reason == "stop"


SAMPLED = {"temperature": 1.0, "seed": 11}  # the tiny model never stops by itself: it runs to max_tokens


def test_a_stop_string_ends_generation_and_usage_counts_only_the_answer(tiny_server):
    """The stop string shows up early in a 400-token answer: generation ends there (not at max_tokens), and
    completion_tokens is the number of tokens the returned text needs: k tokens hold it, k-1 do not."""
    client = _client(tiny_server.base_url)
    whole = _chat(client, max_tokens=400, **SAMPLED)
    text = whole.choices[0].message.content
    assert whole.usage.completion_tokens == 400
    marker = next(text[i:i + 3] for i in range(len(text) // 5, len(text))
                  if text[i:i + 3].isalpha() and "\ufffd" not in text[i:i + 3])
    answer = _chat(client, max_tokens=400, stop=marker, **SAMPLED)
    cut = text[: text.index(marker)]
    assert answer.choices[0].message.content == cut and answer.choices[0].finish_reason == "stop"
    used = answer.usage.completion_tokens
    assert used < 200
    assert _chat(client, max_tokens=used, **SAMPLED).choices[0].message.content.startswith(cut)
    assert not _chat(client, max_tokens=used - 1, **SAMPLED).choices[0].message.content.startswith(cut) or not cut


def _stream_pieces(client, **kwargs) -> tuple[list[str], str | None]:
    chunks = list(_chat(client, stream=True, **kwargs))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    return pieces, [c.choices[0].finish_reason for c in chunks if c.choices][-1]


def test_a_stream_never_shows_part_of_a_multi_character_stop_string(tiny_server):
    """The stop string spans two streamed pieces: the first piece alone must not be sent before the second
    shows it is the stop string, so the pieces add up to exactly the non-streamed answer."""
    client = _client(tiny_server.base_url)
    pieces, _ = _stream_pieces(client, max_tokens=60, **SAMPLED)
    text = "".join(pieces)
    for i in range(len(pieces) // 3, len(pieces) - 1):
        marker = pieces[i] + pieces[i + 1]
        if "\ufffd" not in marker and len(marker) >= 3 and text.index(marker) == len("".join(pieces[:i])):
            break
    else:
        pytest.fail(f"no two neighbouring pieces make a usable stop string in {pieces}")
    streamed, finish = _stream_pieces(client, max_tokens=60, stop=[marker], **SAMPLED)
    whole = _chat(client, max_tokens=60, stop=[marker], **SAMPLED).choices[0].message.content
    assert "".join(streamed) == whole == "".join(pieces[:i]) and finish == "stop"


def test_get_one_model_by_id(tiny_server):
    import openai

    client = _client(tiny_server.base_url)
    assert client.models.retrieve("tiny").id == "tiny"
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("gpt-x")
    assert "The model `gpt-x` does not exist" in str(info.value)


@pytest.mark.parametrize("length", ["abc", "-5", "1e3", None])
def test_a_malformed_content_length_is_a_400(tiny_server, length):
    import http.client

    host, port = tiny_server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=30)
    connection.putrequest("POST", "/v1/chat/completions")
    if length is not None:
        connection.putheader("Content-Length", length)
    connection.putheader("Content-Type", "application/json")
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 400
    assert "valid Content-Length" in json.loads(response.read())["error"]["message"]
    connection.close()


def _fake_run(root: Path, run_id: str, steps_with_model: list[int], incomplete_steps: list[int] = ()) -> Path:
    from core.training.tiny_model import ensure_tiny_model

    run = root / run_id
    (run / "checkpoints").mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"run_id": run_id, "status": "finished"}))
    for step in steps_with_model:
        shutil.copytree(ensure_tiny_model(), run / "checkpoints" / f"global_step_{step}")
    for step in incomplete_steps:
        (run / "checkpoints" / f"global_step_{step}").mkdir()
    return run


def test_a_run_serves_its_latest_checkpoint_holding_a_model(tmp_path):
    from core.agent.inference import LocalModel
    from core.agent.served_model import resolve_served_model
    from core.agent.server import start_server

    run = _fake_run(Path(os.environ["DEVOPS_RL_RUNS_DIR"]), "20260101-000000-ci-fast-abcd", [2, 10], incomplete_steps=[12])
    for spec in (str(run), "20260101-000000-ci-fast-abcd", "20260101-000000-ci"):
        served = resolve_served_model(spec)
        assert served.path == run / "checkpoints" / "global_step_10"
        assert served.name == "20260101-000000-ci-fast-abcd@step10"
    server = start_server(LocalModel(served, device="cpu"), "127.0.0.1", 0)
    try:
        client = _client(server.base_url)
        response = _chat(client, model=served.name)
        assert response.model == served.name
    finally:
        assert server.close()


def test_a_run_without_a_model_checkpoint_is_a_user_error(tmp_path):
    from core.agent.served_model import resolve_served_model

    run = _fake_run(tmp_path, "20260101-000000-train-beef", [], incomplete_steps=[1])
    with pytest.raises(UserError, match=r"no checkpoint with a model yet .*save_freq"):
        resolve_served_model(str(run))
    with pytest.raises(UserError, match="'nowhere/model' is not in the local Hugging Face cache"):
        resolve_served_model("nowhere/model")


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.cli.main", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=Path(__file__).resolve().parents[1])


def test_serve_refuses_other_interfaces_without_a_key_and_missing_models():
    result = _cli("serve", "builtin:tiny", "--host", "0.0.0.0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: --host 0.0.0.0: serving beyond this machine needs --require-key")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "DEVOPS_RL_API_KEY")}
    result = _cli("serve", "builtin:tiny", "--require-key", env=env)
    assert result.returncode == 2 and "--require-key: set DEVOPS_RL_API_KEY or OPENAI_API_KEY" in result.stderr


@pytest.mark.slow
def test_serve_cli_with_required_key_then_eval_against_it(tmp_path, monkeypatch):
    """The issue's 'done when': serve + eval --base-url gives a results file; wrong key is a one-line 401;
    no file the server, eval or logs wrote holds the key."""
    from core.agent.client import DevOpsAgent
    from core.cli.main import main

    key = "sk-served-key-0123456789abcdef"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEVOPS_RL_API_KEY", key)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = subprocess.Popen([sys.executable, "-m", "core.cli.main", "serve", "builtin:tiny", "--port", "0", "--require-key"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        line = server.stdout.readline()
        assert "key required" in line, (line, server.stderr.read() if server.poll() is not None else "")
        base_url = line.split(" at ", 1)[1].split(" ", 1)[0]
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")

        import openai

        with pytest.raises(openai.AuthenticationError):
            _client(base_url, "sk-not-the-key-999999999").models.list()
        assert [m.id for m in _client(base_url, key).models.list().data] == ["tiny"]

        monkeypatch.setenv("DEVOPS_RL_API_KEY", "sk-wrong-key-zyxwvutsrqpo")
        with pytest.raises(UserError) as info:
            DevOpsAgent(base_url, "tiny").answer(__import__("tasks").load_tasks()[0])
        assert "401 Unauthorized" in str(info.value) and "sk-wrong" not in str(info.value)
        assert main(["eval", "--base-url", base_url, "--model", "tiny", "--limit", "1", "--max-tokens", "4"]) == 2
        assert not list(tmp_path.glob("eval_results_*.json"))  # nothing finished, nothing written

        monkeypatch.setenv("DEVOPS_RL_API_KEY", key)
        out = tmp_path / "results"
        assert main(["eval", "--base-url", base_url, "--model", "tiny", "--limit", "3", "--max-tokens", "8",
                     "--out", str(out), "-j", "2"]) == 0
        [results] = list(out.glob("eval_results_*.json"))
        data = json.loads(results.read_text())
        assert data["status"] == "complete" and data["summary"]["count"] == 3
        for field in ("mean_reward", "by_type", "by_difficulty", "by_dimension", "count", "failures", "wall_time_s", "tokens"):
            assert field in data["summary"]
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 130
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name.endswith(".log") for p in written) and results in written
    for path in written:
        assert key.encode() not in path.read_bytes(), path
        assert b"sk-wrong-key" not in path.read_bytes(), path
    assert key not in err


def test_cuda_without_a_gpu_is_a_user_error():
    import torch

    from core.agent.inference import LocalModel
    from core.agent.served_model import resolve_served_model

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(UserError, match="--device cuda: no CUDA GPU visible"):
        LocalModel(resolve_served_model("builtin:tiny"), device="cuda")
