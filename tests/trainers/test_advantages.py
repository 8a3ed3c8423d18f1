"""Advantage estimators, StarPO-S filtering, GAE over agent tokens, clipped losses and the Echo Trap monitor."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from agentgym_r1.trainers import advantages as A  # noqa: E402
from agentgym_r1.trainers.signals import EchoTrapMonitor, EchoTrapWarning  # noqa: E402


def test_grpo_normalises_within_groups() -> None:
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 5.0, 5.0, 5.0, 5.0])
    adv = A.grpo_advantages(r, 4)
    assert adv[:4].sum().abs() < 1e-5 and adv[0] > 0 > adv[1]
    assert torch.allclose(adv[4:], torch.zeros(4))  # a group that all scored the same teaches nothing
    assert torch.allclose(A.grpo_advantages(r, 4, scale=False)[:4], torch.tensor([0.75, -0.25, -0.25, -0.25]))


def test_rloo_uses_the_other_samples() -> None:
    adv = A.rloo_advantages(torch.tensor([1.0, 0.0, 0.0, 3.0]), 2)
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, -3.0, 3.0]))
    # C4: one sample per prompt (eval with num_generations_eval=1) has no baseline: advantage 0, not an error
    assert torch.equal(A.episode_advantages(torch.tensor([1.0, 0.0]), 1, "rloo"), torch.zeros(2))


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "reinforce_pp"])
def test_failed_rows_stay_out_of_group_statistics(estimator) -> None:
    """A failed row (placeholder, generation error) counted as reward 0 would shift its group's mean and std."""
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 1.0, 1.0, 3.0])
    valid = torch.tensor([True, True, True, False, True, True, True, True])
    with_failed = A.episode_advantages(r, 4, estimator, valid=valid)
    assert with_failed[3] == 0
    three = A.episode_advantages(torch.tensor([1.0, 0.0, 0.0]), 3, estimator)
    if estimator != "reinforce_pp":  # whitening is over the whole batch, so only the in-group part compares
        assert torch.allclose(with_failed[:3], three, atol=1e-5)
    assert with_failed[0] > 0 > with_failed[1]


def test_scale_rewards_batch_divides_by_the_batch_std() -> None:
    r = torch.tensor([1.0, 0.0, 10.0, 0.0])
    by_batch = A.episode_advantages(r, 2, "grpo", scale="batch")
    centred = torch.tensor([0.5, -0.5, 5.0, -5.0])
    assert torch.allclose(by_batch, centred / (r.std() + A.EPS), atol=1e-5)
    by_group = A.episode_advantages(r, 2, "grpo", scale="group")
    assert not torch.allclose(by_batch, by_group)  # "batch" used to be treated as "group"


def test_reinforce_pp_whitens_over_the_batch() -> None:
    adv = A.reinforce_pp_advantages(torch.tensor([1.0, 0.0, 2.0, 0.0, 7.0, 7.0]), 2)
    assert abs(adv.mean().item()) < 1e-5 and abs(adv.std().item() - 1) < 1e-4
    assert adv[0] > 0 > adv[1] and adv[4] == adv[5]


def test_process_reward_goes_to_its_step_only() -> None:
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 0]], dtype=torch.float32)  # step 1: tokens 0-1, step 2: 4-5
    adv = A.token_advantages(torch.tensor([0.0]), mask, [[1, 5]], [[1.0, -1.0]], process_weight=1.0)
    assert adv[0, 0] > 0 and adv[0, 1] > 0 and adv[0, 4] < 0 and adv[0, 5] < 0
    assert adv[0, 2] == 0 and adv[0, 3] == 0 and adv[0, 6] == 0  # env tokens get nothing
    unmasked = A.token_advantages(torch.tensor([2.0]), mask, advantage_mask=False)
    assert torch.allclose(unmasked, torch.full((1, 7), 2.0))


def test_starpo_keeps_the_most_uncertain_groups() -> None:
    r = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.3, 0.4])
    keep = A.filter_groups(r, 2, keep_ratio=0.5)
    assert keep.tolist() == [False, False, True, True, False, False, True, True]
    assert A.filter_groups(r, 2, keep_ratio=1.0).all()


