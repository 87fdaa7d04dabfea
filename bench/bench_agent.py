"""Agent and eval costs: the local server's HTTP overhead against calling `generate` directly, what stop
strings cost and save, eval concurrency against the ideal speed-up, and the results rewrite against a JSONL append.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROUNDS = 5
MAX_TOKENS = 64
LATENCY_S = 0.2
EVAL_TASKS = 16
CONCURRENCY = 8
RESULT_ROWS = 500
STOP_BUDGET = 256


def _server_overhead() -> dict:
    """Completion tokens/s through HTTP + the openai client vs the same model's chat() in-process."""
    from openai import OpenAI

    from core.agent.inference import LocalModel, Sampling
    from core.agent.served_model import resolve_served_model
    from core.agent.server import start_server

    model = LocalModel(resolve_served_model("builtin:tiny"), device="cpu")
    server = start_server(model, "127.0.0.1", 0)
    client = OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)
    messages = [{"role": "user", "content": "Design a CI/CD pipeline with rollback and monitoring."}]
    direct, http = [], []
    try:
        for i in range(ROUNDS + 1):  # the first round warms both paths
            t0 = time.perf_counter()
            out = model.chat(messages, Sampling(max_tokens=MAX_TOKENS, temperature=0.0))
            d = out["completion_tokens"] / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            response = client.chat.completions.create(model="tiny", messages=messages, max_tokens=MAX_TOKENS, temperature=0)
            h = response.usage.completion_tokens / (time.perf_counter() - t0)
            if i:
                direct.append(d)
                http.append(h)
    finally:
        server.close()
    ours, peer = statistics.median(http), statistics.median(direct)
    return {"benchmark": "agent", "figure": f"serve: completion tok/s over HTTP (tiny, {MAX_TOKENS} tok, greedy)",
            "value": round(ours, 1), "unit": "tok/s", "peer": f"generate in-process: {peer:.1f} tok/s",
            "ratio": round(ours / peer, 2), "goal": ">= 0.9x"}


def _stop_strings() -> list[dict]:
    """What checking stop strings costs per token (four that never match), and what stopping saves: a stop
    string met at the first token of a STOP_BUDGET-token request, against the same request without it."""
    from core.agent.inference import LocalModel, Sampling
    from core.agent.served_model import resolve_served_model

    model = LocalModel(resolve_served_model("builtin:tiny"), device="cpu")
    messages = [{"role": "user", "content": "Design a CI/CD pipeline with rollback and monitoring."}]
    never = ("\u2603 never", "END OF ANSWER", "</answer>", "###")

    def seconds(sampling) -> tuple[float, int]:
        t0 = time.perf_counter()
        out = model.chat(messages, sampling)
        return time.perf_counter() - t0, out["completion_tokens"]

    checked, plain, stopped, unstopped = [], [], [], []
    for i in range(ROUNDS + 1):  # the first round warms up
        tc, nc = seconds(Sampling(max_tokens=STOP_BUDGET, temperature=0.0, stop=never))
        tp, np_ = seconds(Sampling(max_tokens=STOP_BUDGET, temperature=0.0))
        # greedy tiny answers start with a newline
        ts, _ = seconds(Sampling(max_tokens=STOP_BUDGET, temperature=0.0, stop=("\n",)))
        if i:
            checked.append(nc / tc)
            plain.append(np_ / tp)
            stopped.append(ts)
            unstopped.append(tp)
    c, p, s, u = (statistics.median(v) for v in (checked, plain, stopped, unstopped))
    return [
        {"benchmark": "agent", "figure": f"serve: tok/s with 4 stop strings checked ({STOP_BUDGET} tok, greedy)",
         "value": round(c, 1), "unit": "tok/s", "peer": f"no stop strings: {p:.1f} tok/s", "ratio": round(c / p, 2),
         "goal": ">= 0.9x"},
        {"benchmark": "agent", "figure": f"serve: answer whose stop string comes first ({STOP_BUDGET}-token budget)",
         "value": round(s * 1000, 1), "unit": "ms", "peer": f"same request without it: {u * 1000:.0f} ms",
         "ratio": round(s / u, 3), "goal": "stops at once, lock released"},
    ]


