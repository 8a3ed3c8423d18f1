"""Advantage estimators, group filtering and GAE over agent tokens.

Episode-level estimators take one reward per episode, laid out as consecutive groups of ``group_size`` samples of
the same prompt (TRL's order), and return one advantage per episode:

- ``grpo``: reward minus its group's mean, divided by the group's std (DeepSeekMath's GRPO);
- ``rloo``: reward minus the mean of the *other* samples of its group (Ahmadian et al., 2024);
- ``reinforce_pp``: REINFORCE++ (Hu, 2025): the reward minus its group's mean, whitened over the whole batch.

Token-level helpers spread an episode's advantage over its agent tokens and credit each step's process reward to the
tokens of that step. :func:`gae` runs generalised advantage estimation over agent tokens only: environment tokens are
skipped, so the value at the next *agent* token bootstraps the current one, as in Agent-R1's multi-turn PPO.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

ESTIMATORS = ("grpo", "rloo", "reinforce_pp")
EPS = 1e-6


def _groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(
            f"rewards must be 1-D with a multiple of group_size={group_size} entries, got shape {tuple(rewards.shape)}"
        )
    return rewards.float().view(-1, group_size)


def _valid(rewards: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    return torch.ones_like(rewards, dtype=torch.bool) if valid is None else valid.bool()


def _group_stats(g: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per group: the mean and the (unbiased) std over its valid samples, and how many there are."""
    n = v.sum(dim=1, keepdim=True).float()
    mean = (g * v).sum(dim=1, keepdim=True) / n.clamp(min=1.0)
    var = (((g - mean) * v) ** 2).sum(dim=1, keepdim=True) / (n - 1).clamp(min=1.0)
    return mean, var.sqrt(), n


