"""Curricula (`devops.curriculum`): stages of families, drills, hand-written tasks and task files, validated with
one-line errors, dealt by the torch loop stage by stage, recorded in the run folder and written for verl."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from core.errors import UserError
from core.training.config import load_config
from core.training.curriculum import STAGE_EVENT, STAGE_KEY, StagedPromptStream, planned_steps, training_stages
from tests.conftest import assert_user_error

REPO = Path(__file__).resolve().parents[1]
TWO_STAGES = ('devops.curriculum=[{steps: 2, mix: [{source: "families:drill-k8s-scale", instances: 3}]}, '
              '{mix: [{source: builtin}, {source: drills, weight: 2, instances: 1}]}]')


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.cli.main", *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"})


def test_without_a_curriculum_one_stage_deals_the_usual_training_split():
    from tasks.sources import config_split

    cfg = load_config("ci-fast")
    stages, val, _ = training_stages(cfg.devops)
    train, usual_val, _ = config_split(cfg.devops)
    assert len(stages) == 1 and stages[0].last is None and list(stages[0].tasks) == train and val == usual_val


def test_stages_mix_sources_with_weights_and_never_train_on_validation_tasks(tmp_path):
    import tasks

    own = tmp_path / "own.yaml"  # a task file that repeats the built-in tasks: its validation ones are dropped
    own.write_text(yaml.safe_dump([t.to_dict() for t in tasks.load_tasks()], sort_keys=False))
    cfg = load_config("ci-fast", None, [TWO_STAGES.replace("{source: builtin}", f"{{source: {own}}}")])
    stages, val, _ = training_stages(cfg.devops)
    first, second = stages
    assert (first.first, first.last, second.first, second.last) == (1, 2, 3, None)
    assert [t.id for t in first.tasks] == [f"fam-drill-k8s-scale-s0-{i}" for i in range(3)]
    held = {t.id for t in val}
    own_ids = [t.id for t in second.tasks if not t.id.startswith("fam-")]
    assert own_ids and not held & set(own_ids) and len(own_ids) == len(tasks.load_tasks()) - len(val)
    drills = [t.id for t in second.tasks if t.id.startswith("fam-")]
    assert len(drills) == 2 * 32 and len(set(drills)) == 32  # weight 2: each drill instance twice a pass
    assert second.label() == f"{own} + drills x2"
    assert planned_steps(cfg, stages) == 2 + len(second.tasks) // cfg.data.train_batch_size * cfg.trainer.total_epochs
    fixed = load_config("ci-fast", None, ['devops.curriculum=[{steps: 3, mix: [{source: drills}]}, '
                                          '{steps: 4, mix: [{source: builtin}]}]'])
    from core.training.config.validation import total_steps

    assert total_steps(fixed) == 7 == planned_steps(fixed, training_stages(fixed.devops)[0])


@pytest.mark.parametrize(("override", "fragments"), [
    ('devops.curriculum=[{mix: [{source: "families:drill-k8s-pbd"}]}]',
     ("devops.curriculum.0.mix.0.source", "did you mean 'drill-k8s-pdb'")),
    ("devops.curriculum=[{mix: [{source: drills}]}, {steps: 2, mix: [{source: drills}]}]",
     ("devops.curriculum", "only the last stage may run until the end")),
    ("devops.curriculum=[{steps: 2, mix: []}]", ("devops.curriculum.0.mix",)),
    ("devops.curriculum=[{steps: 2, mix: [{source: drills, wieght: 2}]}]", ("devops.curriculum.0.mix.0.wieght",)),
    ("devops.curriculum=[{steps: 0, mix: [{source: drills}]}]", ("devops.curriculum.0.steps",)),
])
def test_a_bad_curriculum_is_one_line_naming_the_key(override, fragments):
    with pytest.raises(UserError) as caught:
        load_config("ci-fast", None, [override])
    assert all(fragment in caught.value.message for fragment in fragments), caught.value.message


def test_train_refuses_a_missing_source_before_any_run_folder(tmp_path):
    result = cli("train", "--mode", "test", "--run-dir", str(tmp_path / "run"),
                 "--set", f"devops.curriculum=[{{mix: [{{source: {tmp_path / 'nope.yaml'}}}]}}]")
    assert_user_error(result, "devops.curriculum.0.mix.0.source", "no such task file or folder")
    assert not (tmp_path / "run").exists()


def test_the_stream_switches_stage_at_its_step_and_resumes_where_it_was():
    from core.training.batch import PromptStream

    cfg = load_config("ci-fast", None, [TWO_STAGES])
    stages, _, _ = training_stages(cfg.devops)
    records = [[{"id": t.id} for t in stage.tasks] for stage in stages]
    stream = StagedPromptStream(stages, records, shuffle=True, seed=7)
    plain = PromptStream(records[0], shuffle=True, seed=7)  # stage 0 deals exactly as a run without stages
    assert stream.at_step(1) is None and stream.take(4) == plain.take(4)
    assert stream.at_step(2) is None
    began = stream.at_step(3)
    assert began is stages[1] and stream.state() == {"stage": 1, "epoch": 0, "offset": 0}
    stream.take(5)
    saved = stream.state()
    again = StagedPromptStream(stages, records, shuffle=True, seed=7, **saved)
    assert again.at_step(4) is None and again.take(3) == stream.take(3)
    old = StagedPromptStream(stages, records, shuffle=True, seed=7, epoch=1, offset=2)  # a checkpoint without stage
    assert old.state() == {"stage": 0, "epoch": 1, "offset": 2}


def test_a_torch_run_trains_stage_by_stage_and_records_it(tmp_path):
    """A real `train --mode test` run of 4 steps: 2 on a family, then the built-in tasks and the drills."""
    run = tmp_path / "run"
    result = cli("train", "--mode", "test", "--run-dir", str(run), "--set", "trainer.total_training_steps=4",
                 "--set", TWO_STAGES, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    meta = json.loads((run / "meta.json").read_text())
    assert [(s["stage"], s["first_step"], s["last_step"]) for s in meta["curriculum"]] == [(1, 1, 2), (2, 3, None)]
    assert meta["curriculum"][1]["mix"] == [{"source": "builtin", "weight": 1, "tasks": 111},
                                            {"source": "drills", "weight": 2, "tasks": 32}]
    assert yaml.safe_load((run / "config.yaml").read_text())["devops"]["curriculum"][0]["steps"] == 2
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    stages = [(e["step"], e["stage"], e["of"], e["mix"]) for e in events if e["event"] == STAGE_EVENT]
    assert stages == [(1, 1, 2, "families:drill-k8s-scale"), (3, 2, 2, "builtin + drills x2")]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["data"][STAGE_KEY] for m in metrics] == [1.0, 1.0, 2.0, 2.0]
    samples = {json.loads(line)["step"]: {s["task_id"] for s in json.loads(line)["samples"]}
               for line in (run / "samples.jsonl").read_text().splitlines()}
    assert all(task_id.startswith("fam-drill-k8s-scale-") for step in (1, 2) for task_id in samples[step])
    assert "curriculum stage 2/2 from step 3: builtin + drills x2" in (run / "train.log").read_text()


def test_verl_parquet_holds_every_stage_in_order_and_grades_them(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from core.training.verl_backend.data import export_parquet

    cfg = load_config("ci-fast", None, [TWO_STAGES])
    stages, val, _ = training_stages(cfg.devops)
    paths = export_parquet(cfg, tmp_path / "data")
    train_ids = [r["extra_info"]["task_id"] for r in pq.read_table(paths["train"]).to_pylist()]
    assert train_ids == [t.id for stage in stages for t in stage.tasks]
    assert [r["extra_info"]["task_id"] for r in pq.read_table(paths["val"]).to_pylist()] == [t.id for t in val]
    assert set(train_ids) <= set(json.loads(paths["tasks"].read_text()))


async def test_the_cockpit_header_shows_the_active_stage(tmp_path):
    """The Live screen's header names the stage drawing the prompts and its mix, from the newest stage event."""
    from devops_tui.app import CockpitApp
    from tests.conftest import wait_for

    run = tmp_path / "runs" / "20261205-210000-ci-fast-stages"
    run.mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"run_id": run.name, "backend": "torch", "mode": "ci-fast",
                                               "status": "running", "pid": os.getpid(), "host": os.uname().nodename,
                                               "total_steps": 6}))
    events = [{"time": "2026-12-05T21:00:00+00:00", "event": STAGE_EVENT, "step": 1, "stage": 1, "of": 2,
               "mix": "drills", "tasks": 32},
              {"time": "2026-12-05T21:00:09+00:00", "event": STAGE_EVENT, "step": 4, "stage": 2, "of": 2,
               "mix": "drills + builtin x2", "tasks": 254}]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    rows = [{"step": s, "data": {"critic/score/mean": 0.1, STAGE_KEY: 1.0 + (s > 3)}} for s in range(1, 5)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    app = CockpitApp(runs_root=tmp_path / "runs", attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        title = app.screen.query_one("#live-title")
        await wait_for(pilot, lambda: "stage 2/2: drills + builtin x2" in str(title.render()), what="the header")