class _SlowEndpoint:
    """An OpenAI-shaped endpoint on 127.0.0.1 that answers every request after LATENCY_S."""

    def __init__(self, answer: str) -> None:
        payload = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                              "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                                           "finish_reason": "stop"}],
                              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(LATENCY_S)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


def _eval_concurrency() -> dict:
    """Wall time of an eval of EVAL_TASKS tasks at -j CONCURRENCY vs -j 1, against the ideal speed-up."""
    import tasks
    from core.agent.client import DevOpsAgent
    from core.agent.evaluate import run_eval
    from core.agent.results import ResultsFile

    task_list = tasks.load_tasks()[:EVAL_TASKS]
    endpoint = _SlowEndpoint(task_list[0].reference_answer or "Use Terraform, CI, monitoring and RBAC.")
    agent = DevOpsAgent(endpoint.base_url, "m")
    agent.answer(task_list[0])  # warm up: openai's lazy imports and the connection pool
    walls = {}
    with tempfile.TemporaryDirectory() as tmp:
        for j in (1, CONCURRENCY):
            results = ResultsFile.create(Path(tmp) / f"eval_results_j{j}.json", {}, [t.id for t in task_list])
            t0 = time.perf_counter()
            run_eval(agent, task_list, results, concurrency=j)
            walls[j] = time.perf_counter() - t0
    endpoint.httpd.shutdown()
    speedup = walls[1] / walls[CONCURRENCY]
    return {"benchmark": "agent", "figure": f"eval speed-up at -j {CONCURRENCY} ({EVAL_TASKS} tasks, {LATENCY_S}s latency)",
            "value": round(speedup, 2), "unit": "x", "peer": f"ideal {CONCURRENCY}x; -j 1 took {walls[1]:.1f}s",
            "ratio": round(speedup / CONCURRENCY, 2), "goal": ">= 0.7 of ideal"}


def _results_write() -> dict:
    """Mean cost of saving one more result at RESULT_ROWS results (atomic whole-file rewrite) vs a JSONL append."""
    import tasks
    from core.agent.results import ResultsFile

    task = tasks.load_tasks()[0]
    answer = (task.reference_answer or "x" * 3000)[:3500]
    entry = {"task_id": "", "type": task.type, "difficulty": task.difficulty, "reward": 0.5, "elapsed_seconds": 1.0,
             "breakdown": {"final_reward": 0.5, "dimensions": {"automation": 0.5}, "penalties": {}, "evidence": {}},
             "answer": answer, "usage": {"total_tokens": 900}}
    ids = [f"t{i}" for i in range(RESULT_ROWS)]
    with tempfile.TemporaryDirectory() as tmp:
        results = ResultsFile.create(Path(tmp) / "eval_results_x.json", {}, ids)
        jsonl = Path(tmp) / "x.jsonl"
        ours, peer = [], []
        for task_id in ids:
            t0 = time.perf_counter()
            results.add({**entry, "task_id": task_id}, 1.0)
            ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            with open(jsonl, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({**entry, "task_id": task_id}) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            peer.append(time.perf_counter() - t0)
    last = slice(-50, None)
    o, p = statistics.mean(ours[last]), statistics.mean(peer[last])
    return {"benchmark": "agent", "figure": f"save one result at {RESULT_ROWS} results (atomic rewrite + fsync)",
            "value": round(o * 1000, 2), "unit": "ms", "peer": f"JSONL append + fsync: {p * 1000:.2f} ms",
            "ratio": round(o / p, 1), "goal": "< 1% of a request (~5 s)"}


def run() -> list[dict]:
    return [_server_overhead(), *_stop_strings(), _eval_concurrency(), _results_write()]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    from run_all import print_table

    print_table(run())
