"""The HotpotQA proof's supervised phases (``train_hotpotqa_proof.py sft`` and ``rag``): the ReAct SFT on expert
episodes, stopped at a monitoring EM target or a step budget, and the naive RAG baseline."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from hotpotqa_proof_eval import RAG_RECORD, rag_em, rag_prompt, react_em, save_rag_result, save_react_result
from hotpotqa_proof_tasks import (
    ENV_ID,
    ENV_KWARGS,
    PROVENANCE,
    TOP_K,
    TRAIN_SEEDS,
    expert_actions,
    gold,
    held_out_sets,
    questions,
    scored_label,
    training_seeds,
)


def agent_turns(demo: Any) -> list[list[int]]:
    """The agent's turns of an expert episode (runs of ``env_mask`` 1)."""
    turns: list[list[int]] = []
    previous = 0
    for token, mask in zip(demo.completion_ids, demo.env_mask, strict=True):
        if mask:
            if not previous:
                turns.append([])
            turns[-1].append(token)
        previous = mask
    return turns


def run_sft(
    out: Path,
    target: float,
    chunk: int,
    max_steps: int,
    num_episodes: int,
    lr: float,
    batch: int,
    layers: int,
    start_from: Path | None = None,
    resume: int = 0,
    hidden: int = 128,
    vocab: int = 1000,
    tokenizer_corpus: str = "episodes",
    pieces: str = "cross-spaces",
) -> None:
    import gymnasium as gym

    from agentgym_r1.adapters.scratch import make_model, play_expert, render_chat, train_tokenizer
    from agentgym_r1.trainers.sft import expert_rows, sft

    if num_episodes > TRAIN_SEEDS:
        raise SystemExit(f"--sft-episodes is at most {TRAIN_SEEDS} (the training seeds)")
    monitor, finals = held_out_sets(out)
    train_seeds = training_seeds(out)
    env = gym.make(ENV_ID, **ENV_KWARGS)
    if resume:  # continue an SFT checkpoint that had `resume` steps: a chunk draws its batches with the step count at
        # its start as seed and starts a fresh optimizer, so this is the run that would have gone on (same tokenizer)
        from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

        tokenizer = PreTrainedTokenizerFast.from_pretrained(start_from)
        model = AutoModelForCausalLM.from_pretrained(start_from).train()
    else:  # the tokenizer is trained on 300 expert episodes (and, with tokenizer_corpus "kb", every KB passage)
        texts = []
        for seed in train_seeds[:300]:
            play_expert(env, seed, expert_actions)
            texts.append(render_chat(env.unwrapped.transcript.messages()))
        if tokenizer_corpus == "kb":  # the retrieval corpus, as a search result shows each passage
            from agentgym_r1.envs.hotpotqa.tools import render_hits
            from agentgym_r1.retrieval import Hit

            texts += [render_hits([Hit(doc, 0.0, 0)]) for doc in env.unwrapped.data.documents]
        tokenizer = train_tokenizer(
            texts,
            out / "tokenizer",
            vocab_size=vocab,
            split_digits=True,
            cross_spaces=pieces == "cross-spaces",
            words=pieces == "words",
        )
        model = make_model(tokenizer, hidden=hidden, layers=layers, mlp_ratio=4).train()
    episodes = expert_rows(
        ENV_ID, ENV_KWARGS, train_seeds[:num_episodes], tokenizer, expert_actions, require_success=False
    ).samples
    lengths = sorted(len(e.prompt_ids) + len(e.completion_ids) for e in episodes)
    longest = max(len(chat_ids) for e in episodes for chat_ids in agent_turns(e))
    print(
        f"tiny Qwen2: {sum(p.numel() for p in model.parameters())} parameters, vocab {len(tokenizer)}, "
        f"{len(episodes)} expert episodes ({sum(e.success for e in episodes)} solved), prompt "
        f"{len(episodes[0].prompt_ids)} tokens, episode median {lengths[len(lengths) // 2]} max {lengths[-1]}, "
        f"longest action {longest} tokens",
        flush=True,
    )
    start, steps, em = time.time(), resume, 0.0
    curve = []  # a continued SFT's learning curve, beside the RL runs' (`plot` draws it with them)
    if resume:
        curve.append({"step": 0, "minutes": 0.0, "em": react_em(model, tokenizer, monitor)})
        start = time.time()
    while steps < max_steps:  # the last chunk is cut at max_steps: its batches are the whole chunk's first ones
        size = min(chunk, max_steps - steps)
        sft(model, tokenizer, episodes, steps=size, batch_size=batch, lr=lr, seed=steps)
        steps += size
        em = react_em(model, tokenizer, monitor)
        print(f"sft step {steps:4d}  held-out EM {em:.3f}  {time.time() - start:.0f}s", flush=True)
        if resume:
            curve.append({"step": steps - resume, "minutes": (time.time() - start) / 60, "em": em})
            (out / "sft-continued").mkdir(exist_ok=True)
            (out / "sft-continued" / "curve.json").write_text(
                json.dumps({"run": "sft-continued", "curve": curve, "provenance": PROVENANCE})
            )
        for path in (out / "sft", out / "sft-steps" / f"step{steps}"):  # the last chunk, and every chunk
            model.save_pretrained(path)
            tokenizer.save_pretrained(path)
        if em >= target:
            break
    print(f"SFT checkpoint: {out / 'sft'}  steps {steps}  monitoring EM {em:.3f}", flush=True)
    minutes = (time.time() - start) / 60
    for name, seeds in finals.items():  # with per-question outcomes, so a study pairs it with the other rows
        save_react_result(
            out,
            scored_label("sft", name),
            model.eval(),
            tokenizer,
            seeds,
            steps=steps,
            minutes=minutes,
            monitor=em,
            held_out=name,
        )


