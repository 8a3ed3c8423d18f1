"""One GRPO or PPO step on a fixed batch, run under ``torchrun`` with 1 or 2 processes by
``test_distributed.py``: writes each row's advantage sum and trained tokens (gathered), the logged loss and the
parameter update.

The batch is fixed: a scripted backend writes, for global row ``g`` (its process's offset plus its local index),
an action whose length depends on ``g`` only, so both layouts play exactly the same episodes, and the groups of
``num_generations`` samples are split across the two processes. Variants: ``grpo-skip`` (row skipping, with every
row of the second group scoring the same, so one process keeps 4 rows and the other none) and ``grpo-step`` (the
step layout, with episodes that end after one turn when the first action is long: the processes hold different
numbers of turn rows) and ``grpo-rowmean`` (TRL's ``loss_type="grpo"``, a mean of per-row means on each process,
which DDP then averages: the same as one process when every process holds as many rows)."""

from __future__ import annotations

import sys

import torch
from accelerate import PartialState

from agentgym_r1.adapters.backends.base import Generation
from agentgym_r1.core.env import Turn
from tests.trainers.kit import CountEnv, grpo_args, ppo_args, tiny_model, tiny_tokenizer

ROWS = 8  # global rows per step


class RowScripted:
    """The first turn of global row ``g`` is ``'1' * (1 + 3 * g % 7)`` and the eos token. The second continues from
    the first (``L`` ones): ``'1' * (1 + (3 * L + 1) % 7)``, or three ones for rows from ``constant_from`` on (their
    group scores the same on every row)."""

    def __init__(self, tokenizer, offset: int, constant_from: int = ROWS) -> None:
        self.tokenizer, self.offset, self.constant_from = tokenizer, offset, constant_from
        self.one = tokenizer.convert_tokens_to_ids("1")

    def generate(self, contexts, budgets, params):
        out = []
        for r, (context, budget) in enumerate(zip(contexts, budgets, strict=True)):
            first = list(context).count(self.one)  # the prompts hold no digit: the ones are the first action's
            if not first:
                n = 1 + 3 * (self.offset + r) % 7
            else:  # found from the context, not from r: in the step layout, episodes that ended are not asked
                n = 3 if self.offset + r >= self.constant_from else 1 + (3 * first + 1) % 7
            ids = self.tokenizer.encode("1" * n)[: budget - 1]
            ids.append(self.tokenizer.eos_token_id)
            out.append(Generation(ids, [-0.5] * len(ids), "eos"))
        return out


class ShortEnv(CountEnv):
    """CountEnv whose episode ends after the first turn when that action has 5 characters or more."""

    def _act(self, action):
        if self.turn == 0 and len(action) >= 5:
            return Turn({"kind": "answer"}, outcome=len(action) / 10, terminated=True)
        return super()._act(action)


def main(algo: str, out_path: str, tmp: str) -> None:
    state = PartialState(cpu=True)  # the trainers' use_cpu=True: gloo under torchrun
    local = ROWS // state.num_processes
    tok = tiny_tokenizer()
    torch.manual_seed(0)
    model = tiny_model(tok)
    backend = RowScripted(tok, state.process_index * local, constant_from=4 if algo == "grpo-skip" else ROWS)
    if algo.startswith("grpo"):
        from agentgym_r1.trainers.grpo import AgentGRPOTrainer

        args = grpo_args(
            tmp,
            per_device_train_batch_size=local,
            num_generations=4,
            optim="sgd",
            skip_zero_advantage=algo == "grpo-skip",
            layout="step" if algo == "grpo-step" else "concatenated",
            loss_type="grpo" if algo == "grpo-rowmean" else "dapo",
            seed=0,
            data_seed=0,
        )
        env = ShortEnv if algo == "grpo-step" else CountEnv
        trainer = AgentGRPOTrainer(model, args, tok, make_env=env, backend=backend)
        score = trainer._generate_and_score_completions
        seen = {}

        def spy(inputs):
            seen["out"] = out = score(inputs)
            return out

        trainer._generate_and_score_completions = spy
    else:
        from agentgym_r1.trainers.ppo import AgentPPOTrainer

        args = ppo_args(
            tmp, rollout_batch_size=local, mini_batch_size=local, ppo_epochs=1, optim="sgd", seed=0, data_seed=0
        )
        trainer = AgentPPOTrainer(model, args, tok, make_env=CountEnv, backend=backend)
        score, seen = trainer._score, {}

        def spy(model, batch):
            seen["out"] = out = score(model, batch)
            return out

        trainer._score = spy
    params = trainer.model if algo == "ppo" else model
    before = [p.detach().clone() for p in params.parameters()]
    trainer.train()
    out = seen["out"]
    adv = out["advantages"]
    rows = (adv.unsqueeze(1) if adv.dim() == 1 else adv).sum(dim=1)
    rows = trainer.accelerator.gather(rows.contiguous())
    mask = out["tool_mask"] if "tool_mask" in out else out["loss_mask"]
    trained = trainer.accelerator.gather(mask.sum(dim=1).float().contiguous())
    if state.is_main_process:
        update = [(p.detach() - b) for p, b in zip(params.parameters(), before, strict=True)]
        torch.save(
            {
                "processes": trainer.accelerator.num_processes,
                "advantages": rows.cpu(),
                "trained": trained.cpu(),
                "loss": trainer.state.log_history[0]["loss"],
                "update": update,
            },
            out_path,
        )


if __name__ == "__main__":
    main(*sys.argv[1:4])
