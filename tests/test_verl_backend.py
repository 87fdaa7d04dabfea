"""The verl backend on CPU: verl's own config composition and validate_config, parquet rows read by verl's
RLHFDataset, the reward adapter run by verl's own reward manager, and the per-dimension metrics extension.

What needs a GPU (vLLM rollouts, FSDP, Ray workers) is not run here; see docs/gpu.md and scripts/gpu_smoke.sh.
Just over 450 lines: every test composes through the one cached verl config builder at the top.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PRESETS = ("default", "ci-fast", "single-gpu")


@functools.lru_cache(maxsize=1)
def _ci_fast():
    """The ci-fast preset composed once for the tests that only read it (composing costs about a second)."""
    return _compose("ci-fast")


def _compose(preset="ci-fast", overrides=(), **kwargs):
    from core.training.config import load_config
    from core.training.verl_backend.compose import compose_verl_config

    return compose_verl_config(load_config(preset, overrides=list(overrides)), **kwargs)


# ---- config --------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_composes_and_passes_verl_validate_config(preset, capsys):
    from core.cli.main import main
    from core.training.config import load_config

    assert main(["config", "verl", "--preset", preset]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# verl ppo_trainer config for preset " + preset)
    composed = yaml.safe_load(out)
    ours = load_config(preset)
    # Our values reach verl under verl's own names...
    assert composed["data"]["train_batch_size"] == ours.data.train_batch_size
    assert composed["actor_rollout_ref"]["rollout"]["n"] == ours.actor_rollout_ref.rollout.n
    assert composed["actor_rollout_ref"]["rollout"]["name"] == ours.actor_rollout_ref.rollout.name
    assert composed["actor_rollout_ref"]["actor"]["optim"]["lr"] == ours.actor_rollout_ref.actor.optim.lr
    assert composed["algorithm"]["adv_estimator"] == "grpo"
    assert composed["trainer"]["n_gpus_per_node"] == ours.trainer.n_gpus_per_node
    # ...verl's mandatory keys are filled (rollout.name is `???` in verl's own YAML)...
    assert composed["actor_rollout_ref"]["rollout"]["log_prob_micro_batch_size_per_gpu"] >= 1
    assert composed["actor_rollout_ref"]["rollout"]["prompt_length"] == ours.data.max_prompt_length
    # ...and the project's wiring is in place: our reward by module, verl's own sync mode, verl's file logger.
    reward_fn = composed["reward"]["custom_reward_function"]
    assert reward_fn == {**reward_fn, "path": "pkg://core.training.verl_backend.reward_fn", "name": "compute_score"}
    assert composed["trainer"]["v1"]["trainer_mode"] == "sync"
    assert "file" in composed["trainer"]["logger"]
    env = composed["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert "VERL_USE_EXTERNAL_MODULES" not in env  # it cost every Ray process seconds of imports
    assert env["DEVOPS_RL_STARTUP_FILE"].endswith("verl/startup.jsonl")
    assert composed["data"]["train_files"].endswith("data/train.parquet")


def test_the_test_mode_composes_for_verl():
    """`devops-rl train --mode test --backend verl`: the other modes are the presets above."""
    from core.training.train import MODE_PRESETS, config_for_mode
    from core.training.verl_backend.compose import compose_verl_config

    assert set(MODE_PRESETS.values()) <= set(PRESETS)
    composed = compose_verl_config(config_for_mode("test"))
    assert composed.trainer.total_training_steps == 1 and composed.actor_rollout_ref.rollout.n == 2
    assert composed.trainer.v1.trainer_mode == "sync"


def test_builtin_tiny_becomes_its_local_folder():
    assert (Path(_ci_fast().actor_rollout_ref.model.path) / "config.json").is_file()


def test_set_overrides_and_verl_pass_through_keys_reach_verl():
    composed = _compose("ci-fast", [
        "data.train_batch_size=8",
        "devops.n_runners=3",
        "verl_overrides.trainer.balance_batch=false",
        "verl_overrides.actor_rollout_ref.rollout.val_kwargs.n=2",
    ], run_path=Path("/tmp/run-x"), resume=True, ray_address="10.1.2.3:6379")
    assert composed.data.train_batch_size == 8
    assert composed.actor_rollout_ref.rollout.agent.num_workers == 3 and composed.reward.num_workers == 3
    assert composed.trainer.balance_batch is False
    assert composed.actor_rollout_ref.rollout.val_kwargs.n == 2
    assert composed.data.train_files == "/tmp/run-x/data/train.parquet"
    assert composed.trainer.default_local_dir == "/tmp/run-x/checkpoints"
    assert composed.trainer.resume_mode == "auto"
    assert composed.ray_kwargs.ray_init.address == "10.1.2.3:6379"
    env = composed.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_FILE_LOGGER_PATH == "/tmp/run-x/verl/metrics.jsonl"


def test_a_trainer_mode_chosen_in_verl_overrides_reaches_verl_under_its_own_name():
    """verl branches on its literal mode names ("sync" picks the sync replay buffer, batch sizes, refill)."""
    composed = _compose("ci-fast", ["verl_overrides.trainer.v1.trainer_mode=colocate_async"])
    assert composed.trainer.v1.trainer_mode == "colocate_async"


def test_run_paths_are_absolute_so_verl_workers_find_them_from_any_working_directory(tmp_path, monkeypatch):
    from verl.utils.import_utils import load_extern_object

    from core.training.verl_backend.reward_fn import compute_score

    monkeypatch.chdir(tmp_path)
    composed = _compose("ci-fast", run_path=Path("runs") / "r1")
    run = tmp_path / "runs" / "r1"
    env = composed.ray_kwargs.ray_init.runtime_env.env_vars
    assert composed.data.train_files == str(run / "data" / "train.parquet")
    assert composed.data.val_files == str(run / "data" / "val.parquet")
    assert composed.trainer.default_local_dir == str(run / "checkpoints")
    assert composed.trainer.rollout_data_dir == str(run / "verl" / "rollouts")
    assert env.VERL_FILE_LOGGER_PATH == str(run / "verl" / "metrics.jsonl")
    assert env.DEVOPS_RL_STARTUP_FILE == str(run / "verl" / "startup.jsonl")
    mine = _compose("ci-fast", ["trainer.default_local_dir=ckpts"], run_path=Path("runs") / "r1")
    assert mine.trainer.default_local_dir == str(tmp_path / "ckpts")
    # The reward is imported by module name (verl's own loader), not from a path on the driver's disk.
    reward = composed.reward.custom_reward_function
    assert load_extern_object(reward.path, reward.name) is compute_score


def test_grad_clip_reaches_the_key_verl_reads():
    """verl 0.9.1's FSDP engine clips with actor.optim.clip_grad; actor.grad_clip is only kept in its YAML."""
    from verl.utils.config import omega_conf_to_dataclass

    composed = _compose("ci-fast", ["actor_rollout_ref.actor.grad_clip=0.25"])
    actor = omega_conf_to_dataclass(composed.actor_rollout_ref.actor)  # what verl's actor worker builds
    assert actor.optim.clip_grad == 0.25


