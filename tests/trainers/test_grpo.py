"""A few real GRPO and PPO steps on a tiny model: parameters move, and tokens with mask 0 get no gradient."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from agentgym_r1.adapters.tiny import make_model, train_tokenizer  # noqa: E402
from agentgym_r1.core.env import Env, EnvMessage, Turn  # noqa: E402
from agentgym_r1.error import ConfigError  # noqa: E402
from agentgym_r1.trainers.configs import AgentGRPOConfig, AgentPPOConfig  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


class CountEnv(Env):
    """Two turns; the reward is the length of the second action, so samples of one task differ."""

    def _begin(self, options):
        return [EnvMessage("system", "Write digits."), EnvMessage("user", "Go.")]

    def _act(self, action):
        if self.turn == 0:
            return Turn({"kind": "command"}, [EnvMessage("user", "Again, more digits.")])
        return Turn({"kind": "answer"}, outcome=len(action) / 10, terminated=True)


class HalfConstantEnv(CountEnv):
    """CountEnv, except that tasks with an even seed score 0.5 whatever the agent writes: all-equal groups."""

    def reset(self, *, seed=None, options=None):
        self.task_seed = seed
        return super().reset(seed=seed, options=options)

    def _act(self, action):
        turn = super()._act(action)
        if turn.terminated and self.task_seed % 2 == 0:
            turn.outcome = 0.5
        return turn


@pytest.fixture(scope="module")
def tokenizer():
    texts = ["<|im_start|>system\nWrite digits.<|im_end|>\n<|im_start|>user\nGo.<|im_end|>\n<|im_start|>assistant\n"
             "12 ab 345 cd<|im_end|>\n<|im_start|>user\nAgain, more digits.<|im_end|>\n"] * 20
    return train_tokenizer(texts, vocab_size=300, split_digits=True, cross_spaces=True)


def grpo_args(tmp_path, **kw) -> AgentGRPOConfig:
    base = dict(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, max_steps=1,
                max_completion_length=64, max_new_tokens=8, max_turns=2, learning_rate=1e-2, beta=0.0,
                logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, num_tasks=16, seed=0)
    return AgentGRPOConfig(**{**base, **kw})


def run_one_step(model, args, tokenizer, make_env=CountEnv):
    """One GRPO step; keeps the per-token log-probs of the loss (with their gradient) and the batch it saw."""
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    captured: dict = {"logps": []}
    trainer = AgentGRPOTrainer(model, args, tokenizer, make_env=make_env)
    score, logps_fn = trainer._generate_and_score_completions, trainer._get_per_token_logps_and_entropies

    def spy_score(inputs):
        captured["out"] = out = score(inputs)
        return out

    def spy_logps(*a, **kw):
        logps, entropies, aux = logps_fn(*a, **kw)
        if logps.requires_grad:
            logps.retain_grad()
            captured["logps"].append(logps)
        return logps, entropies, aux

    trainer._generate_and_score_completions = spy_score
    trainer._get_per_token_logps_and_entropies = spy_logps
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    return captured, changed


@pytest.mark.parametrize("loss_mask", [True, False])
def test_grpo_step_moves_parameters_and_masks_env_tokens(tmp_path, tokenizer, loss_mask) -> None:
    model = make_model(tokenizer, hidden=32, layers=1, heads=2, mlp_ratio=4)
    captured, changed = run_one_step(model, grpo_args(tmp_path, loss_mask=loss_mask), tokenizer)
    assert changed
    out = captured["out"]
    grad = captured["logps"][-1].grad.abs()  # d loss / d log p(token), per completion token
    completion = out["completion_mask"] == 1
    assert grad[completion].sum() > 0
    if loss_mask:
        env = (out["tool_mask"] == 0) & completion
        assert env.any(), "the episodes have env tokens between the two turns"
        assert torch.all(grad[env] == 0)
    else:
        assert out["tool_mask"][completion].all()  # env tokens are in the loss: the ablation


def test_skipping_rows_without_advantage_keeps_the_update(tmp_path, tokenizer) -> None:
    updates, rows = [], []
    for skip in (True, False):
        torch.manual_seed(0)
        model = make_model(tokenizer, hidden=32, layers=1, heads=2, mlp_ratio=4)
        start = [p.detach().clone() for p in model.parameters()]
        args = grpo_args(tmp_path / str(skip), skip_zero_advantage=skip, per_device_train_batch_size=16,
                         optim="sgd")  # the update is the gradient itself (Adam's first step is about its sign)
        captured, changed = run_one_step(model, args, tokenizer, HalfConstantEnv)
        assert changed
        updates.append([p.detach() - s for p, s in zip(model.parameters(), start, strict=True)])
        rows.append(len(captured["out"]["advantages"]))
    assert rows[1] == 16 and 0 < rows[0] < 16  # the even-seed groups left the batch
    for skipped, full in zip(*updates, strict=True):
        torch.testing.assert_close(skipped, full, rtol=1e-4, atol=1e-7)


def test_ppo_step_moves_parameters(tmp_path, tokenizer) -> None:
    from agentgym_r1.trainers.ppo import AgentPPOTrainer

    model = make_model(tokenizer, hidden=32, layers=1, heads=2, mlp_ratio=4)
    args = AgentPPOConfig(output_dir=str(tmp_path), rollout_batch_size=8, mini_batch_size=4, max_steps=1,
                          max_completion_length=64, max_new_tokens=8, max_turns=2, learning_rate=1e-2,
                          report_to="none", save_strategy="no", use_cpu=True, num_tasks=16)
    trainer = AgentPPOTrainer(model, args, tokenizer, make_env=CountEnv)
    before = [p.detach().clone() for p in trainer.model.policy.parameters()]
    trainer.train()
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.policy.parameters(), strict=True))
    assert "loss/value" in trainer.state.log_history[0]


def test_config_errors_say_how_to_fix(tmp_path) -> None:
    with pytest.raises(ConfigError, match="num_generations >= 2"):
        grpo_args(tmp_path, num_generations=1, per_device_train_batch_size=1)
    with pytest.raises(ConfigError, match="process_reward_weight"):
        grpo_args(tmp_path, advantage_mask=False)
    with pytest.raises(ConfigError, match="advantage_estimator"):
        grpo_args(tmp_path, advantage_estimator="vtrace")
    with pytest.raises(ConfigError, match="level='token'"):
        AgentPPOConfig(output_dir=str(tmp_path), advantage_mask=False, level="step", use_cpu=True)
    assert grpo_args(tmp_path, env_kwargs='{"source": "synthetic"}').env_kwargs == {"source": "synthetic"}
