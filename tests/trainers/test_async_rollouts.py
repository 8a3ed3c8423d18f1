"""Asynchronous rollouts (``max_staleness``, issue 38 item 1): the synchronous loop unchanged at 0; at 1, rows
generated in another process carry the policy version that sampled them, the loss's importance ratio departs from 1
once the policy moved, rows older than the bound are dropped and counted, and a killed generator is restarted or
stops the run with a named error. Real generator processes (spawned), a tiny model, a few steps."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch

pytest.importorskip("trl")

from agentgym_r1.error import WorkerTimeout
from agentgym_r1.trainers import async_rollouts as AR
from agentgym_r1.trainers.grpo import AgentGRPOTrainer
from tests.trainers.kit import CountEnv, grpo_args, tiny_model, tiny_tokenizer


def trained_rows(tmp_path, steps: int, **kw):
    """Train ``steps`` steps; each step's rows (as TRL got them), the async metrics logged, and the final weights."""
    torch.manual_seed(0)
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    trainer = AgentGRPOTrainer(model, grpo_args(tmp_path, max_steps=steps, **kw), tok, make_env=CountEnv)
    rows, play = [], trainer._play

    def spy(prompts):
        batch = play(prompts)
        rows.append((list(prompts), batch))
        return batch

    trainer._play = spy
    trainer.train()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return trainer, rows, weights


def _content(batch):
    return [(r.prompt_ids, r.completion_ids, r.logprobs, r.env_mask, r.reward) for r in batch.samples]


def test_max_staleness_0_is_the_synchronous_loop_row_for_row(tmp_path) -> None:
    trainer, rows, weights = trained_rows(tmp_path / "a", 2)
    zero, rows0, weights0 = trained_rows(tmp_path / "b", 2, max_staleness=0)
    assert trainer.async_rollouts is None and zero.async_rollouts is None  # no generator process
    assert [p for p, _ in rows0] == [p for p, _ in rows]
    assert [_content(b) for _, b in rows0] == [_content(b) for _, b in rows]
    assert [[r.policy_version for r in b.samples] for _, b in rows0] == [[0] * 8, [1] * 8]
    assert torch.equal(weights0, weights)
    assert not any(k.startswith("async/") for h in zero.state.log_history for k in h)


def test_stale_rows_carry_their_version_and_the_loss_corrects_them(tmp_path) -> None:
    """Batch 1 is played while step 0 trains, so by the weights of version 0, and trained at version 1: its rows say
    so, and the importance ratio (current / sampling policy) departs from 1, where at step 0 it is 1. The tasks are
    those TRL hands ``rollout_func`` at each step (the pipeline raises otherwise)."""
    trainer, rows, _ = trained_rows(tmp_path, 3, max_staleness=1)
    assert trainer.async_rollouts.process is None  # stopped at the end of training
    versions = [{r.policy_version for r in b.samples} for _, b in rows]
    assert versions[0] == {0} and versions[1] <= {0, 1} and versions[2] <= {1, 2}, versions  # queued a step ahead
    logs = [h for h in trainer.state.log_history if "async/is_ratio_max" in h]
    assert len(logs) == 3
    for step, (log, version) in enumerate(zip(logs, versions, strict=True)):
        stale = step - min(version)
        assert log["async/staleness_max"] == stale and log[f"async/staleness_{stale}"] == 1.0, log
        moved = max(abs(log["async/is_ratio_max"] - 1), abs(log["async/is_ratio_min"] - 1))
        # the same weights differ by ~1e-3 between generate's and the loss's forward; a step of lr 1e-2 moves ~0.2
        assert (moved > 0.05) if stale else (moved < 0.01), (step, log)
        assert log["async/dropped_rows"] == 0
    # batch 1 starts as batch 0 ends and batch 2 as step 1 begins, while the trainer updates: stale rows
    assert any(log["async/staleness_max"] == 1 for log in logs[1:]), versions
    assert 0.0 < logs[-1]["async/wait_share"] <= 1.0


def test_truncated_is_weights_cap_and_mask() -> None:
    current = torch.tensor([[0.0, 0.0, -5.0, 0.0]])
    sampling = torch.tensor([[0.0, -2.0, -1.0, float("nan")]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    weights, stats = AR.truncated_is_weights(current, sampling, mask, 3.0)
    assert torch.allclose(weights, torch.tensor([[1.0, 3.0, torch.exp(torch.tensor(-4.0)).item(), 1.0]]))
    assert stats["async/is_clipped"] == 0.25 and stats["async/is_ratio_max"] == pytest.approx(torch.e**2)
    off = torch.tensor([[1.0, 0.0, 1.0, 1.0]])
    assert AR.truncated_is_weights(current, sampling, off, 3.0)[0][0, 1] == 1.0  # not an agent token
    adv = AR.corrected_advantages(torch.tensor([2.0]), weights)
    assert torch.allclose(adv, 2 * weights)


def _pipeline(max_staleness: int, max_restarts: int):
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    args = grpo_args("/unused", max_staleness=max_staleness)
    batches = [[json.dumps({"seed": 10 * k + i // 2}) for i in range(4)] for k in range(8)]
    spec = AR.GeneratorSpec(model.config, torch.float32, tok, AR.rollout_args(args), CountEnv, 1, 1)
    pipeline = AR.AsyncRollouts(spec, iter(batches), max_staleness, timeout=600, max_restarts=max_restarts)
    return pipeline, model, batches


def test_rows_past_max_staleness_are_dropped_and_a_killed_generator_is_restarted_then_stops() -> None:
    pipeline, model, batches = _pipeline(max_staleness=1, max_restarts=1)
    try:
        pipeline.push(0, model)
        # the tasks queued ahead must be those TRL hands rollout_func: anything else is refused, not trained on
        with pytest.raises(AR.AsyncRolloutError, match="other tasks"):
            pipeline.next_batch(0, batches[1])
        first = pipeline.next_batch(0, batches[0])
        assert {r.policy_version for r in first.samples} == {0}
        # batch 1 was queued with batch 0 and played by version 0 (the only weights pushed); two updates later
        assert pipeline.received_version(1) == 0
        pipeline.push(2, model)
        second = pipeline.next_batch(2, batches[1])
        assert pipeline.dropped_rows == 4  # version 0 at version 2: dropped, and played again
        assert {r.policy_version for r in second.samples} == {2}
        assert pipeline.metrics()["async/dropped_rows"] == 4
        # a killed generator is restarted with the newest weights and the batches it had not finished
        os.kill(pipeline.process.pid, signal.SIGKILL)
        pipeline.process.join(timeout=30)
        third = pipeline.next_batch(2, batches[2])
        assert pipeline.restarts == 1 and {r.policy_version for r in third.samples} == {2}
        # past max_restarts the run stops with the named error, not a hang
        os.kill(pipeline.process.pid, signal.SIGKILL)
        pipeline.process.join(timeout=30)
        with pytest.raises(AR.GeneratorDiedError, match="exited with code -9"):
            pipeline.next_batch(2, batches[3])
        assert pipeline.process is None
    finally:
        pipeline.close()


def test_a_generator_that_gives_no_batch_stops_the_run_within_its_timeout() -> None:
    """No weights are ever pushed, so the generator waits for version 0 forever: the trainer's wait is bounded,
    ends in the named error, and the generator is stopped."""
    pipeline, _, batches = _pipeline(max_staleness=1, max_restarts=0)
    pipeline.timeout = 2.0
    try:
        with pytest.raises(WorkerTimeout, match="no batch in 2 s"):
            pipeline.next_batch(0, batches[0])
        assert pipeline.process is None
    finally:
        pipeline.close()
