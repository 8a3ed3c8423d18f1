"""Run under ``torchrun --nproc_per_node 2`` by ``test_distributed.py``. ``budget``: GRPO under a wall-clock budget,
with a clock per process that runs at a different speed on each (1 s a step on rank 0, 2 s on rank 1): writes each
process's steps, learning rates and final parameters to ``OUT.rank<r>.pt``. ``refuse``: GRPO and PPO with
``use_cpu=False`` on a machine without a GPU (the processes never join one group): writes each trainer's error.
``step-mean``: the step layout's config with row-mean losses (refused: each process averages over its own padded
rows) and with dapo (accepted): writes the errors, ``None`` where the config was made."""

from __future__ import annotations

import os
import sys

import torch
from accelerate import PartialState

from agentgym_r1.trainers.budget import WallClockBudget
from agentgym_r1.trainers.grpo import AgentGRPOTrainer
from tests.trainers.kit import Clock, CountEnv, Tick, flat_parameters, grpo_args, tiny_model, tiny_tokenizer


def refuse(out: str, tmp: str) -> None:
    from agentgym_r1.error import ConfigError
    from agentgym_r1.trainers.ppo import AgentPPOTrainer
    from tests.trainers.kit import ppo_args

    tok = tiny_tokenizer()
    errors = {}
    for name, cls, args in [
        ("grpo", AgentGRPOTrainer, grpo_args(f"{tmp}/g", use_cpu=False, bf16=False)),
        ("ppo", AgentPPOTrainer, ppo_args(f"{tmp}/p", use_cpu=False)),
    ]:
        try:
            cls(tiny_model(tok), args, tok, make_env=CountEnv)
        except ConfigError as e:
            errors[name] = str(e)
    rank = int(os.environ["RANK"])
    torch.save(errors, f"{out}.rank{rank}.pt")


def step_mean(out: str, tmp: str) -> None:
    from agentgym_r1.error import ConfigError

    state = PartialState(cpu=True)  # as the trainers' use_cpu=True: the config sees WORLD_SIZE processes
    errors: dict[str, str | None] = {}
    for loss in ("grpo", "dr_grpo", "dapo"):
        try:
            grpo_args(f"{tmp}/{loss}", layout="step", loss_type=loss, per_device_train_batch_size=4)
            errors[loss] = None
        except ConfigError as e:
            errors[loss] = str(e)
    torch.save(errors, f"{out}.rank{state.process_index}.pt")


def main(out: str, tmp: str) -> None:
    state = PartialState(cpu=True)  # the trainers' use_cpu=True: gloo under torchrun
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    model = tiny_model(tok)
    clock = Clock()
    budget = WallClockBudget(5 / 60, clock=clock)  # 5 s: rank 0's clock spends it at step 5, rank 1's at step 3
    args = grpo_args(
        tmp,
        per_device_train_batch_size=4,
        num_generations=4,
        max_steps=12,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        seed=0,
        data_seed=0,
    )
    trainer = AgentGRPOTrainer(
        model, args, tok, make_env=CountEnv, callbacks=[Tick(clock, 1.0 + state.process_index), budget]
    )
    trainer.train()
    lrs = [log["learning_rate"] for log in trainer.state.log_history if "learning_rate" in log]
    torch.save(
        {"steps": trainer.state.global_step, "lrs": lrs, "params": flat_parameters(model)},
        f"{out}.rank{state.process_index}.pt",
    )


if __name__ == "__main__":
    {"budget": main, "refuse": refuse, "step-mean": step_mean}[sys.argv[1]](*sys.argv[2:4])
