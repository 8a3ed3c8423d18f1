"""The HotpotQA proof's evaluation and diagnosis (``train_hotpotqa_proof.py``): greedy EM of the ReAct agent and of the
naive RAG model, EM by question type, where bridge episodes went wrong and how named comparisons ended, and the
result files (with a Wilson interval and the code's provenance)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hotpotqa_proof_tasks import (
    BUDGET,
    ENV_ID,
    ENV_KWARGS,
    MAX_NEW_TOKENS,
    MAX_TURNS,
    N_FINAL,
    PROVENANCE,
    TOP_K,
    question_type,
    questions,
    world,
)

RAG_SYSTEM = "Answer the question from the passage."
RAG_RECORD = "rag.json"  # beside a naive RAG checkpoint's weights: the k it retrieves and its steps
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def react_em(model: Any, tokenizer: Any, seeds: Sequence[int]) -> float:
    """Greedy EM of the ReAct agent on the held-out questions of ``seeds``."""
    return sum(react_solved(model, tokenizer, seeds)) / len(seeds)


def react_solved(model: Any, tokenizer: Any, seeds: Sequence[int]) -> list[bool]:
    """Whether the greedy ReAct agent answers each question of ``seeds`` exactly."""
    return [e.success for e in react_episodes(model, tokenizer, seeds)]


def react_episodes(model: Any, tokenizer: Any, seeds: Sequence[int]) -> list[Any]:
    """The greedy ReAct agent's episodes on the questions of ``seeds``, in order."""
    from agentgym_r1.adapters import ChatTokenizer, RolloutConfig, RolloutEngine, SamplingParams
    from agentgym_r1.adapters.backends.hf import HFBackend

    chat = ChatTokenizer(tokenizer)
    config = RolloutConfig(
        max_turns=MAX_TURNS,
        max_context_tokens=1024,
        max_completion_tokens=BUDGET["completion"],
        seed=None,
        sampling=SamplingParams(max_new_tokens=MAX_NEW_TOKENS, temperature=0.0),
    )
    was_training = model.training
    engine = RolloutEngine(HFBackend(model, chat, neutral=True), chat, config)
    rank, processes = world()
    share = -(-len(seeds) // processes)  # under torchrun each process plays its slice of the questions
    mine = list(seeds[rank * share : (rank + 1) * share])
    episodes: list[Any] = []
    try:
        for start in range(0, len(mine), 256):
            batch = engine.rollout(
                [{"env": ENV_ID, "env_kwargs": ENV_KWARGS, "seed": s} for s in mine[start : start + 256]]
            )
            episodes += batch.episodes
    finally:
        engine.close()
        model.train(was_training)
    if processes == 1:
        return episodes
    from accelerate.utils import gather_object

    return gather_object(episodes)  # the slices in rank order: the questions' order


def tag_bodies(episode: Any, tag: str) -> list[str]:
    """The bodies of ``<tag>...</tag>`` in an episode's actions, in order, as ``TagParser.parse`` reads them (an
    unclosed tag makes its turn invalid: no body)."""
    from agentgym_r1.core.parsers import tag_spans

    return [body.strip() for turn in episode.turns for _, body in tag_spans(turn.action, f"<{tag}>", f"</{tag}>") or []]


BRIDGE_OUTCOMES = (
    "solved",
    "first query is not the question's entity",
    "second query is not the bridge entity",
    "wrong answer after both right queries",
)


def bridge_outcome(task: Any, episode: Any) -> str:
    """Where a greedy bridge episode went wrong (one of :data:`BRIDGE_OUTCOMES`): the queries are compared with the
    supporting titles exactly, so a query a letter off counts as wrong even where BM25 still finds the passage."""
    from agentgym_r1.leaderboard.baselines.hotpotqa import supporting_titles

    if episode.success:
        return BRIDGE_OUTCOMES[0]
    titles = supporting_titles(task.meta)
    queries = tag_bodies(episode, "search")
    for i, title in enumerate(titles[:2]):
        if len(queries) <= i or queries[i] != title:
            return BRIDGE_OUTCOMES[1 + i]
    return BRIDGE_OUTCOMES[3]


def rag_prompt(chat: Any, retriever: Any, question: str, k: int = TOP_K) -> list[int]:
    """The naive RAG prompt: the question, then the top ``k`` passages the question retrieves (BM25), best first."""
    from agentgym_r1.envs.hotpotqa.tools import render_hits

    content = f"{question}\n\n{render_hits(retriever.search(question, k))}"
    return chat.prompt_ids([{"role": "system", "content": RAG_SYSTEM}, {"role": "user", "content": content}])


def rag_k(checkpoint: Path) -> int:
    """The ``k`` a naive RAG checkpoint was trained with (``rag.json`` beside its weights; 1 for the earlier ones)."""
    path = Path(checkpoint) / RAG_RECORD
    return int(json.loads(path.read_text())["k"]) if path.exists() else TOP_K


def rag_em(model: Any, tokenizer: Any, seeds: Sequence[int], k: int = TOP_K) -> float:
    """Greedy EM of the naive RAG model: one retrieval of ``k`` passages with the question, then the answer."""
    solved = rag_solved(model, tokenizer, seeds, k)
    return sum(solved) / len(solved)


def rag_solved(model: Any, tokenizer: Any, seeds: Sequence[int], k: int = TOP_K) -> list[bool]:
    """Per question of ``seeds``, whether the naive RAG model's greedy answer is an exact match."""
    import gymnasium as gym
    import torch

    from agentgym_r1.adapters import ChatTokenizer
    from agentgym_r1.core.rewards import qa_scores

    chat = ChatTokenizer(tokenizer)
    env = gym.make(ENV_ID, **ENV_KWARGS)
    retriever = env.unwrapped.retriever
    tasks = questions(seeds)
    was_training = model.training
    model.eval()
    solved: list[bool] = []
    for start in range(0, len(tasks), 128):
        chunk = tasks[start : start + 128]
        prompts = [rag_prompt(chat, retriever, t.prompt, k) for t in chunk]
        width = max(map(len, prompts))
        ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
        attn = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=attn,
                max_new_tokens=MAX_NEW_TOKENS,
                do_sample=False,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
        for task, row in zip(chunk, out[:, width:].tolist(), strict=True):
            m = ANSWER.search(tokenizer.decode(row, skip_special_tokens=True))
            solved.append(bool(m) and qa_scores(m[1], task.answer)["em"] == 1.0)
    env.close()
    model.train(was_training)
    return solved


def save_rag_result(
    out: Path, label: str, model: Any, tokenizer: Any, seeds: Sequence[int], k: int, **extra: Any
) -> None:
    """The naive RAG model's greedy EM on ``seeds``, overall and by question type, per question (for a paired test),
    saved as ``label``'s result."""
    solved = rag_solved(model, tokenizer, seeds, k)
    save_result(
        out,
        label,
        sum(solved) / len(solved),
        n=len(solved),
        by_type=em_by_type(questions(seeds), solved),
        solved=[int(x) for x in solved],
        seeds=list(seeds),
        rag_k=k,
        **extra,
    )


def em_by_type(tasks: Sequence[Any], solved: Sequence[bool]) -> dict[str, float]:
    """EM on each question type among ``tasks`` (bridge, named comparison, yes/no comparison), printed."""
    kinds: dict[str, list[bool]] = {}
    for task, ok in zip(tasks, solved, strict=True):
        kinds.setdefault(question_type(task), []).append(ok)
    by_type = {kind: sum(oks) / len(oks) for kind, oks in sorted(kinds.items())}
    if not world()[0]:
        print(
            "EM by question type: " + ", ".join(f"{k} {100 * v:.1f}% of {len(kinds[k])}" for k, v in by_type.items()),
            flush=True,
        )
    return by_type


def save_result(out: Path, label: str, em: float, n: int = N_FINAL, **extra: Any) -> None:
    """``label``'s held-out EM on ``n`` questions with its Wilson interval, and the code's provenance."""
    from agentgym_r1.leaderboard.board import wilson

    if world()[0]:
        return
    stat = wilson(round(em * n), n)
    row = {
        "run": label,
        "em": stat.value,
        "low": stat.low,
        "high": stat.high,
        "n": n,
        **extra,
        "provenance": PROVENANCE,
    }
    (out / "results").mkdir(parents=True, exist_ok=True)
    (out / "results" / f"{label}.json").write_text(json.dumps(row, indent=1))
    print(
        f"{label}: held-out EM on {n} questions {100 * stat.value:.1f}% [{100 * stat.low:.1f}, {100 * stat.high:.1f}]",
        flush=True,
    )


COMPARISON_OUTCOMES = (
    "solved",
    "the other name, copied exactly",
    "a name a few characters off",
    "another name",
    "no answer",
)


def comparison_outcome(task: Any, episode: Any) -> str:
    """How a greedy named comparison ended (one of :data:`COMPARISON_OUTCOMES`): the answer is one of the two names
    compared, so a wrong answer is the other one copied exactly (a wrong pick), a near copy of either (at least 0.8 of
    ``difflib``'s ratio: "Zeikrou Works" for "Zeikro Works"), or another name."""
    from difflib import SequenceMatcher

    from agentgym_r1.leaderboard.baselines.hotpotqa import supporting_titles

    if episode.success:
        return COMPARISON_OUTCOMES[0]
    answers = tag_bodies(episode, "answer")
    if not answers:
        return COMPARISON_OUTCOMES[4]
    names = supporting_titles(task.meta)[:2]
    if answers[-1] in names:
        return COMPARISON_OUTCOMES[1]
    near = max(SequenceMatcher(None, answers[-1], name).ratio() for name in names) >= 0.8
    return COMPARISON_OUTCOMES[2 if near else 3]


def comparison_outcomes(tasks: Sequence[Any], episodes: Sequence[Any]) -> dict[str, int]:
    """How many of the named comparisons among ``tasks`` ended in each of :data:`COMPARISON_OUTCOMES`, printed."""
    return count_outcomes(tasks, episodes, "comparison", COMPARISON_OUTCOMES, comparison_outcome, "named comparisons")


def save_react_result(out: Path, label: str, model: Any, tokenizer: Any, seeds: Sequence[int], **extra: Any) -> None:
    """The greedy ReAct agent's EM on ``seeds``, overall and by question type, and where its bridge episodes went
    wrong, and how its named comparisons ended, saved as ``label``'s result."""
    episodes, tasks = react_episodes(model, tokenizer, seeds), questions(seeds)
    solved = [e.success for e in episodes]
    save_result(
        out,
        label,
        sum(solved) / len(solved),
        n=len(solved),
        by_type=em_by_type(tasks, solved),
        bridge_outcomes=bridge_outcomes(tasks, episodes),
        comparison_outcomes=comparison_outcomes(tasks, episodes),
        solved=[int(x) for x in solved],  # per question, in the order of ``seeds``: what a paired test reads
        seeds=list(seeds),
        **extra,
    )


def bridge_outcomes(tasks: Sequence[Any], episodes: Sequence[Any]) -> dict[str, int]:
    """How many of the bridge questions among ``tasks`` ended in each of :data:`BRIDGE_OUTCOMES`, printed."""
    return count_outcomes(tasks, episodes, "bridge", BRIDGE_OUTCOMES, bridge_outcome, "bridge episodes")


def count_outcomes(
    tasks: Sequence[Any],
    episodes: Sequence[Any],
    kind: str,
    outcomes: Sequence[str],
    outcome: Callable[[Any, Any], str],
    title: str,
) -> dict[str, int]:
    """How many episodes of the questions of type ``kind`` among ``tasks`` ``outcome(task, episode)`` puts in each of
    ``outcomes``, printed after ``title``."""
    counts = dict.fromkeys(outcomes, 0)
    for task, episode in zip(tasks, episodes, strict=True):
        if question_type(task) == kind:
            counts[outcome(task, episode)] += 1
    if not world()[0]:
        print(f"{title}: " + ", ".join(f"{k} {v}" for k, v in counts.items()), flush=True)
    return counts
