"""Training config: presets export, validate and round-trip; overrides; verl pass-through; one line per bad config.

Bad-config cases run the real CLI in a subprocess and check exit code 2 and a single `error:` line naming the key.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import UserError
from core.training.config import (
    PRESETS,
    TrainingConfig,
    config_from_yaml,
    key_help,
    load_config,
    native_ignored_settings,
    parse_override,
    validate,
    verl_key_tree,
)

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "core.cli.main", *args], cwd=cwd or REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


# ---- presets --------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_exports_valid_yaml_that_loads_back_equal(preset, tmp_path):
    out = tmp_path / f"{preset}.yaml"
    result = cli("config", "export", "--preset", preset, "-o", str(out))
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert "warning" not in text  # every preset is valid as shipped
    exported = load_config("default", config_file=out)  # what `train --config FILE` does
    assert exported == load_config(preset)
    assert config_from_yaml(load_config(preset).to_yaml()) == load_config(preset)
    assert validate(exported) == []


def test_presets_carry_the_design_values():
    default, ci, single = load_config("default"), load_config("ci-fast"), load_config("single-gpu")
    arr = default.actor_rollout_ref
    assert arr.model.path == "Qwen/Qwen2.5-7B-Instruct"
    assert (default.data.train_batch_size, arr.rollout.n, arr.actor.optim.lr) == (16, 4, 1e-6)
    assert (arr.actor.clip_ratio_low, arr.actor.clip_ratio_high, arr.rollout.gpu_memory_utilization) == (0.2, 0.3, 0.6)
    assert arr.actor.fsdp_config.param_offload and arr.actor.fsdp_config.optimizer_offload
    assert (default.trainer.total_epochs, default.trainer.save_freq, default.trainer.test_freq) == (100, 50, 10)
    assert (ci.trainer.total_epochs, ci.data.train_batch_size, ci.actor_rollout_ref.rollout.gpu_memory_utilization) == (1, 4, 0.4)
    assert ci.actor_rollout_ref.model.path == "builtin:tiny"
    # the design's ci-fast mini-batch of 16 with a batch of 4 is invalid in verl: the preset fixes it
    assert ci.actor_rollout_ref.actor.ppo_mini_batch_size <= ci.data.train_batch_size
    sa = single.actor_rollout_ref
    assert (single.data.train_batch_size, sa.actor.ppo_mini_batch_size, sa.actor.ppo_micro_batch_size_per_gpu,
            sa.rollout.gpu_memory_utilization) == (4, 4, 1, 0.4)


def test_design_ci_fast_table_is_rejected_like_verl_would():
    cfg = load_config("ci-fast", overrides=["actor_rollout_ref.actor.ppo_mini_batch_size=16"])
    [problem] = validate(cfg)
    assert problem.startswith("actor_rollout_ref.actor.ppo_mini_batch_size: 16: larger than data.train_batch_size (4)")


# ---- precedence and overrides --------------------------------------------------------------------


def test_precedence_preset_then_file_then_set(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("data:\n  train_batch_size: 8\n  max_response_length: 100\n")
    cfg = load_config("single-gpu", config_file=path, overrides=["data.max_response_length=200"])
    assert cfg.data.train_batch_size == 8  # file over preset
    assert cfg.data.max_response_length == 200  # --set over file
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 1  # preset value kept


@pytest.mark.parametrize(("text", "expected"), [
    ("a.b=16", 16), ("a.b=1e-6", 1e-6), ("a.b=2.5", 2.5), ("a.b=true", True), ("a.b=null", None),
    ("a.b=[console, file]", ["console", "file"]), ("a.b=builtin:tiny", "builtin:tiny"),
    ("a.b=Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B"),
])
def test_set_values_are_typed_like_yaml(text, expected):
    assert parse_override(text) == ("a.b", expected)


def test_set_reaches_the_model_with_types():
    cfg = load_config(overrides=["actor_rollout_ref.actor.optim.lr=3e-6", "trainer.logger=console",
                                 "trainer.experiment_name=123", "devops.reward_weights.kubernetes.security=2"])
    assert cfg.actor_rollout_ref.actor.optim.lr == 3e-6
    assert cfg.trainer.logger == ["console"]
    assert cfg.trainer.experiment_name == "123"
    assert cfg.devops.reward_weights == {"kubernetes": {"security": 2.0}}


@pytest.mark.skipif(verl_key_tree() is None, reason="verl not installed")
def test_keys_verl_knows_pass_through_and_round_trip(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("actor_rollout_ref:\n  actor:\n    use_dynamic_bsz: true\n    ppo_max_token_len_per_gpu: 8192\n"
                    "critic:\n  cliprange_value: 0.3\n")
    cfg = load_config(config_file=path, overrides=["actor_rollout_ref.rollout.max_num_seqs=64"])
    assert cfg.verl_overrides == {
        "actor_rollout_ref.actor.use_dynamic_bsz": True,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 8192,
        "critic.cliprange_value": 0.3,
        "actor_rollout_ref.rollout.max_num_seqs": 64,
    }
    assert config_from_yaml(cfg.to_yaml()) == cfg
    ignored = native_ignored_settings(cfg)
    assert "critic.cliprange_value=0.3 (verl only)" in ignored


@pytest.mark.skipif(verl_key_tree() is None, reason="verl not installed")
def test_dynamic_batch_size_skips_the_batch_arithmetic_like_verl():
    bad_mini = ["actor_rollout_ref.actor.ppo_mini_batch_size=64"]
    assert validate(load_config(overrides=bad_mini)) != []
    assert validate(load_config(overrides=[*bad_mini, "actor_rollout_ref.actor.use_dynamic_bsz=true"])) == []


def test_native_ignored_settings_lists_verl_only_changes():
    assert native_ignored_settings(load_config("default")) == []
    ignored = native_ignored_settings(load_config(overrides=["actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
                                                             "actor_rollout_ref.actor.optim.lr=2e-6"]))
    assert ignored == ["actor_rollout_ref.rollout.gpu_memory_utilization=0.5"]


def test_unknown_key_error_names_file_line_and_suggestion(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("data:\n  train_batch_size: 8\nactor_rollout_ref:\n  actor:\n    clip_ratio_hgh: 0.28\n")
    with pytest.raises(UserError) as info:
        load_config(config_file=path)
    assert str(info.value) == (f"{path}:5: actor_rollout_ref.actor.clip_ratio_hgh: unknown key under "
                               "actor_rollout_ref.actor; did you mean 'clip_ratio_high'?")


# ---- bad configs through the CLI: exit 2, one line ---------------------------------------------

BAD_FILES = {
    "unknown_key": ("data:\n  train_bach_size: 8\n",
                    "c.yaml:2: data.train_bach_size: unknown key under data; did you mean 'train_batch_size'?"),
    "unknown_section": ("algoritm:\n  adv_estimator: grpo\n", "c.yaml:1: algoritm: unknown key; did you mean 'algorithm'?"),
    "bad_type": ("data:\n  train_batch_size: lots\n", "c.yaml:2: data.train_batch_size: 'lots': Input should be a valid integer"),
    "bad_choice": ("algorithm:\n  adv_estimator: grop\n",
                   "c.yaml:2: algorithm.adv_estimator: 'grop': unknown advantage estimator; did you mean 'grpo'?"),
    "negative_batch": ("data:\n  train_batch_size: -4\n", "c.yaml:2: data.train_batch_size: -4: Input should be greater than 0"),
    "yaml_syntax": ("data:\n  train_batch_size: [8\n", "c.yaml:3: YAML syntax error"),
    "duplicate_key": ("data:\n  train_batch_size: 8\n  shuffle: true\n  train_batch_size: 4\n",
                      "c.yaml:4: data.train_batch_size: written twice in the same mapping"),
    "not_a_mapping": ("- 1\n- 2\n", "c.yaml: a config must be a YAML mapping"),
    "mini_over_batch": ("data:\n  train_batch_size: 4\nactor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 16\n",
                        "c.yaml:5: actor_rollout_ref.actor.ppo_mini_batch_size: 16: larger than data.train_batch_size (4); "
                        "set it <= 4"),
    "micro_over_mini": ("actor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 2\n    ppo_micro_batch_size_per_gpu: 16\n",
                        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu: 16: larger than the mini-batch per GPU (8"),
    "n_one_grpo": ("actor_rollout_ref:\n  rollout:\n    n: 1\n",
                   "c.yaml:3: actor_rollout_ref.rollout.n: 1: grpo compares the responses"),
    "clip_low": ("actor_rollout_ref:\n  actor:\n    clip_ratio_low: 1.5\n",
                 "actor_rollout_ref.actor.clip_ratio_low: 1.5: must be in (0, 1)"),
    "lr_zero": ("actor_rollout_ref:\n  actor:\n    optim:\n      lr: 0\n", "actor_rollout_ref.actor.optim.lr: 0.0: must be > 0"),
    "gpus_divide": ("data:\n  train_batch_size: 3\nactor_rollout_ref:\n  rollout:\n    n: 3\n"
                    "  actor:\n    ppo_mini_batch_size: 3\n    ppo_micro_batch_size_per_gpu: 1\ntrainer:\n  n_gpus_per_node: 2\n",
                    "data.train_batch_size: 3: train_batch_size x rollout.n = 9 is not divisible by the 2 GPUs"),
    "save_freq": ("trainer:\n  total_training_steps: 20\n  save_freq: 50\n  test_freq: 5\n",
                  "trainer.save_freq: 50: larger than the run's 20 total steps"),
    "context": ("data:\n  max_prompt_length: 30000\n  max_response_length: 4096\n",
                "data.max_response_length: 4096: max_prompt_length + max_response_length = 34096 "
                "exceeds the model's context of 32768"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_config_gives_one_clear_line_and_exit_2(case, tmp_path):
    text, expected = BAD_FILES[case]
    (tmp_path / "c.yaml").write_text(text)
    result = cli("config", "validate", "c.yaml", cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = error_lines(result)
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert "Traceback" not in result.stderr


def test_bad_set_and_missing_file_and_preset_through_cli(tmp_path):
    result = cli("config", "show", "--set", "actor_rollout_ref.rollout.temprature=0.7")
    assert result.returncode == 2
    assert error_lines(result) == ["error: --set actor_rollout_ref.rollout.temprature=0.7: actor_rollout_ref.rollout.temprature: "
                                   "unknown key under actor_rollout_ref.rollout; did you mean 'temperature'?"]
    result = cli("config", "validate", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2 and "no such config file" in error_lines(result)[0]
    result = cli("config", "show", "--preset", "ci_fast")
    assert result.returncode == 2 and "did you mean 'ci-fast'?" in error_lines(result)[0]
    result = cli("config", "show", "--set", "novalue")
    assert result.returncode == 2 and "expected KEY=VALUE" in error_lines(result)[0]


def test_config_diff_and_show_through_cli(tmp_path):
    result = cli("config", "diff", "default", "ci-fast")
    assert result.returncode == 0, result.stderr
    assert any(line.startswith("data.train_batch_size") and "16  ->  4" in line for line in result.stdout.splitlines())
    assert "trainer.save_freq" in result.stdout and "algorithm.adv_estimator" not in result.stdout
    result = cli("config", "show", "--preset", "single-gpu", "--set", "data.max_response_length=512")
    shown = yaml.safe_load(result.stdout)
    assert shown["data"]["max_response_length"] == 512
    assert TrainingConfig.model_validate(shown).actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 1


def test_unknown_top_level_key_without_verl_suggests_our_keys(monkeypatch):
    import core.training.config.loading as config

    monkeypatch.setattr(config, "verl_key_tree", lambda: None)
    with pytest.raises(UserError, match=r"devops\.bakend: unknown key under devops; did you mean 'backend'\?"):
        load_config(overrides=["devops.bakend=torch"])
    cfg = load_config(overrides=["actor_rollout_ref.actor.use_dynamic_bsz=true"])  # cannot check: passed through
    assert cfg.verl_overrides == {"actor_rollout_ref.actor.use_dynamic_bsz": True}


def _doc_rows() -> dict[str, tuple[str, str]]:
    """docs/config.md's key tables: dotted key -> (meaning, watch / tune), backticks dropped."""
    text = (REPO / "docs" / "config.md").read_text()
    rows: dict[str, tuple[str, str]] = {}
    for part in text.split("\n### `")[1:]:
        section = part.split("`", 1)[0]
        for line in part.splitlines():
            cells = [c.strip().replace("`", "") for c in line.strip().strip("|").split(" | ")]
            if line.startswith("| `") and len(cells) == 4:
                rows[f"{section}.{cells[0]}"] = (cells[2], cells[3])
    return rows


