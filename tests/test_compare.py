"""`devops-rl compare A.json B.json`: deltas overall and per type/difficulty/dimension, most improved and
regressed tasks, the weakest tasks with their weakest dimension; files written by the real results writer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

WEAK = "Use Docker."
STRONG = "reference"  # the task's own reference answer


def _write(path: Path, answers: dict[str, str | None]) -> Path:
    """A results file for these task ids, scored with the real reward and written by ResultsFile."""
    import tasks
    from core.agent.client import AgentAnswer
    from core.agent.results import ResultsFile, result_entry
    from core.rewards import score

    results = ResultsFile.create(path, {"model": path.stem}, list(answers))
    for task_id, text in answers.items():
        task = tasks.get_task(task_id)
        text = task.reference_answer if text == STRONG else text
        answer = None if text is None else AgentAnswer(text, score(text, task), {"total_tokens": 10}, 1.0)
        results.add(result_entry(task, answer, error=None if answer else "HTTP 500"), 2.0)
    results.finish("complete", 2.0)
    return path


@pytest.fixture
def pair(tmp_path):
    import tasks

    ids = [t.id for t in tasks.load_tasks() if t.reference_answer][:4]
    a = _write(tmp_path / "a.json", {ids[0]: WEAK, ids[1]: WEAK, ids[2]: STRONG, ids[3]: WEAK})
    b = _write(tmp_path / "b.json", {ids[0]: STRONG, ids[1]: WEAK, ids[2]: WEAK, ids[3]: None})
    return a, b, ids


def test_compare_json_has_the_deltas_and_the_task_lists(pair, capsys):
    from core.cli.main import main

    a, b, ids = pair
    assert main(["compare", str(a), str(b), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    da, db = json.loads(a.read_text())["summary"], json.loads(b.read_text())["summary"]
    assert result["mean_reward"] == {"a": da["mean_reward"], "b": db["mean_reward"],
                                     "delta": pytest.approx(db["mean_reward"] - da["mean_reward"], abs=1e-6)}
    for dim, row in result["by_dimension"].items():
        assert row["delta"] == pytest.approx(db["by_dimension"][dim] - da["by_dimension"][dim], abs=1e-6)
    assert result["common_tasks"] == 3 and result["b"]["failures"] == 1
    ra = {r["task_id"]: r["reward"] for r in json.loads(a.read_text())["results"]}
    assert result["mean_reward_common"]["a"] == pytest.approx(sum(ra[i] for i in ids[:3]) / 3, abs=1e-6)
    assert [c["task_id"] for c in result["improved"]] == [ids[0]]
    assert [c["task_id"] for c in result["regressed"]] == [ids[2]]
    lowest = result["lowest"]
    assert [low["reward"] for low in lowest] == sorted(low["reward"] for low in lowest)
    weak_entry = next(r for r in json.loads(b.read_text())["results"] if r["task_id"] == lowest[0]["task_id"])
    dims = weak_entry["breakdown"]["dimensions"]
    assert lowest[0]["weakest_score"] == min(dims.values()) and dims[lowest[0]["weakest_dimension"]] == min(dims.values())


def test_compare_text_report(pair, capsys):
    from core.cli.main import main

    a, b, ids = pair
    assert main(["compare", str(a), str(b), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "mean reward" in out and "by dimension" in out and "by type" in out
    improved = out.split("improved most", 1)[1].split("regressed most", 1)[0]
    assert ids[0] in improved and ids[2] not in improved
    assert "lowest-scoring tasks in B" in out and "weakest: " in out
    assert "1 failed" in out.splitlines()[1]


def test_compare_rejects_files_that_are_not_results(tmp_path, capsys):
    from core.cli.main import main

    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    good = _write(tmp_path / "ok.json", {})
    assert main(["compare", str(bad), str(good)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: {bad}: not an eval results file (needs 'summary' and 'results'); "
                                               "pass an eval_results_<timestamp>.json file written by 'devops-rl eval'")
    assert main(["compare", str(tmp_path / "missing.json"), str(good)]) == 2
    assert "no such file" in capsys.readouterr().err
