"""GRPO and PPO with accelerate's FSDP2 plugin on 2 CPU processes (gloo) take the step 2-process DDP takes on the
same fixed batch (``dist_step``'s), and the rollout generates on the gathered full weights: greedy turns through the
trainer's own ``policy_backend`` equal DDP's, with the processes calling ``generate`` a different number of times
(a forward through the shards would all-gather with the other process and wait forever). PPO's ``save_model``
writes the gathered policy as a plain model directory.

accelerate 1.15 does not shard on CPU (the trainers refuse such a config: ``test_sharding_config.py``), so
``dist_shard`` sets accelerate's state to FSDP2 by hand; see its docstring."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from tests.trainers.kit import torchrun  # noqa: E402

ALGOS = ("grpo", "ppo")


def _launch(mode: str, tmp_path: Path) -> Path:
    out = tmp_path / mode
    torchrun(2, "tests.trainers.dist_shard", mode, str(out), str(tmp_path / f"run-{mode}"), *ALGOS, timeout=280)
    return out


def test_fsdp2_takes_the_ddp_step_and_generates_on_the_gathered_weights(tmp_path) -> None:
    fsdp, ddp = _launch("fsdp", tmp_path), _launch("ddp", tmp_path)
    for algo in ALGOS:
        a = torch.load(f"{ddp}-{algo}.pt", weights_only=False)
        b = torch.load(f"{fsdp}-{algo}.pt", weights_only=False)
        assert (a["distributed_type"], b["distributed_type"]) == ("DistributedType.MULTI_CPU", "DistributedType.FSDP")
        assert (a["parameter_types"], b["parameter_types"]) == (["Parameter"], ["DTensor"])  # b really sharded
        assert a["processes"] == b["processes"] == 2
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5, abs=1e-7)
        assert any(u.abs().sum() > 0 for u in a["update"])
        # the same gradients, averaged over the 2 processes by FSDP's reduce-scatter instead of DDP's bucketed
        # all-reduce: the same sums in another order, so float32 roundings apart (updates are lr=1e-2 x gradients of
        # order 1e-1, their roundings ~1e-9); a sharding error (a shard updated twice, or not at all) is ~1e-3
        for x, y in zip(b["update"], a["update"], strict=True):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-7)
        for rank, calls in ((0, 2), (1, 1)):
            ga = torch.load(f"{ddp}-{algo}.pt.rank{rank}.pt", weights_only=False)["generations"]
            gb = torch.load(f"{fsdp}-{algo}.pt.rank{rank}.pt", weights_only=False)["generations"]
            assert len(gb) == len(ga) == 2 * calls
            assert [ids for ids, _ in gb] == [ids for ids, _ in ga]
            for (_, la), (_, lb) in zip(ga, gb, strict=True):
                assert lb == pytest.approx(la, abs=1e-5)
        if algo == "ppo":  # gathered (FULL_STATE_DICT) and written by the main process as a model directory
            assert b["saved_policy_error"] == 0.0 and a["saved_policy_error"] == 0.0
