"""One GRPO or PPO step on ``dist_step``'s fixed batch under ``torchrun --nproc_per_node 2``, unsharded (DDP) or
with accelerate's FSDP2 plugin, run by ``test_sharded.py``; then a rollout-style generation on the trained policy
through the trainer's own ``policy_backend``, with a different number of ``generate`` calls on each process.

Writes (rank 0) the parameter update, gathered to full tensors, and (every rank) the greedy generations' tokens and
log-probabilities.

accelerate 1.15 never enables FSDP on a CPU process group (``AcceleratorState.__init__`` sets
``DistributedType.FSDP`` only under GPU-type distributed types, and the trainers refuse a CPU run that asks for it:
``trainers/sharding.py``). To run the trainers' FSDP2 path here anyway, ``fsdp`` mode sets the shared
``AcceleratorState`` to what accelerate sets on GPUs (``distributed_type = FSDP`` and an FSDP2 plugin) before the
trainer is built; from there on everything is accelerate's own: ``Accelerator.prepare`` -> ``fsdp2_prepare_model``
-> torch's ``fully_shard`` over gloo."""

from __future__ import annotations

import sys

import torch
from accelerate import PartialState

from agentgym_r1.adapters import SamplingParams
from tests.trainers.dist_step import ROWS, RowScripted
from tests.trainers.kit import CountEnv, grpo_args, ppo_args, tiny_model, tiny_tokenizer


def force_fsdp2_on_cpu() -> None:
    """What ``AcceleratorState.__init__`` sets on a GPU process group with ``ACCELERATE_USE_FSDP=true`` and
    ``FSDP_VERSION=2`` (accelerate 1.15 ``state.py``), set on this CPU (gloo) one."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    state = Accelerator(cpu=True).state  # the shared state the trainer's own Accelerator then finds initialised
    # AcceleratorState copies PartialState's shared fields (distributed_type among them) each time it is made
    PartialState().distributed_type = state.distributed_type = DistributedType.FSDP
    state.fsdp_plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, reshard_after_forward=True, state_dict_type="FULL_STATE_DICT"
    )


def full(p: torch.Tensor) -> torch.Tensor:
    """A parameter as one full tensor: FSDP2 shards (``DTensor``) gathered, a collective every process joins."""
    return p.full_tensor() if hasattr(p, "full_tensor") else p.detach()


def generations(trainer, algo: str, rank: int) -> list[tuple[list[int], list[float]]]:
    """Greedy turns from the trained policy through the trainer's ``policy_backend`` (under FSDP2: the gathered
    replica); rank 0 calls ``generate`` twice, rank 1 once, as processes of a rollout do when their episodes take
    different numbers of turns. A sharded forward would all-gather with the other process and wait forever."""
    chat = trainer.rollouts.chat
    context = chat.prompt_ids([{"role": "user", "content": "Go."}])
    params = SamplingParams(max_new_tokens=6, temperature=0.0)
    select = (lambda m: m.policy) if algo == "ppo" else None
    out = []
    with trainer.rollouts.policy_backend(trainer.model_wrapped, trainer.accelerator, select=select) as backend:
        for _ in range(2 if rank == 0 else 1):
            out += [(g.ids, g.logprobs) for g in backend.generate([context, context[:-1]], [6, 6], params)]
    return out


def saved_policy_error(trainer, tmp: str, rank: int) -> float | None:
    """PPO under FSDP2: ``save_model`` gathers the full weights (FULL_STATE_DICT) on every process and writes the
    policy as a model directory on the main one; the largest difference between that file's weights and the
    trained policy's gathered weights (rank 0; ``None`` elsewhere)."""
    from transformers import AutoModelForCausalLM

    out = f"{tmp}/saved"
    trainer.save_model(out)
    policy = {k: full(v) for k, v in trainer.model.policy.state_dict().items()}
    if rank:
        return None
    saved = AutoModelForCausalLM.from_pretrained(out).state_dict()
    return max((saved[k] - v).abs().max().item() for k, v in policy.items())


def step(algo: str, mode: str, out_path: str, tmp: str, state: PartialState) -> None:
    keep: dict = {"bf16": False}  # fp32 in both modes: the comparison is about sharding, not autocast
    if mode == "fsdp":  # without it, TrainingArguments._setup_devices resets the state (AcceleratorState._reset_state)
        keep["accelerator_config"] = {"use_configured_state": True}
    local = ROWS // state.num_processes
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    model = tiny_model(tok)
    backend = RowScripted(tok, state.process_index * local)
    if algo == "grpo":
        from agentgym_r1.trainers.grpo import AgentGRPOTrainer

        args = grpo_args(tmp, per_device_train_batch_size=local, num_generations=4, optim="sgd", data_seed=0, **keep)
        trainer = AgentGRPOTrainer(model, args, tok, make_env=CountEnv, backend=backend)
    else:
        from agentgym_r1.trainers.ppo import AgentPPOTrainer

        args = ppo_args(
            tmp, rollout_batch_size=local, mini_batch_size=local, ppo_epochs=1, optim="sgd", data_seed=0, **keep
        )
        trainer = AgentPPOTrainer(model, args, tok, make_env=CountEnv, backend=backend)
    params = trainer.model if algo == "ppo" else model
    before = [p.detach().clone() for p in params.parameters()]
    trainer.train()
    sharded = [type(p).__name__ for p in params.parameters()]
    update = [full(p) - b for p, b in zip(params.parameters(), before, strict=True)]
    gen = generations(trainer, algo, state.process_index)
    saved = saved_policy_error(trainer, tmp, state.process_index) if algo == "ppo" else None
    torch.save({"generations": gen}, f"{out_path}.rank{state.process_index}.pt")
    if state.is_main_process:
        torch.save(
            {
                "processes": trainer.accelerator.num_processes,
                "distributed_type": str(trainer.accelerator.distributed_type),
                "parameter_types": sorted(set(sharded)),
                "loss": trainer.state.log_history[0]["loss"],
                "update": update,
                "saved_policy_error": saved,
            },
            out_path,
        )


if __name__ == "__main__":
    mode, out, tmp, *algos = sys.argv[1:]
    state = PartialState(cpu=True)
    if mode == "fsdp":
        force_fsdp2_on_cpu()
    for algo in algos:
        step(algo, mode, f"{out}-{algo}.pt", f"{tmp}/{algo}", state)
