"""One GRPO or PPO step on a fixed batch, run under ``accelerate launch`` with 1 or 2 processes by
``test_distributed.py``: writes each row's advantage sum (gathered), the logged loss and the parameter update.

The batch is fixed: a scripted backend writes, for global row ``g`` (its process's offset plus its local index),
an action whose length depends on ``g`` only, so both layouts play exactly the same episodes, and the groups of
``num_generations`` samples are split across the two processes."""

from __future__ import annotations

import sys

import torch
from accelerate import PartialState

from agentgym_r1.adapters.backends.base import Generation
from tests.trainers.kit import CountEnv, grpo_args, ppo_args, tiny_model, tiny_tokenizer

ROWS = 8  # global rows per step


class RowScripted:
    """Turn ``t`` of global row ``g`` is ``'1' * (1 + (g * 3 + t) % 7)`` and the eos token."""

    def __init__(self, tokenizer, offset: int) -> None:
        self.tokenizer, self.offset, self.turn = tokenizer, offset, 0

    def generate(self, contexts, budgets, params):
        out = []
        for r, budget in enumerate(budgets):
            g = self.offset + r
            ids = self.tokenizer.encode("1" * (1 + (g * 3 + self.turn) % 7))[: budget - 1]
            ids.append(self.tokenizer.eos_token_id)
            out.append(Generation(ids, [-0.5] * len(ids), "eos"))
        self.turn = (self.turn + 1) % 2
        return out


def main(algo: str, out_path: str, tmp: str) -> None:
    state = PartialState()
    local = ROWS // state.num_processes
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    model = tiny_model(tok)
    backend = RowScripted(tok, state.process_index * local)
    if algo == "grpo":
        from agentgym_r1.trainers.grpo import AgentGRPOTrainer

        args = grpo_args(tmp, per_device_train_batch_size=local, num_generations=4, optim="sgd",
                         skip_zero_advantage=False, seed=0, data_seed=0)
        trainer = AgentGRPOTrainer(model, args, tok, make_env=CountEnv, backend=backend)
        score = trainer._generate_and_score_completions
        seen = {}

        def spy(inputs):
            seen["out"] = out = score(inputs)
            return out

        trainer._generate_and_score_completions = spy
    else:
        from agentgym_r1.trainers.ppo import AgentPPOTrainer

        args = ppo_args(tmp, rollout_batch_size=local, mini_batch_size=local, ppo_epochs=1, optim="sgd", seed=0,
                        data_seed=0)
        trainer = AgentPPOTrainer(model, args, tok, make_env=CountEnv, backend=backend)
        score, seen = trainer._score, {}

        def spy(model, batch):
            seen["out"] = out = score(model, batch)
            return out

        trainer._score = spy
    params = trainer.model if algo == "ppo" else model
    before = [p.detach().clone() for p in params.parameters()]
    trainer.train()
    adv = seen["out"]["advantages"]
    rows = (adv.unsqueeze(1) if adv.dim() == 1 else adv).sum(dim=1)
    rows = trainer.accelerator.gather(rows.contiguous())
    if state.is_main_process:
        update = [(p.detach() - b) for p, b in zip(params.parameters(), before, strict=True)]
        torch.save({"advantages": rows.cpu(), "loss": trainer.state.log_history[0]["loss"], "update": update},
                   out_path)


if __name__ == "__main__":
    main(*sys.argv[1:4])
