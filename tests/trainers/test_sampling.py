"""Dynamic sampling and the pass-rate curriculum (issue 38, item 2): real GRPO steps on the tiny model, the rows
unchanged when both are off, equal-reward groups refilled within the bound of tries (and a batch that cannot be
filled trained on what was collected, said in the log), levels drawn by their pass rate, and a resumed run drawing
what the uninterrupted one drew."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from transformers import TrainerCallback  # noqa: E402

from agentgym_r1.core.env import Grade  # noqa: E402
from agentgym_r1.trainers.sampling import STATE_FILE, PassRateCurriculum  # noqa: E402
from tests.trainers.kit import CountEnv, HalfConstantEnv, grpo_args, tiny_model, tiny_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


class ConstantEnv(CountEnv):
    """Every episode scores 0.5: no group's rewards ever differ."""

    def _act(self, action):
        turn = super()._act(action)
        if turn.terminated:
            turn.outcome = 0.5
        return turn


class PlaySpy:
    """Records each call of the trainer's ``rollouts.play``: the resets it was given and the batch it returned."""

    def __init__(self, rollouts):
        self.calls, self.play = [], rollouts.play
        rollouts.play = self

    def __call__(self, backend, resets):
        batch = self.play(backend, resets)
        self.calls.append((list(resets), batch))
        return batch


def spied_step(model, args, tokenizer, env):
    """One GRPO step with the trainer's ``rollouts.play`` spied, and the batch the loss was scored on."""
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    trainer = AgentGRPOTrainer(model, args, tokenizer, make_env=env)
    spy = PlaySpy(trainer.rollouts)
    captured, score, play = {"trainer": trainer}, trainer._generate_and_score_completions, trainer._play

    def spy_play(prompts):
        captured["batch"] = batch = play(prompts)
        return batch

    def spy_score(inputs):
        captured["out"] = out = score(inputs)
        return out

    trainer._generate_and_score_completions = spy_score
    trainer._play = spy_play
    trainer.train()
    return captured, spy


def logged(trainer):
    """The step's log line (TRL logs and clears its metrics at each logging step)."""
    (step,) = [log for log in trainer.state.log_history if "loss" in log]
    return step


def group_rewards(batch, group):
    rewards = [e.reward for e in batch.episodes]
    return [rewards[i : i + group] for i in range(0, len(rewards), group)]


def test_sampling_off_trains_on_the_one_rollout_of_trls_resets(tmp_path, tokenizer) -> None:
    """``dynamic_sampling: false`` and no curriculum: one rollout a step, of exactly the resets TRL gave (each task
    ``num_generations`` times in a row, nothing added), and the step trains on that very batch's rows."""
    args = grpo_args(tmp_path, skip_zero_advantage=False)  # every row reaches the loss, to compare them all
    captured, spy = spied_step(tiny_model(tokenizer), args, tokenizer, HalfConstantEnv)
    trainer = captured["trainer"]
    assert len(spy.calls) == 1
    resets, batch = spy.calls[0]
    assert captured["batch"] is batch
    assert all(set(r) == {"seed"} for r in resets) and len(resets) == 8
    assert [r["seed"] for r in resets[::4]] == [r["seed"] for r in resets[3::4]]
    ids = captured["out"]["completion_ids"]
    for row, sample in zip(ids, batch.samples, strict=True):
        assert row[: len(sample.completion_ids)].tolist() == sample.completion_ids
    assert not any(k.startswith("sampling/") for log in trainer.state.log_history for k in log)


def test_dynamic_sampling_refills_groups_whose_rewards_are_equal(tmp_path, tokenizer) -> None:
    """HalfConstantEnv: tasks of even seed score 0.5 whatever is written. Their groups are set aside and new tasks
    played until every group of the batch has rewards that differ; every try is counted."""
    args = grpo_args(tmp_path, dynamic_sampling=True, dynamic_sampling_max_tries=8, per_device_train_batch_size=16)
    captured, spy = spied_step(tiny_model(tokenizer), args, tokenizer, HalfConstantEnv)
    trainer = captured["trainer"]
    first = [r["seed"] for r in spy.calls[0][0][::4]]
    assert any(s % 2 == 0 for s in first), "seed 0's first batch has an even task (else the test proves nothing)"
    assert len(spy.calls) >= 2
    metrics = logged(trainer)
    assert metrics["sampling/tries"] == len(spy.calls)
    assert metrics["sampling/episodes"] == sum(len(b.episodes) for _, b in spy.calls)
    assert metrics["sampling/unfilled_groups"] == 0
    for rewards in group_rewards(captured["batch"], 4):
        assert max(rewards) - min(rewards) > 1e-6
    for resets, _ in spy.calls[1:]:  # each refill plays only the groups still missing
        assert len(resets) % 4 == 0 and len(resets) < 16
    assert len(captured["out"]["completion_ids"]) == 16