def run_rag(
    out: Path,
    chunk: int,
    minutes: float,
    patience: int,
    num_episodes: int,
    lr: float,
    batch: int,
    layers: int,
    hidden: int = 128,
    k: int = TOP_K,
    steps_budget: int | None = None,
    tokenizer_from: Path | None = None,
) -> None:
    """The naive RAG baseline: a fresh model of the same size and tokenizer (``tokenizer_from``, else the ReAct
    run's ``OUT/tokenizer``), SFT on one retrieval of ``k`` passages per training question and its answer. With
    ``steps_budget`` it trains exactly that many steps and keeps the last (a confirmatory budget in updates);
    without, it trains for ``minutes`` and keeps the chunk with the best monitoring EM, stopping after ``patience``
    chunks without improvement (the earlier runs)."""
    import copy

    import gymnasium as gym
    from transformers import PreTrainedTokenizerFast

    from agentgym_r1.adapters import ChatTokenizer
    from agentgym_r1.adapters.scratch import make_model
    from agentgym_r1.trainers.sft import answer_row, sft

    monitor, finals = held_out_sets(out)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tokenizer_from or out / "tokenizer")
    model = make_model(tokenizer, hidden=hidden, layers=layers, mlp_ratio=4).train()
    chat = ChatTokenizer(tokenizer)
    env = gym.make(ENV_ID, **ENV_KWARGS)
    demos = []
    for task in questions(training_seeds(out)[:num_episodes]):
        answer = [*chat.encode(f"<answer>{gold(task)}</answer>"), tokenizer.eos_token_id]
        demos.append(answer_row(rag_prompt(chat, env.unwrapped.retriever, task.prompt, k), answer, f"rag-{len(demos)}"))
    env.close()
    lengths = sorted(len(d.prompt_ids) for d in demos)
    print(
        f"naive RAG, top {k}: {len(demos)} examples, prompt median {lengths[len(lengths) // 2]} max {lengths[-1]} "
        "tokens",
        flush=True,
    )
    start, steps, best, best_state, best_steps, stale = time.time(), 0, -1.0, None, 0, 0
    while steps < steps_budget if steps_budget is not None else time.time() - start < minutes * 60 and stale < patience:
        step_chunk = chunk if steps_budget is None else min(chunk, steps_budget - steps)
        sft(model, tokenizer, demos, steps=step_chunk, batch_size=batch, lr=lr, seed=steps)
        steps += step_chunk
        em = rag_em(model, tokenizer, monitor, k)
        print(f"rag step {steps:4d}  held-out EM {em:.3f}  {time.time() - start:.0f}s", flush=True)
        if steps_budget is not None:  # a budget in updates keeps the last chunk
            best, best_steps = em, steps
        elif em > best:
            best, best_state, best_steps, stale = em, copy.deepcopy(model.state_dict()), steps, 0
        else:
            stale += 1
    if best_state is not None:
        model.load_state_dict(best_state)
    model.save_pretrained(out / "rag")
    tokenizer.save_pretrained(out / "rag")
    (out / "rag" / RAG_RECORD).write_text(json.dumps({"k": k, "steps": best_steps, "provenance": PROVENANCE}))
    print(f"RAG checkpoint: {out / 'rag'}  kept step {best_steps} of {steps}  monitoring EM {best:.3f}", flush=True)
    minutes = (time.time() - start) / 60
    for name, seeds in finals.items():
        save_rag_result(
            out,
            scored_label("rag", name),
            model,
            tokenizer,
            seeds,
            k,
            steps=best_steps,
            minutes=minutes,
            monitor=best,
            held_out=name,
            budget="updates" if steps_budget is not None else "minutes",
        )