def test_gae_skips_environment_tokens() -> None:
    mask = torch.tensor([[1, 1, 0, 0, 1]])
    rewards = torch.tensor([[0.0, 0.0, 9.0, 9.0, 1.0]])  # rewards on env tokens must be ignored
    values = torch.tensor([[0.5, 0.2, 7.0, 7.0, 0.4]])  # so must values there
    adv, ret = A.gae(rewards, values, mask, gamma=1.0, lam=1.0)
    assert torch.allclose(ret[0], torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0]))
    assert torch.allclose(adv[0], torch.tensor([0.5, 0.8, 0.0, 0.0, 0.6]))
    adv2, _ = A.gae(rewards, values, mask, gamma=1.0, lam=0.0)
    assert torch.allclose(adv2[0, 1], torch.tensor(0.4 - 0.2))  # bootstraps from the next *agent* token


def test_step_gae() -> None:
    adv, ret = A.step_gae([[0.0, 1.0]], [[0.3, 0.6]], gamma=1.0, lam=1.0)
    assert ret == [[1.0, 1.0]] and adv[0] == pytest.approx([0.7, 0.4])


def test_step_targets_share_a_step_advantage_and_train_one_value_per_step() -> None:
    """Two rows: the first with steps [0, 1] and [2, 4] whose second step starts with an env token (index 2), the
    second with one step. Values are read at each step's first agent token; advantages cover agent tokens only."""
    values = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0], [0.5, 0.5, 0.0, 0.0, 0.0]])
    agent = torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0, 0.0]])
    adv, ret, vmask = A.step_targets([[1, 4], [1]], [[0.0, 1.0], [2.0]], values, agent, gamma=1.0, lam=1.0)
    assert vmask.tolist() == [[1.0, 0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0]]
    # row 0: V(step 1) = 1 at index 0, V(step 2) = 4 at index 3 (not the env token's 3 at index 2)
    # step 2: 1 - V2 = -3; step 1: 0 + V2 - V1 + (-3) = 0; each on its agent tokens (index 2, env, gets none)
    assert adv[0].tolist() == [0.0, 0.0, 0.0, -3.0, -3.0]
    assert ret[0].tolist() == [1.0, 0.0, 0.0, 1.0, 0.0] and ret[1].tolist() == [2.0, 0.0, 0.0, 0.0, 0.0]
    assert adv[1].tolist() == [1.5, 1.5, 0.0, 0.0, 0.0]


def test_group_advantages_keep_only_played_rows_of_kept_groups() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 2.0])
    valid = torch.tensor([True, True, False, True, True, True])
    adv, keep = A.group_advantages(rewards, valid, 2, "rloo", keep_ratio=2 / 3)
    assert torch.equal(adv, A.rloo_advantages(rewards, 2, valid))
    # groups' spreads: 0.71, 0 (one valid sample), 0: the first and, tied, the second are kept; the failed row never
    assert keep.tolist() == [True, True, False, True, False, False]


def test_clipped_losses() -> None:
    mask = torch.ones(1, 2)
    logp = torch.log(torch.tensor([[2.0, 1.0]]))  # ratio 2 on token 0: clipped for a positive advantage
    loss, frac = A.clipped_policy_loss(logp, torch.zeros(1, 2), torch.ones(1, 2), mask, clip=0.2)
    assert loss.item() == pytest.approx(-(1.2 + 1.0) / 2) and frac.item() == pytest.approx(0.5)
    v = A.clipped_value_loss(torch.tensor([[2.0]]), torch.tensor([[0.0]]), torch.tensor([[0.0]]), torch.ones(1, 1))
    assert v.item() == pytest.approx(0.5 * 4.0)


def test_echo_trap_warns_once_on_collapse() -> None:
    mon = EchoTrapMonitor(window=3, ratio=0.5, signals=("entropy",))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fired = [mon.update({"entropy": v}) for v in [1.0, 1.0, 1.0, 0.9, 0.2, 0.1, 0.1, 0.05, 0.01]]
    assert sum(1 for f in fired if f) == 1
    assert len([w for w in caught if issubclass(w.category, EchoTrapWarning)]) == 1