def test_an_unfillable_batch_trains_on_what_was_collected(tmp_path, tokenizer, caplog) -> None:
    """No group can ever differ: the step stops after dynamic_sampling_max_tries rollouts (never loops on), trains on
    the groups played last, and the log says how many groups were left unfilled."""
    args = grpo_args(tmp_path, dynamic_sampling=True, dynamic_sampling_max_tries=3, skip_zero_advantage=False)
    with caplog.at_level(logging.WARNING, logger="agentgym_r1.trainers.sampling"):
        captured, spy = spied_step(tiny_model(tokenizer), args, tokenizer, ConstantEnv)
    trainer = captured["trainer"]
    assert len(spy.calls) == 3
    metrics = logged(trainer)
    assert metrics["sampling/tries"] == 3 and metrics["sampling/unfilled_groups"] == 2
    assert metrics["sampling/kept_groups"] == 0
    assert "2 of 2 groups still had equal rewards after 3 rollouts" in caplog.text
    played_last = {e.episode_id for _, b in spy.calls[1:] for e in b.episodes}
    assert {e.episode_id for e in captured["batch"].episodes} <= played_last
    assert len(captured["out"]["completion_ids"]) == 8
    assert float(captured["out"]["advantages"].abs().sum()) == 0.0


def test_dynamic_sampling_changes_nothing_when_every_group_differs(tmp_path, tokenizer) -> None:
    """CountEnv's samples differ by the length of what is written: one try, the same rows as with sampling off."""
    rows = []
    for dynamic in (False, True):
        torch.manual_seed(0)
        args = grpo_args(tmp_path / str(dynamic), dynamic_sampling=dynamic)
        captured, spy = spied_step(tiny_model(tokenizer), args, tokenizer, CountEnv)
        assert len(spy.calls) == 1
        rows.append([s.completion_ids for s in captured["batch"].samples])
    assert rows[0] == rows[1]


def test_the_curriculum_favours_levels_inside_the_band() -> None:
    curriculum = PassRateCurriculum(["easy", "medium", "hard"], [0.2, 0.8], window=4, explore=0.1)
    np.testing.assert_allclose(curriculum.weights(), [1 / 3] * 3)  # nothing tried yet: all in play
    for rate in (1.0, 1.0, 0.75, 1.0, 1.0):  # the window keeps the last 4: mean 0.9375, too easy
        curriculum.record(0, rate)
    curriculum.record(1, 0.5)
    curriculum.record(2, 0.0)
    assert curriculum.pass_rate(0) == pytest.approx(0.9375)
    np.testing.assert_allclose(curriculum.weights(), np.array([0.1, 1.0, 0.1]) / 1.2)
    drawn = curriculum.draw(np.random.default_rng(0), 2000)
    assert 0.75 < drawn.count(1) / 2000 < 0.91 and drawn.count(0) > 0 and drawn.count(2) > 0
    stuck = PassRateCurriculum(["easy", "hard"], [0.2, 0.8], window=4, explore=0.0)
    stuck.record(0, 1.0)
    stuck.record(1, 0.0)
    np.testing.assert_allclose(stuck.weights(), [0.5, 0.5])  # every level outside the band: uniform, never stuck


def gsm8k_args(tmp_path, **kw):
    return grpo_args(
        tmp_path,
        env_id="AgentR1/GSM8K-v0",
        env_kwargs={"source": "synthetic", "system_prompt": "Solve it."},
        curriculum="pass_rate",
        per_device_train_batch_size=8,
        num_generations=2,
        max_turns=1,
        max_prompt_tokens=1500,  # a hard problem's prompt is ~1,070 tokens with the tiny tokenizer
        save_strategy="steps",
        save_steps=1,
        **kw,
    )


class Levels(TrainerCallback):
    """The levels the curriculum drew at each step, and its state after each."""

    def __init__(self):
        self.trainer, self.steps, self.states = None, [], []

    def on_step_end(self, args, state, control, **kw):
        self.steps.append(list(self.trainer.sampling.last_levels))
        self.states.append(json.loads(json.dumps(self.trainer.sampling.state())))