def test_every_key_is_documented_with_the_models_own_help():
    """docs/config.md has a row for every setting under its section's heading, and its meaning and tuning
    cells are the model's `Field(description=...)` and tune advice word for word (drift check)."""
    rows = _doc_rows()
    drift = []
    for key in TrainingConfig().flat():
        if key == "verl_overrides" or key.startswith("verl_overrides."):
            continue
        help_ = key_help(key)
        assert help_ is not None and help_.meaning, f"{key} has no description in the model"
        if rows.get(key) != (help_.meaning, help_.tune):
            drift.append((key, rows.get(key), (help_.meaning, help_.tune)))
    assert drift == []


def test_config_show_describe_reads_each_keys_help_from_the_model():
    result = cli("config", "show", "--flat", "--describe")
    assert result.returncode == 0, result.stderr
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("data.train_batch_size:"))
    assert line == f"data.train_batch_size: 16  # {key_help('data.train_batch_size').meaning}"
    described = cli("config", "show", "--preset", "ci-fast", "--describe").stdout
    assert f"    # {key_help('actor_rollout_ref.rollout.n').meaning}\n    n: 4\n" in described
    assert config_from_yaml(described) == load_config("ci-fast")  # the comments keep it a valid config file
    assert key_help("verl_overrides.actor_rollout_ref.actor.use_dynamic_bsz").meaning.startswith("verl keys")
    assert key_help("data.no_such_key") is None and key_help("data.train_batch_size.deeper") is None
    assert key_help("data.train_batch_size").kind == "type int, > 0, <= 1048576"


@pytest.mark.skipif(verl_key_tree() is None, reason="verl not installed")
def test_every_verl_section_key_of_the_model_exists_in_installed_verl():
    """Our keys are verl's keys: the verl backend hands them over unchanged (`devops` is ours alone)."""
    tree = verl_key_tree()
    missing = []
    for key in TrainingConfig().flat():
        if key.startswith("devops."):
            continue
        node = tree
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                missing.append(key)
                break
            node = node[part]
    assert missing == []


@settings(max_examples=60, deadline=None)
@given(lr=st.floats(min_value=1e-12, max_value=1.0, allow_nan=False),
       batch=st.integers(min_value=1, max_value=10_000),
       name=st.text(min_size=1, max_size=30).filter(lambda t: "\x00" not in t),
       logger=st.lists(st.sampled_from(["console", "file", "wandb", "tensorboard"]), max_size=3))
def test_yaml_round_trip_keeps_every_value(lr, batch, name, logger):
    cfg = TrainingConfig()
    cfg.actor_rollout_ref.actor.optim.lr = lr
    cfg.data.train_batch_size = batch
    cfg.trainer.experiment_name = name
    cfg.trainer.logger = logger
    assert config_from_yaml(cfg.to_yaml()) == cfg