@pytest.mark.parametrize(("overrides", "message"), [
    (["data.truncation=right"], "data.truncation: right: verl 0.9.1's agent loop always cuts long prompts from the left"),
    (["data.truncation=middle"], "data.truncation: middle: "),
    (["algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=3"],
     "algorithm.filter_groups.max_num_gen_batches: 3: verl 0.9.1's trainer ignores it; set it to 0 and bound "
     "generation with verl_overrides.algorithm.filter_groups.max_inflight_gen_batches"),
])
def test_settings_verl_would_ignore_are_refused_in_one_line(overrides, message):
    from core.errors import UserError

    with pytest.raises(UserError) as info:
        _compose("ci-fast", overrides)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_without_flash_attn_verl_loads_the_actor_with_sdpa():
    """verl's default attention is flash_attention_2, which needs the flash-attn package (not in the gpu extra)."""
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM
    from verl.utils.config import omega_conf_to_dataclass

    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed here")
    composed = _ci_fast()
    section = composed.actor_rollout_ref
    assert section.model.override_config.attn_implementation == "sdpa"
    assert not section.model.use_remove_padding and not section.actor.use_remove_padding
    # verl's actor worker builds its model config from this section and loads the weights with it.
    model_config = omega_conf_to_dataclass(section.model)
    model = AutoModelForCausalLM.from_pretrained(model_config.local_path, config=model_config.hf_config)
    assert model.config._attn_implementation == "sdpa"
    unset = {**OmegaConf.to_container(section.model), "override_config": {}}  # verl's own default
    verl_default = omega_conf_to_dataclass(OmegaConf.create(unset), dataclass_type=type(model_config))
    with pytest.raises(ImportError, match="FlashAttention2"):
        AutoModelForCausalLM.from_pretrained(verl_default.local_path, config=verl_default.hf_config)


