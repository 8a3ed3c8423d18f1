"""Diagnostic (issue 39, item 3): the hand-written SFT loop that TRL's SFTTrainer replaced (``7170a5b^``'s
``trainers/sft.py``: AdamW, warm-up ``(s + 1) / 10``, batches drawn with replacement, gradients clipped at 1) on the
rows the rollout engine makes today, with the HotpotQA proof's recipe (chunks of 50 steps, a fresh optimizer each,
seed = step count). It prints the monitoring EM after each chunk and the EM on the proof's 1,024 questions::

    PYTHONPATH=. python benchmarks/sft_old_loop.py runs/sft-old-loop 900
"""

import sys
import time

import gymnasium as gym
import torch
import train_hotpotqa_proof as P

from agentgym_r1.adapters.scratch import make_model, play_expert, render_chat, train_tokenizer
from agentgym_r1.trainers.sft import expert_rows

torch.set_num_threads(1)

out = P.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
monitor, finals = P.held_out_sets(out)
train_seeds = P.training_seeds(out)
env = gym.make(P.ENV_ID, **P.ENV_KWARGS)
texts = []
for seed in train_seeds[:300]:
    play_expert(env, seed, P.expert_actions)
    texts.append(render_chat(env.unwrapped.transcript.messages()))
tok = train_tokenizer(texts, out / "tokenizer", vocab_size=1000, split_digits=True, cross_spaces=True)
model = make_model(tok, hidden=128, layers=4, mlp_ratio=4).train()
rows = expert_rows(P.ENV_ID, P.ENV_KWARGS, train_seeds[:8000], tok, P.expert_actions, require_success=False).samples
pad = tok.pad_token_id


def collate(batch):
    n = max(len(r.prompt_ids) + len(r.completion_ids) for r in batch)
    ids, att, lab = [], [], []
    for r in batch:
        x = r.prompt_ids + r.completion_ids
        y = [-100] * len(r.prompt_ids) + [t if m else -100 for t, m in zip(r.completion_ids, r.env_mask, strict=True)]
        k = n - len(x)
        ids.append(x + [pad] * k)
        att.append([1] * len(x) + [0] * k)
        lab.append(y + [-100] * k)
    return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(att), "labels": torch.tensor(lab)}


def chunk(steps, seed):
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    model.train()
    for _ in range(steps):
        idx = torch.randint(len(rows), (16,), generator=gen).tolist()
        loss = model(**collate([rows[i] for i in idx])).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    return loss.item()


t = time.time()
steps = 0
while steps < int(sys.argv[2]):
    last = chunk(50, steps)
    steps += 50
    em = P.react_em(model, tok, monitor)
    print(f"old-loop step {steps} loss {last:.3f} monitor EM {em:.3f} {time.time() - t:.0f}s", flush=True)
for name, seeds in finals.items():
    print(name, P.react_em(model.eval(), tok, seeds), flush=True)
