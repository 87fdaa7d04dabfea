"""Task families (tasks/families, docs/families.md): the sampler is deterministic and stable, values stay in their
parameters' bounds, instances differ in values a correct answer must use, every family validates on a sample
(reference >= 0.7, every mutant <= 0.5), the CLI, and the learning bench's no-learning control."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import UserError
from tasks import TASK_TYPES
from tasks.families import Choice, Family, IntRange, draw, families, get_family, instances
from tasks.families.base import criterion, mutant
from tasks.families.validate import MUTANT_MAX, REFERENCE_MIN, distinct_prompts, validate_family

REPO = Path(__file__).resolve().parents[1]
ALL = families()


# ---- the sampler ------------------------------------------------------------------------------------------

def test_values_are_pinned_across_versions():
    """Fixed (family, seed, index) -> fixed values: these figures must never change (instances are data)."""
    assert draw("drill-k8s-pdb", 0, 0, "app") == 80714785807288366
    assert get_family("drill-k8s-pdb").sample(0, 0) == {"app": "media-api", "ns": "retail", "replicas": 5, "at_most": 1}
    assert get_family("drill-db-index").sample(1, 5) == {"table": "shipments", "column": "updated_at"}
    assert get_family("obs-service-alerts").sample(2, 17) == {
        "app": "reviews-svc", "pct": 7, "window": "1m", "quantile": "0.95", "ms": 700, "for": "10m"}


def test_a_value_depends_only_on_its_own_parameter():
    """Adding a parameter or calling in another order does not move the other values (no shared RNG state)."""
    def build(values):
        raise AssertionError("not built")

    small = Family("probe", "kubernetes", "easy", "", {"a": IntRange(0, 999)}, build)
    large = Family("probe", "kubernetes", "easy", "", {"z": Choice(("x", "y")), "a": IntRange(0, 999)}, build)
    for index in range(20):
        assert small.sample(3, index)["a"] == large.sample(3, index)["a"]
    forward = [small.sample(0, i) for i in range(10)]
    backward = [small.sample(0, i) for i in reversed(range(10))][::-1]
    assert forward == backward
    assert len({small.sample(0, i)["a"] for i in range(50)}) > 30  # and the index does move them


def test_instances_are_deterministic_tasks():
    first, again = get_family("drill-sec-netpol").instance(4, 9), get_family("drill-sec-netpol").instance(4, 9)
    assert first == again and first.to_dict() == again.to_dict()
    assert first.id == "fam-drill-sec-netpol-s4-9"
    assert get_family("drill-sec-netpol").instance(5, 9).desc != first.desc


@pytest.mark.parametrize("family", ALL, ids=lambda f: f.id)
def test_values_stay_in_their_bounds(family):
    for seed in (0, 7):
        for index in range(40):
            values = family.sample(seed, index)
            assert set(values) == set(family.params)
            for name, value in values.items():
                assert family.params[name].contains(value), (family.id, name, value)


def test_parameter_types_reject_bad_definitions_and_bad_input():
    with pytest.raises(ValueError):
        IntRange(5, 1)
    with pytest.raises(ValueError):
        IntRange(0, 10, 3)
    with pytest.raises(ValueError):
        Choice(("a", "a"))
    assert IntRange(10, 20, 5).size() == 3 and not IntRange(10, 20, 5).contains(12)
    with pytest.raises(UserError, match="seed and index must be >= 0"):
        get_family("drill-k8s-pdb").sample(-1, 0)
    with pytest.raises(UserError, match="did you mean 'drill-k8s-pdb'"):
        get_family("drill-k8s-pdx")


# ---- the catalogue ------------------------------------------------------------------------------------------

def test_catalogue_covers_every_type_with_enough_distinct_prompts():
    assert len(ALL) >= 40
    assert {f.type for f in ALL} == set(TASK_TYPES)
    assert len(families(drills_only=True)) >= 30
    counts = {f.id: distinct_prompts(f, 0, 100) for f in ALL}
    assert sum(counts.values()) >= 2000, counts
    assert min(counts.values()) >= 10, counts
    ids = [t.id for t in instances(per_family=3)]
    assert len(ids) == len(set(ids)) == 3 * len(ALL)


def _first_fully_different(family: Family) -> int:
    base = family.sample(0, 0)
    for index in range(1, 200):
        other = family.sample(0, index)
        if all(other[name] != base[name] for name in base if family.params[name].size() > 1):
            return index
    raise AssertionError(f"{family.id}: no instance differs from index 0 in every parameter")


@pytest.mark.parametrize("family", ALL, ids=lambda f: f.id)
def test_an_instance_is_checked_on_its_own_values(family):
    """Instance 0's reference answer fails another instance whose values all differ: the answer must use them."""
    from core.rewards import score

    mine, theirs = family.instance(0, 0), family.instance(0, _first_fully_different(family))
    assert mine.desc != theirs.desc
    assert score(mine.reference_answer, theirs, validators=False).final_reward <= MUTANT_MAX