def test_with_flash_attn_installed_verl_keeps_its_padding_free_path(monkeypatch):
    from core.training.verl_backend import detect

    monkeypatch.setattr(detect, "_installed", lambda module: True)
    section = _compose("ci-fast").actor_rollout_ref
    assert section.model.override_config.attn_implementation == "flash_attention_2"
    assert section.model.use_remove_padding and section.actor.use_remove_padding


def test_a_fresh_run_never_resumes_someone_elses_checkpoints():
    assert _ci_fast().trainer.resume_mode == "disable"


def test_verl_rejection_is_one_line_naming_the_problem():
    from core.errors import UserError

    with pytest.raises(UserError) as info:
        _compose("default", ["verl_overrides.actor_rollout_ref.actor.ppo_micro_batch_size=2"])
    message = str(info.value)
    assert message.startswith("verl rejected the config: ")
    assert "ppo_micro_batch_size" in message and "\n" not in message


def test_config_verl_cli_exit_2_with_one_error_line_when_verl_rejects(capsys):
    from core.cli.main import main

    code = main(["config", "verl", "--preset", "default",
                 "--set", "verl_overrides.actor_rollout_ref.rollout.log_prob_micro_batch_size=2"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = [ln for ln in captured.err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "log_prob_micro_batch_size" in lines[0] and "verl rejected" in lines[0]


def test_config_verl_refuses_what_train_refuses_with_the_same_line(tmp_path, capsys):
    """`config verl` prints what verl would receive from `train`: a setting `train` refuses is refused first."""
    from tests.conftest import assert_user_error, cli_in_process

    bad = ["--set", "actor_rollout_ref.rollout.n=1"]
    shown = cli_in_process(capsys, "config", "verl", "--preset", "ci-fast", *bad)
    line = assert_user_error(shown, "actor_rollout_ref.rollout.n: 1")
    assert shown.stdout == ""  # no GRPO config with one response per prompt
    trained = cli_in_process(capsys, "train", "--mode", "ci-fast", "--backend", "verl", "--run-dir", str(tmp_path / "r"), *bad)
    assert assert_user_error(trained) == line and not (tmp_path / "r").exists()


# ---- data ----------------------------------------------------------------------------------------


def test_parquet_export_loads_with_verls_own_dataset_and_the_tiny_tokenizer(tmp_path):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from core.training.config import load_config
    from core.training.tiny_model import ensure_tiny_model
    from core.training.verl_backend.data import export_parquet
    from core.training.verl_backend.reward_fn import compute_score, grading_inputs
    from tasks import load_tasks
    from tasks.prompt import system_prompt
    from tasks.sources import config_split

    cfg = load_config("ci-fast")
    paths = export_parquet(cfg, tmp_path / "data")
    assert set(json.loads(paths["tasks"].read_text())) == {t.id for t in load_tasks()}  # each task once
    train_tasks, val_tasks, _ = config_split(cfg.devops)  # the split training makes (near-duplicates on one side)
    tokenizer = AutoTokenizer.from_pretrained(ensure_tiny_model())
    # The same data settings verl's trainer passes (composed config's `data` section).
    data_cfg = OmegaConf.create(OmegaConf.to_container(_ci_fast().data, resolve=True))
    data_cfg.update(cache_dir=str(tmp_path / "cache"), filter_overlong_prompts=False)
    for split, expected in (("train", train_tasks), ("val", val_tasks)):
        dataset = RLHFDataset(data_files=[str(paths[split])], tokenizer=tokenizer, config=data_cfg)
        assert len(dataset) == len(expected)
        ids = []
        for i in range(len(dataset)):
            row = dataset[i]
            info = row["extra_info"]
            assert info["split"] == split and info["index"] == i
            task = expected[i]
            assert (info["task_id"], info["type"], info["difficulty"]) == (task.id, task.type, task.difficulty)
            assert row["data_source"] == f"devops/{task.type}" and row["ability"] == task.type
            assert row["raw_prompt"][0] == {"role": "system", "content": system_prompt()}
            assert row["raw_prompt"][1] == {"role": "user", "content": task.desc}
            truth = row["reward_model"]["ground_truth"]
            assert row["reward_model"]["style"] == "rule"
            # verl copies ground_truth into every rollout-dump row: it names the task, stored once in tasks.json
            assert len(truth) < 300 and json.loads(truth) == {"task_id": task.id, "tasks_file": str(paths["tasks"])}
            graded, _ = grading_inputs(truth, None)
            assert graded["id"] == task.id and graded["expected_outputs"] == list(task.expected_outputs)
            answer = task.reference_answer or task.desc
            assert compute_score("d", answer, truth) == compute_score("d", answer, json.dumps(
                {"task": task.to_dict(), "reward_weights": {}}))  # the same grade as the task inline
            ids.append(info["task_id"])
        text = tokenizer.apply_chat_template(dataset[0]["raw_prompt"], add_generation_prompt=True, tokenize=False)
        assert text.endswith("<|im_start|>assistant\n") and expected[0].desc in text
    train_ids = {t.id for t in train_tasks}
    assert not train_ids & {t.id for t in val_tasks}


def _tiny_tokenizer():
    from transformers import AutoTokenizer

    from core.training.tiny_model import ensure_tiny_model

    return AutoTokenizer.from_pretrained(ensure_tiny_model())


@pytest.mark.parametrize("preset", PRESETS)
def test_no_preset_cuts_a_prompt(preset):
    """Every task's prompt (system prompt + task, chat template) fits data.max_prompt_length whole: a cut
    prompt loses its system prompt first (verl cuts from the left)."""
    from core.training.config import load_config
    from core.training.verl_backend.data import prompt_token_lengths, split_rows

    cfg = load_config(preset)
    rows = [row for split in split_rows(cfg).values() for row in split]
    tokenizer = _tiny_tokenizer()
    if cfg.actor_rollout_ref.model.path == "builtin:tiny":  # the preset's own tokenizer: measured exactly
        longest = max(prompt_token_lengths(rows, tokenizer))
    else:  # a byte-level BPE (Qwen's) never makes more tokens than the text has bytes
        longest = max(len(tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True,
                                                        tokenize=False).encode("utf-8")) for row in rows)
    assert longest <= cfg.data.max_prompt_length, f"{preset}: a {longest}-token prompt is cut"


def test_truncation_error_stops_a_run_whose_longest_prompt_does_not_fit():
    from core.errors import UserError
    from core.training.config import load_config
    from core.training.verl_backend.data import check_prompt_fit, prompt_token_lengths, split_rows

    cfg = load_config("ci-fast", overrides=["data.truncation=error"])
    rows = [row for split in split_rows(cfg).values() for row in split]
    longest = max(prompt_token_lengths(rows, _tiny_tokenizer()))
    check_prompt_fit(load_config("ci-fast", overrides=["data.truncation=error", f"data.max_prompt_length={longest}"]))
    too_short = load_config("ci-fast", overrides=["data.truncation=error", f"data.max_prompt_length={longest - 1}"])
    with pytest.raises(UserError, match=rf"data.max_prompt_length: {longest - 1}: task '.+' has a {longest}-token "
                                        rf"prompt .* raise data.max_prompt_length to {longest} or more"):
        check_prompt_fit(too_short)
    check_prompt_fit(load_config("ci-fast", overrides=["data.max_prompt_length=8"]))  # truncation: left, verl's way


def test_no_validation_tasks_is_a_clear_error(tmp_path):
    from core.errors import UserError
    from core.training.config import load_config
    from core.training.verl_backend.data import export_parquet

    with pytest.raises(UserError, match="devops.val_fraction"):
        export_parquet(load_config("ci-fast", overrides=["devops.val_fraction=0"]), tmp_path)


# ---- reward --------------------------------------------------------------------------------------


def _good_and_bad_answers():
    from tasks import load_tasks

    task = next(t for t in load_tasks() if t.reference_answer)
    return task, task.reference_answer, "ok"


def test_reward_adapter_returns_score_and_every_dimension_and_penalty():
    from core.rewards import DIMENSIONS, PENALTIES, score
    from core.training.verl_backend.data import task_row
    from core.training.verl_backend.reward_fn import compute_score

    task, good, bad = _good_and_bad_answers()
    row = task_row(task, 0, "train", "system")
    result = compute_score(row["data_source"], good, row["reward_model"]["ground_truth"], row["extra_info"])
    assert set(result) == {"score", *DIMENSIONS, *PENALTIES, "rubric", "rubric_criteria", "rubric_passed"}
    assert all(isinstance(v, float) for v in result.values())
    expected = score(good, task)
    assert result["score"] == pytest.approx(expected.final_reward)
    assert {d: result[d] for d in DIMENSIONS} == pytest.approx(expected.dimensions)
    weak = compute_score(row["data_source"], bad, row["reward_model"]["ground_truth"], row["extra_info"])
    assert weak["score"] < result["score"]


def test_reward_weights_from_the_config_change_the_score():
    from core.rewards import DIMENSIONS
    from core.training.verl_backend.data import task_row
    from core.training.verl_backend.reward_fn import compute_score

    task, good, _ = _good_and_bad_answers()

    def scored(weights):
        return compute_score("d", good, task_row(task, 0, "train", "s", weights)["reward_model"]["ground_truth"])

    plain = scored(None)
    weakest, strongest = min(DIMENSIONS, key=plain.get), max(DIMENSIONS, key=plain.get)
    assert plain[weakest] < plain[strongest]
    # Weighting the answer's weakest dimension up must cost more than weighting its strongest up.
    assert scored({weakest: 10.0})["score"] < scored({strongest: 10.0})["score"]


def test_verls_own_reward_manager_runs_the_adapter_from_the_composed_config():
    """verl loads compute_score by file path and returns reward_score + reward_extra_info from it."""
    import numpy as np
    import torch
    from tensordict import TensorDict
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager

    from core.rewards import DIMENSIONS, PENALTIES
    from core.training.verl_backend.data import task_row
    from core.training.verl_backend.reward_fn import compute_score

    config = _ci_fast()
    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
    manager = load_reward_manager(config, tokenizer)
    task, good, _ = _good_and_bad_answers()
    row = task_row(task, 3, "train", "system")
    prompt = tokenizer("a prompt", return_tensors="pt")["input_ids"]
    response = tokenizer(good, return_tensors="pt")["input_ids"][:, :512]
    data = DataProto(
        batch=TensorDict({"prompts": prompt, "responses": response,
                          "attention_mask": torch.ones(1, prompt.shape[1] + response.shape[1], dtype=torch.int64)},
                         batch_size=1),
        non_tensor_batch={key: np.array([row[key]], dtype=object)
                          for key in ("data_source", "reward_model", "extra_info")},
    )
    out = manager.loop.run_until_complete(manager.run_single(data))
    decoded = tokenizer.decode(response[0], skip_special_tokens=True)
    direct = compute_score(row["data_source"], decoded, row["reward_model"]["ground_truth"], row["extra_info"])
    assert out["reward_score"] == pytest.approx(direct["score"])
    assert set(out["reward_extra_info"]) == {"score", *DIMENSIONS, *PENALTIES, "rubric", "rubric_criteria", "rubric_passed"}


# ---- per-dimension metrics: the trainer subclass and the TaskRunner that swaps it in --------------------


def test_every_verl_trainer_mode_gets_the_reward_dimension_subclass_and_verls_registry_is_untouched():
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    from core.training.verl_backend.extension import RewardDimensionMetrics, with_reward_dimensions

    before = dict(TRAINER_REGISTRY)
    assert {"sync", "colocate_async"} <= set(before)
    for _mode, verl_cls in before.items():
        ours = with_reward_dimensions(verl_cls)
        assert issubclass(ours, verl_cls) and ours._compute_metrics is RewardDimensionMetrics._compute_metrics
        assert ours.init is RewardDimensionMetrics.init  # start-up notes around verl's own init()
        assert with_reward_dimensions(verl_cls) is ours
    assert TRAINER_REGISTRY == before  # nothing registered: verl's mode names keep meaning verl's trainers


def test_the_task_runner_run_ppo_starts_is_verls_own_with_a_run_that_swaps_the_trainer():
    """Loaded in a fresh process as the launcher's child loads it (verl's module-level Ray actor pattern)."""
    code = ("from core.training.verl_backend.runner import RemoteTaskRunner, DevopsTaskRunner\n"
            "from verl.trainer.main_ppo import TaskRunnerV1\n"
            "verl_cls = TaskRunnerV1.__ray_metadata__.modified_class.__ray_actor_class__\n"
            "plain = RemoteTaskRunner.__ray_metadata__.modified_class.__ray_actor_class__\n"
            "print(plain is DevopsTaskRunner, issubclass(plain, verl_cls), plain.run is not verl_cls.run,\n"
            "      plain.init_agent_loop_manager is not verl_cls.init_agent_loop_manager)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "True True True True"


def test_reward_metrics_average_each_dimension_over_real_samples_and_skip_padding():
    from core.rewards import DIMENSIONS, PENALTIES
    from core.training.verl_backend.data import task_row
    from core.training.verl_backend.extension import reward_metrics
    from core.training.verl_backend.reward_fn import compute_score

    task, good, bad = _good_and_bad_answers()
    truth = task_row(task, 0, "train", "s")["reward_model"]["ground_truth"]
    infos = [compute_score("d", answer, truth) for answer in (good, bad, good)]
    fields = [{"reward_extra_info": info} for info in infos] + [{"reward_extra_info": {"score": 99.0}}]
    metrics = reward_metrics(fields, keep=[True, True, True, False])
    assert set(metrics) == {f"reward/{n}/mean" for n in (*DIMENSIONS, *PENALTIES, "final", "rubric",
                                                           "rubric/criteria_passed")}
    assert metrics["reward/final/mean"] == pytest.approx(sum(i["score"] for i in infos) / 3)
    for name in DIMENSIONS:
        assert metrics[f"reward/{name}/mean"] == pytest.approx(sum(i[name] for i in infos) / 3)
    assert reward_metrics([None, {"other": 1}]) == {}


def test_verl_runs_log_the_rubric_score_and_share_of_criteria_met_as_the_native_backend_does():
    """The reward-hacking alert compares the dimensions with `reward/rubric/mean`: a verl run must log it."""
    from core.rewards import DIMENSIONS, PENALTIES, score
    from core.rewards.pool import reward_means
    from core.runs.health import RUBRIC
    from core.training.verl_backend.data import task_row
    from core.training.verl_backend.extension import RUBRIC_PASSED, reward_metrics
    from core.training.verl_backend.reward_fn import compute_score

    task, good, bad = _good_and_bad_answers()
    truth = task_row(task, 0, "train", "s")["reward_model"]["ground_truth"]
    breakdowns = [score(answer, task).to_dict() for answer in (good, bad)]
    metrics = reward_metrics([{"reward_extra_info": compute_score("d", answer, truth)} for answer in (good, bad)])
    native = reward_means(breakdowns, DIMENSIONS, PENALTIES)
    assert metrics[RUBRIC] == pytest.approx(native[RUBRIC])
    met = [sum(c["status"] == "passed" for c in b["rubric"]["criteria"]) / len(b["rubric"]["criteria"]) for b in breakdowns]
    assert metrics[RUBRIC_PASSED] == pytest.approx(sum(met) / 2) and 0 < metrics[RUBRIC_PASSED] <= 1
    # a task without a rubric nor a reference to derive checks from adds no rubric figures (0.0 is not a score)
    plain = {**task.to_dict(), "rubric": None, "reference_answer": None}
    unruled = compute_score("d", good, json.dumps({"task": plain, "reward_weights": {}}))
    assert unruled["rubric_criteria"] == 0.0 and RUBRIC not in reward_metrics([{"reward_extra_info": unruled}])
    from devops_tui.rollouts import extra_means  # the cockpit's curves from dumps that carry the extras

    graded = compute_score("d", good, truth)
    assert graded["rubric"] > 0 and extra_means([unruled, graded])[RUBRIC] == pytest.approx(graded["rubric"])


def test_mixin_adds_dimension_metrics_after_verls_own():
    from core.training.verl_backend.extension import RewardDimensionMetrics

    class Verl:  # stands in for verl's PPOTrainer._compute_metrics (the MRO contract is what is tested)
        def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
            metrics["critic/score/mean"] = 0.5

    class Trainer(RewardDimensionMetrics, Verl):
        def _reward_dimension_metrics(self, batch):
            return {"reward/final/mean": 0.25}

    metrics: dict = {}
    Trainer()._compute_metrics(None, metrics, {}, 3, 0)
    assert metrics == {"critic/score/mean": 0.5, "reward/final/mean": 0.25}
