"""Multi-turn PPO on a tiny model: a step moves both networks, bf16 checkpoints work, step-level values are read
after the env reply, and configs PPO cannot train are refused."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from agentgym_r1.adapters import RolloutBatch  # noqa: E402
from agentgym_r1.adapters.records import Episode, TurnRecord  # noqa: E402
from agentgym_r1.error import ConfigError  # noqa: E402
from tests.trainers.kit import CountEnv, ppo_args, tiny_model, tiny_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _train_one(tmp_path, model, tokenizer, **kw):
    from agentgym_r1.trainers.ppo import AgentPPOTrainer

    trainer = AgentPPOTrainer(model, ppo_args(tmp_path, **kw), tokenizer, make_env=CountEnv)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    moved = [not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True)]
    return trainer, moved


@pytest.mark.parametrize("level", ["token", "step"])
def test_ppo_step_moves_policy_and_critic(tmp_path, tokenizer, level) -> None:
    trainer, moved = _train_one(tmp_path, tiny_model(tokenizer), tokenizer, level=level)
    names = [n for n, _ in trainer.model.named_parameters()]
    assert any(m for n, m in zip(names, moved, strict=True) if n.startswith("policy."))
    assert any(m for n, m in zip(names, moved, strict=True) if n.startswith(("critic.", "value_head.")))
    assert "loss/value" in trainer.state.log_history[0]


def test_ppo_on_a_bf16_model(tmp_path, tokenizer) -> None:
    """C3: the value head is made in the policy's dtype (it was fp32 beside a bf16 model: a dtype error)."""
    model = tiny_model(tokenizer, dtype=torch.bfloat16)
    trainer, moved = _train_one(tmp_path, model, tokenizer)
    assert trainer.model.value_head.weight.dtype == torch.bfloat16 and any(moved)


def test_ppo_bf16_autocast_keeps_fp32_master_weights(tmp_path, tokenizer) -> None:
    trainer, moved = _train_one(tmp_path, tiny_model(tokenizer), tokenizer, bf16=True)
    assert any(moved) and all(p.dtype == torch.float32 for p in trainer.model.parameters())


def test_policy_and_critic_run_in_one_forward(tokenizer) -> None:
    """C2: DDP with find_unused_parameters fails when the critic's parameters are used outside forward."""
    from agentgym_r1.trainers.ppo import PolicyWithCritic

    model = PolicyWithCritic(tiny_model(tokenizer))
    ids = torch.tensor([[5, 6, 7, 8]])
    logits, values = model(ids, torch.ones_like(ids), keep=3)
    (logits.sum() + values.sum()).backward()
    assert all(p.grad is not None for p in model.parameters())


def test_step_values_are_read_after_the_env_reply() -> None:
    """W3: the value of turn 2 must condition on the env reply to turn 1: it is read at turn 2's first agent
    token (the hidden state after the reply), not at the reply's first token."""
    from agentgym_r1.trainers.advantages import step_targets

    turns = [
        TurnRecord([11, 12], [0.0, 0.0], "eos", "a", 3, env_ids=[90, 91, 92], reward=0.0),
        TurnRecord([13, 14], [0.0, 0.0], "eos", "b", 8, reward=1.0),
    ]
    batch = RolloutBatch([Episode("e", 0, 0, "x", [1, 2, 3], turns)])
    row = batch.samples[0]
    assert row.env_mask == [1, 1, 0, 0, 0, 1, 1] and row.step_ends == [1, 6]
    values = torch.arange(7, dtype=torch.float32).unsqueeze(0) * 10  # value at completion index t is 10 t
    agent = torch.tensor([row.env_mask], dtype=torch.float32)
    adv, ret, vmask = step_targets([row.step_ends], [row.step_rewards], values, agent, gamma=1.0, lam=1.0)
    assert vmask[0].nonzero().flatten().tolist() == [0, 5]  # turn 2's value at index 5, after tokens 2-4 (env)
    assert adv[0, 5].item() == pytest.approx(1.0 - 50.0)  # return 1 minus V = 50 read at index 5
    assert torch.all(adv[0, 2:5] == 0)


def test_configs_ppo_cannot_train_are_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="gradient_accumulation_steps"):
        ppo_args(tmp_path, gradient_accumulation_steps=2)
    with pytest.raises(ConfigError, match="level='token'"):
        ppo_args(tmp_path, advantage_mask=False, level="step")
    with pytest.raises(ConfigError, match="multiple of"):
        ppo_args(tmp_path, rollout_batch_size=6, mini_batch_size=4)
