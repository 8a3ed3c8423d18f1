"""The wall-clock budget on real trainers (GRPO, PPO) with a clock the test advances: training stops at the step
that spends the budget, the learning rate follows the cosine of the time spent, evaluations come when asked and,
when told, do not count as training time; bad budgets are refused before any work. And the evaluations of a run
whose budget is a number of updates (``EveryUpdates``)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from agentgym_r1.error import ConfigError  # noqa: E402
from tests.trainers.kit import Clock, CountEnv, Tick, grpo_args, ppo_args, tiny_model, tiny_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _train(trainer_class, args, tokenizer, budget, clock, seconds_a_step=1.0):
    trainer = trainer_class(
        tiny_model(tokenizer), args, tokenizer, make_env=CountEnv, callbacks=[Tick(clock, seconds_a_step), budget]
    )
    trainer.train()
    return trainer


def test_grpo_stops_when_the_budget_is_spent_with_the_lr_on_its_cosine(tmp_path, tokenizer) -> None:
    from agentgym_r1.trainers.budget import WallClockBudget
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    clock, seen = Clock(), []
    budget = WallClockBudget(5 / 60, evaluate=lambda step, model, s: seen.append((step, s)), every=2, clock=clock)
    args = grpo_args(tmp_path, max_steps=50, lr_scheduler_type="constant", learning_rate=1e-3)
    trainer = _train(AgentGRPOTrainer, args, tokenizer, budget, clock)
    assert trainer.state.global_step == 5  # 1 s a step, a 5 s budget: stopped at step 5, not at max_steps 50
    assert seen == [(0, 0.0), (2, 2.0), (4, 4.0), (5, 5.0)]  # the start, every 2 steps, the stop
    lrs = [log["learning_rate"] for log in trainer.state.log_history if "learning_rate" in log]
    # the lr logged at step k is the one that step used (transformers 5.23 `_inner_training_loop` reads it before
    # `lr_scheduler.step()`), set by the scheduler step of step k - 1, which runs before that step's `on_step_end`
    # (where the clock ticks): the factor after max(0, k - 2) seconds
    assert lrs == pytest.approx([1e-3 * 0.5 * (1 + math.cos(math.pi * max(0, k - 2) / 5)) for k in range(1, 6)])


def test_evaluation_time_counts_only_when_asked(tmp_path, tokenizer) -> None:
    from agentgym_r1.trainers.budget import WallClockBudget
    from agentgym_r1.trainers.ppo import AgentPPOTrainer

    def slow_evaluation(clock):
        def evaluate(step, model, seconds):
            assert hasattr(model, "policy")  # PPO gives the callbacks its policy-and-critic wrapper
            clock.now += 10.0  # an evaluation takes 10 s

        return evaluate

    steps = {}
    for counted in (True, False):
        clock = Clock()
        budget = WallClockBudget(
            6 / 60, evaluate=slow_evaluation(clock), every=1, count_evaluation=counted, cosine=False, clock=clock
        )
        trainer = _train(
            AgentPPOTrainer,
            ppo_args(tmp_path / str(counted), max_steps=20),
            tokenizer,
            budget,
            clock,
            seconds_a_step=2.0,
        )
        steps[counted] = trainer.state.global_step
    assert steps == {True: 1, False: 3}  # counted, the start's evaluation alone spends 10 of the 6 s


def test_a_cosine_needs_a_lambda_schedule(tmp_path, tokenizer) -> None:
    from agentgym_r1.trainers.budget import WallClockBudget
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    model = tiny_model(tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step_lr = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)  # a scheduler of the user's, not a LambdaLR
    trainer = AgentGRPOTrainer(
        model,
        grpo_args(tmp_path),
        tokenizer,
        make_env=CountEnv,
        callbacks=[WallClockBudget(1.0)],
        optimizers=(optimizer, step_lr),
    )
    with pytest.raises(ConfigError, match="got StepLR"):
        trainer.train()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"minutes": 0}, "minutes must be a positive number"),
        ({"minutes": True}, "minutes must be a positive number"),
        ({"minutes": 1, "every": -1}, "every must be an int >= 0"),
    ],
)
def test_bad_budgets_are_refused(kwargs, message) -> None:
    from agentgym_r1.trainers.budget import WallClockBudget

    with pytest.raises(ConfigError, match=message):
        WallClockBudget(**kwargs)


def test_a_run_of_a_fixed_number_of_updates_is_evaluated_at_the_start_every_n_and_the_last(tmp_path, tokenizer):
    from agentgym_r1.trainers.budget import EveryUpdates
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    clock, points = Clock(), []
    every = EveryUpdates(lambda step, model, seconds: points.append((step, seconds)), every=2, steps=5, clock=clock)
    trainer = _train(AgentGRPOTrainer, grpo_args(tmp_path, max_steps=5), tokenizer, every, clock)
    assert trainer.state.global_step == 5  # the trainer's max_steps stops the run, not the callback
    assert points == [(0, 0.0), (2, 2.0), (4, 4.0), (5, 5.0)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"every": -1, "steps": 5}, "every must be an int >= 0"), ({"every": 2, "steps": 0}, "steps must be the run's")],
)
def test_bad_update_budgets_are_refused(kwargs, message) -> None:
    from agentgym_r1.trainers.budget import EveryUpdates

    with pytest.raises(ConfigError, match=message):
        EveryUpdates(lambda *a: None, **kwargs)