@pytest.mark.parametrize("family", ALL, ids=lambda f: f.id)
def test_every_family_validates_on_a_sample(family):
    report = validate_family(family, seed=1, sample=2)
    assert report.ok, report.problems
    assert report.checked == 2 and report.reference_min >= REFERENCE_MIN and report.mutant_max <= MUTANT_MAX


def test_validation_finds_a_mutant_that_breaks_nothing_decisive():
    """A family whose mutant edits only a non-decisive value fails validation (the check can fail)."""
    from tasks.families import drills

    def build(values):
        body = drills.pdb(values)
        body["mutants"] = [*body["mutants"][:2], mutant("harmless", "Renames the budget, which decides nothing here.",
                                                        ("-pdb\n", "-budget\n"))]
        return body

    family = Family("probe-pdb", "kubernetes", "easy", "", get_family("drill-k8s-pdb").params, build)
    report = validate_family(family, sample=1, validators=False)
    assert not report.ok and any("mutant 'harmless' scores" in p for p in report.problems), report.problems


def test_validation_names_a_template_that_breaks_the_task_schema():
    def build(values):
        body = get_family("drill-k8s-pdb").build(values)
        body["rubric"] = [criterion("only", "A single criterion is not a rubric of four to ten.", {"yaml": "kind"})]
        return body

    family = Family("probe-bad", "kubernetes", "easy", "", {"x": IntRange(0, 1), **get_family("drill-k8s-pdb").params},
                    build)
    report = validate_family(family, sample=1, validators=False)
    assert not report.ok and any("rubric" in p for p in report.problems), report.problems


# ---- the CLI --------------------------------------------------------------------------------------------

def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.cli.main", "tasks", "families", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_cli_lists_shows_and_validates():
    import json

    listed = json.loads(cli("list", "--json", "--probe", "50").stdout)
    assert len(listed) == len(ALL) and all(row["distinct_prompts"] > 0 for row in listed)
    shown = json.loads(cli("show", "drill-k8s-pdb", "--seed", "0", "--index", "0", "--json").stdout)
    assert shown["values"] == {"app": "media-api", "ns": "retail", "replicas": 5, "at_most": 1}
    assert shown["id"] == "fam-drill-k8s-pdb-s0-0" and "media-api" in shown["reference_answer"]
    result = cli("validate", "drill-k8s-pdb", "drill-db-index", "--sample", "2")
    assert result.returncode == 0 and "ok: 2 families valid" in result.stdout, result.stderr


@pytest.mark.parametrize("args, message", [
    (("show", "drill-k8s-pdx"), "did you mean 'drill-k8s-pdb'"),
    (("show", "drill-k8s-pdb", "--index", "-1"), "--index -1 must be >= 0"),
    (("validate", "--sample", "0"), "--sample 0 must be >= 1"),
])
def test_cli_bad_input_is_one_error_line(args, message):
    result = cli(*args)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error:") and message in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


# ---- the learning bench's control -----------------------------------------------------------------------

def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.mark.slow
def test_learning_bench_control_leaves_the_weights_unchanged(tmp_path):
    """One GRPO step at the control's learning rate (1e-12) keeps every weight bit for bit; at 1e-3 they move
    (so the comparison can fail). Real `devops-rl train` runs on drills through the bench's own child hook."""
    import json

    import torch

    sys.path.insert(0, str(REPO / "bench"))
    import bench_learning

    task_dir = bench_learning.write_drills(tmp_path / "tasks", ("drill-k8s-scale",), 2).parent
    moved = {}
    for lr in (bench_learning.CONTROL_LR, 1e-3):
        run_dir = tmp_path / f"run-{lr:g}"
        args = bench_learning.train_args(run_dir, seed=0, lr=lr, steps=1, sft_steps=0, response=8, extra=(
            "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"))
        result = bench_learning.run_child(task_dir, args)
        assert result.returncode == 0, result.stderr[-2000:]
        checkpoint = run_dir / "checkpoints" / "global_step_1"
        base = Path(json.loads((checkpoint / "trainer_state.json").read_text())["base_model"])
        before, after = _weights(base), _weights(checkpoint)
        assert before.keys() == after.keys()
        moved[lr] = [name for name in before if not torch.equal(before[name], after[name])]
    assert moved[bench_learning.CONTROL_LR] == []
    assert moved[1e-3], "a real learning rate should change some weight"