def grpo_advantages(
    rewards: torch.Tensor, group_size: int, scale: bool | str = True, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """Group-normalised outcome advantages: ``(r - mean_group) / std``, where the std is the group's
    (``scale=True`` or ``"group"``), the whole batch's (``"batch"``, as TRL's ``scale_rewards="batch"``) or none
    (``False`` / ``"none"``). Rows with ``valid`` False are left out of every statistic and get advantage 0."""
    g, v = _groups(rewards, group_size), _valid(rewards, valid).view(-1, group_size)
    mean, std, _ = _group_stats(g, v)
    adv = g - mean
    mode = "group" if scale is True else "none" if scale is False else scale
    if mode == "group" and group_size > 1:
        adv = adv / (std + EPS)
    elif mode == "batch" and int(v.sum()) > 1:
        adv = adv / (g[v].std() + EPS)
    return (adv * v).flatten()


def rloo_advantages(rewards: torch.Tensor, group_size: int, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Leave-one-out baseline: ``r_i - mean_{j != i} r_j`` over the valid samples of each group. A sample with no
    valid other sample (a group of one, in evaluation with ``num_generations_eval=1``) has no baseline: 0."""
    g, v = _groups(rewards, group_size), _valid(rewards, valid).view(-1, group_size)
    n = v.sum(dim=1, keepdim=True).float()
    others = ((g * v).sum(dim=1, keepdim=True) - g) / (n - 1).clamp(min=1.0)
    return ((g - others) * v * (n > 1)).flatten()


def reinforce_pp_advantages(rewards: torch.Tensor, group_size: int, valid: torch.Tensor | None = None) -> torch.Tensor:
    """REINFORCE++ with a group baseline: subtract the group mean, then whiten over the whole batch (valid rows)."""
    g, v = _groups(rewards, group_size), _valid(rewards, valid).view(-1, group_size)
    mean, _, _ = _group_stats(g, v)
    centred, flat_v = (g - mean).flatten(), v.flatten()
    kept = centred[flat_v]
    if kept.numel() > 1:
        centred = (centred - kept.mean()) / (kept.std() + EPS)
    return centred * flat_v


def episode_advantages(
    rewards: torch.Tensor,
    group_size: int,
    estimator: str = "grpo",
    scale: bool | str = True,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dispatch to one of :data:`ESTIMATORS`; ``valid`` (bool per row) leaves failed rows out (advantage 0)."""
    if estimator == "grpo":
        return grpo_advantages(rewards, group_size, scale, valid)
    if estimator == "rloo":
        return rloo_advantages(rewards, group_size, valid)
    if estimator == "reinforce_pp":
        return reinforce_pp_advantages(rewards, group_size, valid)
    raise ValueError(f"unknown advantage estimator {estimator!r}; use one of {ESTIMATORS}")


def group_advantages(
    rewards: torch.Tensor,
    valid: torch.Tensor,
    group_size: int,
    estimator: str = "grpo",
    scale: bool | str = True,
    keep_ratio: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each episode's advantage (:func:`episode_advantages`) and whether its row trains: its group is one StarPO-S
    keeps (:func:`filter_groups`) and the episode did not fail. ``rewards`` and ``valid`` hold every episode of the
    (global) batch in consecutive groups of ``group_size``; failed episodes (``valid`` False) are left out of the
    statistics. The one place both GRPO layouts get their advantages and kept rows from."""
    valid = valid.bool()
    adv = episode_advantages(rewards, group_size, estimator, scale=scale, valid=valid)
    return adv, filter_groups(rewards, group_size, keep_ratio, valid=valid) & valid


def step_token_ranges(step_ends: Sequence[int]) -> list[tuple[int, int]]:
    """``[start, end)`` token ranges of each step from the index of each step's last token."""
    ranges, start = [], 0
    for end in step_ends:
        ranges.append((start, int(end) + 1))
        start = int(end) + 1
    return ranges


def process_stats(values: Sequence[float]) -> tuple[float, float]:
    """Mean and std of every step's process reward in the (global) batch, to whiten them."""
    flat = torch.tensor(list(values), dtype=torch.float32)
    if flat.numel() < 2:
        return (float(flat.mean()) if flat.numel() else 0.0), 0.0
    return float(flat.mean()), float(flat.std())


def token_advantages(
    episode_adv: torch.Tensor,
    mask: torch.Tensor,
    step_ends: Sequence[Sequence[int]] = (),
    step_process: Sequence[Sequence[float]] = (),
    process_weight: float = 0.0,
    stats: tuple[float, float] | None = None,
    advantage_mask: bool = True,
) -> torch.Tensor:
    """Per-token advantages ``(B, T)``: each episode's advantage on the tokens of ``mask``, plus process credit.

    ``mask`` says which tokens carry an advantage (the agent tokens under the advantage mask, every completion token
    without it). A step's process reward, whitened with ``stats`` (mean, std over every step of the global batch;
    :func:`process_stats`), times ``process_weight`` is added to the tokens of that step only.
    ``advantage_mask=False`` ignores ``mask`` (every position carries the advantage).
    """
    adv = episode_adv.float().unsqueeze(1).expand_as(mask).clone()
    if process_weight and any(len(p) for p in step_process):
        mean, std = stats if stats is not None else process_stats([x for p in step_process for x in p])
        for b, (ends, procs) in enumerate(zip(step_ends, step_process, strict=True)):
            for (start, end), value in zip(step_token_ranges(ends), procs, strict=False):
                adv[b, start:end] += process_weight * ((value - mean) / (std + EPS) if std > EPS else 0.0)
    if advantage_mask:
        adv = adv * mask.float()
    return adv


def filter_groups(
    rewards: torch.Tensor, group_size: int, keep_ratio: float, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """StarPO-S filtering (RAGEN): a bool per episode, True for the ``keep_ratio`` groups of highest reward std
    (over each group's valid samples).

    Groups whose samples all scored the same teach nothing under a group baseline; keeping the most uncertain
    prompts is what stabilises multi-turn training against the Echo Trap.
    """
    g, v = _groups(rewards, group_size), _valid(rewards, valid).view(-1, group_size)
    n_keep = max(1, round(keep_ratio * g.shape[0]))
    std = _group_stats(g, v)[1].squeeze(1) if group_size > 1 else torch.zeros(g.shape[0])
    keep = torch.zeros(g.shape[0], dtype=torch.bool)
    keep[torch.argsort(std, descending=True, stable=True)[:n_keep]] = True
    return keep.repeat_interleave(group_size)


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level GAE over the positions where ``mask == 1``; the others are skipped (advantage and return 0).

    ``rewards``, ``values`` and ``mask`` are ``(B, T)``. The successor of an agent token is the next agent token of
    the same row, however many environment tokens lie between; after the last agent token the value is 0.
    Returns ``(advantages, returns)``.
    """
    adv = torch.zeros_like(values, dtype=torch.float32)
    rewards, values, mask = rewards.float(), values.float().detach(), mask.bool()
    next_value = torch.zeros(values.shape[0])
    running = torch.zeros(values.shape[0])
    for t in range(values.shape[1] - 1, -1, -1):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        new_running = delta + gamma * lam * running
        running = torch.where(m, new_running, running)
        next_value = torch.where(m, values[:, t], next_value)
        adv[:, t] = torch.where(m, running, torch.zeros_like(running))
    returns = (adv + values) * mask.float()
    return adv, returns


def step_gae(
    step_rewards: Sequence[Sequence[float]],
    step_values: Sequence[Sequence[float]],
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[list[list[float]], list[list[float]]]:
    """GAE over an episode's steps (the step-level MDP): one advantage and one return per step."""
    advs, rets = [], []
    for rewards, values in zip(step_rewards, step_values, strict=True):
        a, running, nxt = [0.0] * len(rewards), 0.0, 0.0
        for k in range(len(rewards) - 1, -1, -1):
            running = rewards[k] + gamma * nxt - values[k] + gamma * lam * running
            a[k], nxt = running, values[k]
        advs.append(a)
        rets.append([x + v for x, v in zip(a, values, strict=True)])
    return advs, rets


def step_targets(
    step_ends: Sequence[Sequence[int]],
    step_rewards: Sequence[Sequence[float]],
    values: torch.Tensor,
    agent: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, ...]:
    """Step-level GAE targets on ``(B, T)`` completion tokens: one value per step, read at the step's first agent
    token (after the env reply it answers, which the value must see; a step without agent tokens reads its first
    token), the step's advantage on its agent tokens, its return at that first token. Returns ``(advantages,
    returns, value_mask)``, the last 1 exactly where a value is trained."""
    ranges = [step_token_ranges(ends) for ends in step_ends]
    firsts = [
        [s + int(agent[b, s:e].nonzero()[0]) if agent[b, s:e].any() else s for s, e in row]
        for b, row in enumerate(ranges)
    ]
    step_values = [[values[b, f].item() for f in fs] for b, fs in enumerate(firsts)]
    step_adv, step_ret = step_gae(step_rewards, step_values, gamma, lam)
    adv, ret, vmask = (torch.zeros_like(values).cpu() for _ in range(3))
    agent = agent.cpu()
    for b, row in enumerate(ranges):
        for k, ((s, end), first) in enumerate(zip(row, firsts[b], strict=True)):
            adv[b, s:end] = step_adv[b][k] * agent[b, s:end]
            ret[b, first], vmask[b, first] = step_ret[b][k], 1.0
    return adv, ret, vmask


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def _masked_sum_over(x: torch.Tensor, mask: torch.Tensor, denominator: torch.Tensor | float | None) -> torch.Tensor:
    return masked_mean(x, mask) if denominator is None else (x * mask).sum() / denominator


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip: float = 0.2,
    denominator: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate summed over masked tokens and divided by ``denominator`` (default: their count);
    returns ``(loss, clip_fraction)``."""
    ratio = torch.exp(logp - old_logp)
    loss1, loss2 = -adv * ratio, -adv * torch.clamp(ratio, 1 - clip, 1 + clip)
    clipped = (loss2 > loss1).float()
    return _masked_sum_over(torch.max(loss1, loss2), mask, denominator), masked_mean(clipped, mask)


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float = 0.2,
    denominator: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """The clipped value loss of PPO: ``0.5 * max((v - R)^2, (clip(v, v_old ± c) - R)^2)``, summed over masked
    tokens and divided by ``denominator`` (default: their count)."""
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * _masked_sum_over(torch.max((values - returns) ** 2, (clipped - returns) ** 2), mask, denominator)
