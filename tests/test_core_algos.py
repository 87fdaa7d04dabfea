"""Tests of the GRPO maths: hand-worked small cases, and equality with verl's own core_algos on random tensors.

The verl parity tests skip cleanly when verl is not installed.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch

from core.errors import UserError
from core.training import core_algos as ours
from core.training.config import KL_TYPES, LOSS_AGG_MODES, load_config

KL_CHOICES = KL_TYPES + tuple(f"{kind}+" for kind in KL_TYPES)


def _random_batch(seed: int, batch: int = 12, length: int = 9):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (batch,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).float()
    mask[0] = 0.0  # a fully masked row (a response cut to nothing) must not break anything
    old = -torch.rand(batch, length, generator=gen) * 3
    new = old + torch.randn(batch, length, generator=gen) * 0.4
    adv = torch.randn(batch, length, generator=gen) * mask
    return old, new, adv, mask


@pytest.fixture(scope="module")
def verl_algos():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from verl.trainer.ppo import core_algos
        from verl.utils import torch_functional

    return core_algos, torch_functional


# ---- small cases worked by hand ------------------------------------------------------------------


def test_grpo_advantage_by_hand():
    rewards = torch.zeros(5, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0])  # outcome reward on the last token
    mask = torch.ones(5, 3)
    adv, returns = ours.compute_grpo_outcome_advantage(rewards, mask, ["a", "a", "b", "b", "c"])
    std_a = torch.tensor([1.0, 0.0]).std()
    assert torch.allclose(adv[0], torch.full((3,), 0.5 / (std_a + 1e-6)))
    assert torch.allclose(adv[1], -adv[0])
    assert torch.all(adv[2:4] == 0)  # equal rewards: no signal
    assert torch.allclose(adv[4], torch.full((3,), 2.0))  # a group of one: mean 0, std 1
    assert torch.equal(adv, returns)
    dr, _ = ours.compute_grpo_outcome_advantage(rewards, mask, ["a", "a", "b", "b", "c"], norm_adv_by_std_in_grpo=False)
    assert torch.allclose(dr[0], torch.full((3,), 0.5))


def test_policy_loss_clips_and_dual_clips():
    mask = torch.ones(1, 3)
    old = torch.zeros(1, 3)
    new = torch.log(torch.tensor([[1.5, 0.5, 5.0]]))  # ratios 1.5, 0.5, 5.0
    pos = torch.ones(1, 3)
    loss, m = ours.compute_policy_loss(old, new, pos, mask, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    # A > 0: -min(r, 1.28) for r = 1.5 and 5.0, -0.5 unclipped below.
    assert torch.isclose(loss, torch.tensor(-(1.28 + 0.5 + 1.28) / 3))
    assert torch.isclose(m["pg_clipfrac"], torch.tensor(2 / 3))
    neg = -torch.ones(1, 3)
    loss, m = ours.compute_policy_loss(old, new, neg, mask, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    # A < 0: max(r, 0.8) for r = 1.5, 0.5 -> 1.5, 0.8; r = 5.0 is dual-clipped to 3.0.
    assert torch.isclose(loss, torch.tensor((1.5 + 0.8 + 3.0) / 3))
    assert torch.isclose(m["pg_clipfrac_lower"], torch.tensor(1 / 3))
    with pytest.raises(ValueError, match="clip_ratio_c"):
        ours.compute_policy_loss(old, new, pos, mask, clip_ratio_c=1.0)


def test_agg_loss_modes_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert ours.agg_loss(loss, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert ours.agg_loss(loss, mask, "token-sum").item() == pytest.approx(10)
    assert ours.agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert ours.agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert ours.agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx((6 + 4) / 2 / 3)
    with pytest.raises(ValueError, match="unknown loss_agg_mode"):
        ours.agg_loss(loss, mask, "token-sum-please")


def test_micro_batches_normalised_by_the_mini_batch_add_up_to_the_whole():
    _, _, loss, mask = _random_batch(3)
    for mode in LOSS_AGG_MODES:
        whole = ours.agg_loss(loss, mask, mode)
        kwargs = {"batch_num_tokens": mask.sum(), "global_batch_size": (mask.sum(-1) > 0).sum(),
                  "loss_scale_factor": mask.shape[-1]}
        parts = sum(ours.agg_loss(loss[i : i + 4], mask[i : i + 4], mode, **kwargs) for i in range(0, 12, 4))
        assert torch.isclose(parts, whole, atol=1e-6), mode


def test_kl_estimators_are_zero_at_equal_policies_and_k3_is_non_negative():
    logp = -torch.rand(4, 5) * 3
    for kind in KL_CHOICES:
        assert torch.all(ours.kl_penalty(logp, logp, kind) == 0), kind
    ref = logp + torch.randn(4, 5)
    assert torch.all(ours.kl_penalty(logp, ref, "low_var_kl") >= 0)
    with pytest.raises(ValueError, match="unknown KL type"):
        ours.kl_penalty(logp, ref, "reverse")


def test_the_config_admits_exactly_the_kl_estimators_and_loss_modes_the_maths_computes():
    logp, ref = -torch.rand(2, 3), -torch.rand(2, 3)
    for kind in KL_CHOICES:
        cfg = load_config(overrides=[f"actor_rollout_ref.actor.kl_loss_type={kind}", f"algorithm.kl_penalty={kind}"])
        assert ours.kl_penalty(logp, ref, cfg.actor_rollout_ref.actor.kl_loss_type).shape == (2, 3)
    for mode in LOSS_AGG_MODES:
        cfg = load_config(overrides=[f"actor_rollout_ref.actor.loss_agg_mode={mode}"])
        assert ours.agg_loss(logp, torch.ones(2, 3), cfg.actor_rollout_ref.actor.loss_agg_mode).shape == ()
    for refused in ("full", "k4", "k3++"):  # verl lists "full" but raises NotImplementedError on it
        with pytest.raises(UserError, match=f"algorithm.kl_penalty: '{re.escape(refused)}': unknown KL estimator"):
            load_config(overrides=[f"algorithm.kl_penalty={refused}"])


def test_straight_through_kl_has_the_estimators_value_and_k2s_gradient():
    logp = (-torch.rand(3, 4) * 3).requires_grad_()
    ref = logp.detach() + torch.randn(3, 4)
    value = ours.kl_penalty(logp, ref, "k3+")
    assert torch.allclose(value, ours.kl_penalty(logp, ref, "k3"))
    (grad,) = torch.autograd.grad(value.sum(), logp)
    assert torch.allclose(grad, logp.detach() - ref)  # d/dlogp of (logp - ref)^2 / 2


def test_adaptive_kl_controller_moves_towards_the_target_and_fixed_stays():
    cfg = load_config(overrides=["algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.kl_coef=0.1",
                                 "algorithm.kl_ctrl.target_kl=0.5", "algorithm.kl_ctrl.horizon=100"])
    ctrl = ours.get_kl_controller(cfg.algorithm.kl_ctrl)
    ctrl.update(current_kl=5.0, n_steps=10)  # far above target: the error is clipped to +20%
    assert ctrl.value == pytest.approx(0.1 * (1 + 0.2 * 10 / 100))
    ctrl.update(current_kl=0.25, n_steps=10)  # half the target: -20% again, scaled by 10/100
    assert ctrl.value == pytest.approx(0.1 * 1.02 * 0.98)
    fixed = ours.get_kl_controller(load_config().algorithm.kl_ctrl)
    fixed.update(current_kl=5.0, n_steps=10)
    assert fixed.value == 0.001


def test_lr_schedule_warms_up_then_holds_or_decays():
    constant, cosine = ours.lr_schedule("constant", 4, 20), ours.lr_schedule("cosine", 4, 20)
    assert [constant(s) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    assert cosine(3) == 1.0 and cosine(4) == 1.0 and cosine(12) == pytest.approx(0.5) and cosine(20) == pytest.approx(0.0)
    assert cosine(25) == pytest.approx(0.0)  # past the end it stays at 0 rather than rising again


def test_kl_in_reward_lowers_the_reward_of_drifting_tokens():
    scores = torch.zeros(2, 3)
    scores[:, -1] = 1.0
    mask = torch.ones(2, 3)
    old = torch.zeros(2, 3)
    ref = torch.tensor([[0.0, 0.0, 0.0], [-1.0, -1.0, -1.0]])  # row 1 drifted up by 1 per token
    rewards, kl = ours.apply_kl_penalty(scores, old, ref, mask, kl_coef=0.1)
    assert torch.allclose(rewards.sum(-1), torch.tensor([1.0, 1.0 - 0.3]))
    assert kl.item() == pytest.approx(0.5)


def test_entropy_and_logprobs():
    uniform = torch.zeros(2, 8)
    assert torch.allclose(ours.entropy_from_logits(uniform), torch.full((2,), float(np.log(8))))
    logits = torch.randn(3, 4, 10)
    labels = torch.randint(0, 10, (3, 4))
    expected = torch.log_softmax(logits, -1).gather(-1, labels[..., None]).squeeze(-1)
    assert torch.allclose(ours.logprobs_from_logits(logits, labels), expected, atol=1e-6)


# ---- parity with verl ----------------------------------------------------------------------------


@pytest.mark.parametrize("norm_by_std", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grpo_advantage_equals_verl(verl_algos, seed, norm_by_std):
    core_algos, _ = verl_algos
    _, _, _, mask = _random_batch(seed)
    gen = torch.Generator().manual_seed(seed + 100)
    rewards = torch.rand(12, 9, generator=gen) * mask
    index = np.array([f"p{i % 4}" for i in range(11)] + ["lonely"], dtype=object)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(rewards.clone(), mask, index, norm_adv_by_std_in_grpo=norm_by_std)
    mine, _ = ours.compute_grpo_outcome_advantage(rewards.clone(), mask, index, norm_adv_by_std_in_grpo=norm_by_std)
    assert torch.allclose(mine, theirs, atol=1e-5)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("seed", [0, 1])
def test_policy_loss_equals_verl_in_every_agg_mode(verl_algos, mode, seed):
    core_algos, _ = verl_algos
    old, new, adv, mask = _random_batch(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_loss, t_clip, t_kl, t_lower = core_algos.compute_policy_loss(
            old, new, adv, mask, cliprange=0.2, cliprange_low=0.2, cliprange_high=0.28, clip_ratio_c=3.0, loss_agg_mode=mode
        )
    loss, m = ours.compute_policy_loss(old, new, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0,
                                       loss_agg_mode=mode)
    assert torch.allclose(loss, t_loss, atol=1e-6)
    assert torch.allclose(m["pg_clipfrac"], t_clip) and torch.allclose(m["ppo_kl"], t_kl)
    assert torch.allclose(m["pg_clipfrac_lower"], t_lower)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_agg_loss_equals_verl(verl_algos, mode):
    core_algos, _ = verl_algos
    _, _, loss, mask = _random_batch(5)
    assert torch.allclose(ours.agg_loss(loss, mask, mode), core_algos.agg_loss(loss, mask, mode), atol=1e-6)


@pytest.mark.parametrize("kind", KL_CHOICES)
def test_kl_penalty_equals_verl_in_value_and_gradient(verl_algos, kind):
    core_algos, _ = verl_algos
    old, new, _, _ = _random_batch(7)
    new = new * 4  # large gaps exercise the clamps of low_var_kl
    mine_in, theirs_in = new.clone().requires_grad_(), new.clone().requires_grad_()
    mine, theirs = ours.kl_penalty(mine_in, old, kind), core_algos.kl_penalty(theirs_in, old, kind)
    assert torch.allclose(mine, theirs, atol=1e-6)
    mine.sum().backward()
    theirs.sum().backward()
    assert torch.allclose(mine_in.grad, theirs_in.grad, atol=1e-6)


def test_kl_controllers_equal_verl(verl_algos):
    core_algos, _ = verl_algos
    for kind in ("fixed", "adaptive"):
        kl_ctrl = load_config(overrides=[f"algorithm.kl_ctrl.type={kind}", "algorithm.kl_ctrl.horizon=50"]).algorithm.kl_ctrl
        mine, theirs = ours.get_kl_controller(kl_ctrl), core_algos.get_kl_controller(kl_ctrl)
        for current_kl, n_steps in ((0.5, 8), (0.01, 8), (0.12, 16), (3.0, 4)):
            mine.update(current_kl, n_steps)
            theirs.update(current_kl, n_steps)
            assert mine.value == pytest.approx(theirs.value, rel=1e-12), kind


@pytest.mark.parametrize("kind", ["constant", "cosine"])
def test_lr_schedule_equals_verl_after_warm_up(verl_algos, kind):
    _, functional = verl_algos
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    make = functional.get_cosine_schedule_with_warmup if kind == "cosine" else functional.get_constant_schedule_with_warmup
    args = (optimizer, 3, 17) if kind == "cosine" else (optimizer, 3)
    theirs = make(*args).lr_lambdas[0]
    mine = ours.lr_schedule(kind, 3, 17)
    assert [mine(s) for s in range(3, 18)] == pytest.approx([theirs(s) for s in range(3, 18)])


def test_entropy_and_masked_mean_equal_verl(verl_algos):
    _, functional = verl_algos
    logits = torch.randn(4, 6, 50) * 3
    assert torch.allclose(ours.entropy_from_logits(logits), functional.entropy_from_logits(logits), atol=1e-5)
    old, _, _, mask = _random_batch(9)
    assert torch.allclose(ours.masked_mean(old, mask), functional.masked_mean(old, mask))
    assert torch.allclose(ours.masked_mean(old, mask, axis=-1), functional.masked_mean(old, mask, axis=-1))