def curriculum_run(tmp_path, tokenizer, model, max_steps, resume=None):
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    levels = Levels()
    trainer = AgentGRPOTrainer(model, gsm8k_args(tmp_path, max_steps=max_steps), tokenizer, callbacks=[levels])
    levels.trainer = trainer
    trainer.train(resume_from_checkpoint=resume)
    return trainer, levels


def test_a_resumed_curriculum_draws_what_the_uninterrupted_run_drew(tmp_path, tokenizer) -> None:
    """Two steps in one run, against one step, a checkpoint, and a resumed run's step: the resumed step draws the same
    levels and ends in the same curriculum state (draw generator and pass rates from sampling_state.json)."""
    torch.manual_seed(0)
    model = tiny_model(tokenizer)
    trainer, whole = curriculum_run(tmp_path / "whole", tokenizer, model, max_steps=2)
    assert len(whole.steps) == 2 and all(len(levels) == 4 for levels in whole.steps)
    assert any("curriculum/easy/share" in log for log in trainer.state.log_history)
    checkpoint = tmp_path / "whole" / "checkpoint-1"
    saved = json.loads((checkpoint / STATE_FILE).read_text())
    assert saved == whole.states[0]
    from transformers import AutoModelForCausalLM

    resumed_model = AutoModelForCausalLM.from_pretrained(checkpoint).train()
    _, resumed = curriculum_run(tmp_path / "whole", tokenizer, resumed_model, max_steps=2, resume=str(checkpoint))
    assert resumed.steps == [whole.steps[1]]
    assert resumed.states[-1]["rng"] == whole.states[1]["rng"]


class ParitySuccessEnv(CountEnv):
    """CountEnv (rewards differ by length) whose answer succeeds when it has an even length: successes can differ."""

    def _act(self, action):
        turn = super()._act(action)
        if turn.terminated:
            self.grade = Grade(turn.outcome, len(action) % 2 == 0)
        return turn


def test_the_success_filter_sets_aside_groups_that_differ_only_by_reward(tmp_path, tokenizer, caplog) -> None:
    """``dynamic_sampling_filter: success`` (DAPO's filter). CountEnv's rewards differ by length but nothing ever
    succeeds: the reward filter keeps every group in one try (the test above), the success filter keeps none and
    stops at its bound of tries, saying so. The shaped-reward case the HotpotQA sampling benchmark met."""
    args = grpo_args(tmp_path, dynamic_sampling=True, dynamic_sampling_max_tries=3, dynamic_sampling_filter="success")
    with caplog.at_level(logging.WARNING, logger="agentgym_r1.trainers.sampling"):
        captured, spy = spied_step(tiny_model(tokenizer), args, tokenizer, CountEnv)
    metrics = logged(captured["trainer"])
    assert len(spy.calls) == 3 and metrics["sampling/tries"] == 3
    assert metrics["sampling/kept_groups"] == 0 and metrics["sampling/unfilled_groups"] == 2
    assert "2 of 2 groups still had equal successes after 3 rollouts" in caplog.text
    assert "those 2 groups with no success signal" in caplog.text


def test_the_success_filter_keeps_groups_whose_successes_differ(tmp_path, tokenizer) -> None:
    """Every group the success filter keeps has a sample that succeeded and one that did not; the groups it could not
    fill are counted; the reward filter on the same env keeps groups whose successes are all equal."""
    kept = {}
    for keep in ("success", "reward"):
        torch.manual_seed(0)
        args = grpo_args(
            tmp_path / keep,
            dynamic_sampling=True,
            dynamic_sampling_max_tries=6,
            dynamic_sampling_filter=keep,
            per_device_train_batch_size=16,
        )
        captured, spy = spied_step(tiny_model(tokenizer), args, tokenizer, ParitySuccessEnv)
        groups = [captured["batch"].episodes[i : i + 4] for i in range(0, 16, 4)]
        kept[keep] = sum(len({e.success for e in g}) > 1 for g in groups)
        unfilled = logged(captured["trainer"])["sampling/unfilled_groups"]
        if keep == "success":
            assert kept[keep] == 4 - unfilled and kept[keep] >= 1
            played = [e for _, b in spy.calls for e in b.episodes]
            assert any(e.success for e in played) and not all(e.success for e in played)
    assert kept["reward"] < 4, "the reward filter kept a group with equal successes (else the test proves nothing)"
