"""HotpotQA proof of learning on CPU: the Agent-R1 table in miniature (issue 12).

A tiny Qwen2-style model (tokenizer trained here) learns to search a generated multi-hop knowledge base:

    python benchmarks/train_hotpotqa_proof.py sft  --out runs/hotpot    # tokenizer, model, ReAct SFT checkpoint
    python benchmarks/train_hotpotqa_proof.py rag  --out runs/hotpot    # naive RAG: answer from one retrieval
    python benchmarks/train_hotpotqa_proof.py grpo --out runs/hotpot --layout step --estimator rloo --seed 1
    python benchmarks/train_hotpotqa_proof.py ppo  --out runs/hotpot --no-advantage-mask --no-loss-mask
    python benchmarks/train_hotpotqa_proof.py eval --out runs/hotpot --checkpoint runs/hotpot/sft
    python benchmarks/train_hotpotqa_proof.py table --out runs/hotpot   # the rows, as Markdown
    python benchmarks/train_hotpotqa_proof.py plot  --out runs/hotpot   # learning curves -> benchmarks/plots/

The env is ``AgentR1/HotpotQA-v0``, ``source="synthetic"``, ``difficulty="easy"``, Search-R1 tags
(``<search>q</search>``, ``<answer>a</answer>``), one passage per search (``top_k=1``) and a one-line system prompt
(the tag instructions follow it). Expert episodes: search each supporting title in turn (the first entity, then the
bridge entity its passage names, or the two entities compared), then answer. SFT and RL draw training questions
with reset seeds 0..7999; held-out questions are drawn from reset seed 1,000,000 on, skipping any question a training
seed draws or an earlier held-out seed drew (the knowledge base is shared, the questions are not); ``sft`` prints that
check.

Held-out EM is greedy: 128 questions to monitor runs, and 1,024 further ones (never used to pick anything) for the
table, with a 95% Wilson interval. The ReAct SFT stops at the first chunk whose monitoring EM reaches ``--sft-target``
(every chunk is kept under ``OUT/sft-steps/stepN``, ``--start`` picks one for RL); the RAG SFT keeps its best chunk and
stops when it no longer improves. Each RL run trains for ``--minutes`` of wall time (lr on a cosine over that time;
``grpo --schedule constant`` keeps it constant) and writes its learning curve to ``OUT/<run>/curve.json`` and its result
(with EM by question type) to ``OUT/results/<run>.json``. ``--temperature`` sets the rollouts' sampling temperature and
``--rl-types bridge`` draws RL tasks only from the bridge questions (the README's second setup: ``--temperature 0.6
--rl-types bridge``). ``sft --start CKPT --sft-resume N`` continues an SFT checkpoint that had N steps, its learning
curve in ``OUT/sft-continued/curve.json`` (the README's third look compares it with RL in the same wall time). ``grpo
--iterations 2`` takes two optimizer steps on each sampled batch (TRL's ``num_iterations``; the README's sixth look).
``sft --vocab N --tokenizer-corpus kb`` trains a larger tokenizer on the KB passages too, and ``sft --tokenizer-pieces
words`` one whose merges stay inside runs of letters, so a name is the same tokens in the question and in a query (its
episodes are about twice as long: give ``--max-completion 640`` to that run's ``sft``, ``grpo``, ``ppo`` and ``eval``;
the README's seventh look).

**Held-out sets never scored before** (issue 36; ``benchmarks/hotpotqa_splits.py`` says which seeds each set and every
earlier run used): ``--held-out fresh disjoint`` scores the end of a run on 1,024 fresh questions and on 512
questions over a part of the KB (two countries) that no training task touches, ``--held-out dev`` on the 512
development questions (for choosing a learning rate or the naive RAG's k). With any of them, SFT, RL and the RAG
demonstrations train on the first 8,000 reset seeds whose task stays clear of that part, runs are monitored on dev's
first 128 questions, the sets are cached in ``OUT/splits.json`` and each result is ``OUT/results/<run>.<set>.json``.
Before any training the script checks that no held-out question is a training question (and that no entity of the
disjoint set is touched by training): an overlap stops it with ``HeldOutOverlapError`` naming the first few. The
default ``--held-out legacy`` keeps the earlier runs' 128 + 1,024 questions and training seeds. Every result and curve
records ``provenance`` (``git rev-parse HEAD``, a dirty-tree flag); ``--protocol benchmarks/reports/<study>.md`` makes a
run confirmatory and refuses it before any work if the tree is dirty, the protocol is a draft or not committed, or its
commit is not an ancestor of HEAD (``benchmarks/study.py``).

``grpo`` and ``ppo`` also run as one run on several processes (the README's eighth look: one run on both cores)::

    OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node 2 benchmarks/train_hotpotqa_proof.py grpo \
        --out runs/h10 --start-from runs/hotpot/sft --batch 32 ...

``--batch`` is then per process (``--batch 32`` on 2 processes: 64 episodes a step), the wall-clock budget follows the
main process's clock, greedy evaluation splits its questions over the processes, and rank 0 alone writes. Write
``--start-from`` there: torchrun's parser takes ``--start`` for an abbreviation of its ``--start-method``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import hotpotqa_splits as splits  # benchmarks/: held-out sets never scored before, and the overlap check
import study  # benchmarks/: provenance of every result, the confirmatory guard (--protocol)

ENV_ID = "AgentR1/HotpotQA-v0"
TOP_K = 1
ENV_KWARGS: dict[str, Any] = {
    "source": "synthetic",
    "seed": 0,
    "kb_size": 5000,
    "difficulty": "easy",
    "parser": "tag",
    "top_k": TOP_K,
    "system_prompt": "Answer it.",
}
MAX_TURNS, MAX_NEW_TOKENS = 4, 32
BUDGET = {"completion": 320}  # completion tokens of an episode (env tokens included); main() sets --max-completion
TRAIN_SEEDS = 8000  # SFT and RL draw training questions with reset seeds 0..TRAIN_SEEDS-1
HELD_OUT_FROM = 1_000_000  # held-out questions: reset seeds from here on, skipping any training question
N_MONITOR, N_FINAL = 128, 1024  # monitoring questions, then the table's (never seen before a run ends)
RAG_SYSTEM = "Answer the question from the passage."
RAG_RECORD = "rag.json"  # beside a naive RAG checkpoint's weights: the k it retrieves and its steps
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
HELD_OUT = ["legacy"]  # the held-out sets scored (--held-out); "legacy" alone keeps the earlier runs' splits
PROVENANCE: dict[str, Any] = {}  # study.start's record (commit, dirty, protocol), written with every result


def gold(task: Any) -> str:
    return str(task.answer[0]) if isinstance(task.answer, list | tuple) else str(task.answer)


def expert_actions(task: Any) -> list[str]:
    """Search each supporting title (first entity, then the bridge it names; or both entities compared), answer."""
    from agentgym_r1.leaderboard.baselines.hotpotqa import supporting_titles

    return [f"<search>{t}</search>" for t in supporting_titles(task.meta)] + [f"<answer>{gold(task)}</answer>"]


def questions(seeds: Sequence[int]) -> list[Any]:
    """The tasks that ``reset(seed=s)`` draws, for each seed."""
    import gymnasium as gym

    import agentgym_r1  # noqa: F401  (registers the ids)

    env = gym.make(ENV_ID, **ENV_KWARGS)
    tasks = []
    for s in seeds:
        env.reset(seed=s)
        tasks.append(env.unwrapped.task)
    env.close()
    return tasks


def held_out(out: Path) -> tuple[list[int], list[int]]:
    """The reset seeds of the monitoring and the table's held-out questions (cached in ``OUT/held_out.json``): seeds
    from ``HELD_OUT_FROM`` on, skipping a question that a training seed draws or an earlier held-out seed drew, so
    the held-out questions are distinct and none is a training question. Prints the check."""
    path = out / "held_out.json"
    train_tasks = questions(range(TRAIN_SEEDS))
    if path.exists():
        cached = json.loads(path.read_text())
        splits.check_overlap("legacy", questions(cached["monitor"] + cached["final"]), train_tasks)
        return cached["monitor"], cached["final"]
    import gymnasium as gym

    import agentgym_r1  # noqa: F401  (registers the ids)

    train = {t.prompt for t in train_tasks}
    env = gym.make(ENV_ID, **ENV_KWARGS)
    seeds: list[int] = []
    texts: set[str] = set()
    seed, skipped = HELD_OUT_FROM, 0
    while len(seeds) < N_MONITOR + N_FINAL:
        env.reset(seed=seed)
        text = env.unwrapped.task.prompt
        if text in train or text in texts:
            skipped += 1
        else:
            seeds.append(seed)
            texts.add(text)
        seed += 1
    env.close()
    held = questions(seeds)
    check = {t.prompt for t in held}
    print(
        f"overlap check: {len(train)} distinct training questions (reset seeds 0..{TRAIN_SEEDS - 1}: SFT and RL), "
        f"{len(check)} distinct held-out questions (reset seeds {HELD_OUT_FROM}..{seed - 1}, {skipped} skipped as "
        f"training or repeated questions); held-out questions that are training questions: {len(train & check)}",
        flush=True,
    )
    splits.check_overlap("legacy", held, train_tasks)  # HeldOutOverlapError names the overlap
    path.write_text(json.dumps({"monitor": seeds[:N_MONITOR], "final": seeds[N_MONITOR:]}))
    return seeds[:N_MONITOR], seeds[N_MONITOR:]


TASKS = splits.memo(questions)  # the sets draw the same seeds several times


def splits_record(out: Path) -> dict[str, Any]:
    """The partition, training seeds and dev / fresh / disjoint reset seeds of ``hotpotqa_splits`` (cached in
    ``OUT/splits.json``; a pure function of the KB, so every OUT gets the same)."""
    from agentgym_r1.envs.hotpotqa.synthetic import build_kb

    path = out / "splits.json"
    if path.exists():
        return json.loads(path.read_text())
    record = splits.build(TASKS, build_kb(ENV_KWARGS["seed"], ENV_KWARGS["kb_size"]))
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # each process of a torchrun writes its own, then renames
    tmp.write_text(json.dumps(record))
    tmp.replace(path)
    return record


def training_seeds(out: Path) -> list[int]:
    """The reset seeds SFT, RL and the RAG demonstrations draw from: 0..7,999 with the legacy sets, else the first
    8,000 whose task touches no entity of the disjoint set's part of the KB."""
    return list(range(TRAIN_SEEDS)) if HELD_OUT == ["legacy"] else splits_record(out)["training"]


def held_out_sets(out: Path) -> tuple[list[int], dict[str, list[int]]]:
    """The monitoring seeds and each scored set's seeds (``--held-out``), after the overlap check: the legacy 128 and
    1,024, or dev's first 128 and the sets named. Raises ``HeldOutOverlapError`` before any training."""
    if HELD_OUT == ["legacy"]:
        monitor, final = held_out(out)
        return monitor, {"legacy": final}
    from agentgym_r1.envs.hotpotqa.synthetic import build_kb

    record = splits_record(out)
    splits.check_splits(TASKS, build_kb(ENV_KWARGS["seed"], ENV_KWARGS["kb_size"]), record, HELD_OUT)
    return record["dev"][: splits.N_MONITOR], {name: record[name] for name in HELD_OUT}


def scored_label(label: str, name: str) -> str:
    """A result's name: ``label`` on the legacy set, ``label.<set>`` on the others."""
    return label if name == "legacy" else f"{label}.{name}"


# -- evaluation --------------------------------------------------------------------------------------------------------
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


def world() -> tuple[int, int]:
    """(this process's rank, the number of processes) of the process group the trainer joined under ``torchrun``;
    (0, 1) without one. Greedy evaluation splits its questions over the processes, and only rank 0 writes."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


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


def question_type(task: Any) -> str:
    """``bridge``, ``comparison`` (the answer is one of the two names compared) or ``comparison (yes/no)``."""
    return f"{task.meta['type']}{' (yes/no)' if gold(task).lower() in ('yes', 'no') else ''}"


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


# -- supervised phases -------------------------------------------------------------------------------------------------
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


# -- RL ----------------------------------------------------------------------------------------------------------------
class Curve:
    """A run's learning curve: held-out EM on the monitoring questions, written to ``path`` after each point. The
    ``evaluate`` of :class:`~agentgym_r1.trainers.budget.WallClockBudget` (which stops the run and sets the lr)."""

    def __init__(self, tokenizer: Any, monitor: list[int], label: str, path: Path) -> None:
        self.tokenizer, self.monitor, self.label, self.path = tokenizer, monitor, label, path
        self.history: list[dict[str, float]] = []

    def __call__(self, step: int, model: Any, seconds: float) -> None:
        em = react_em(getattr(model, "policy", model), self.tokenizer, self.monitor)  # PPO: the policy
        self.history.append({"step": step, "minutes": seconds / 60, "em": em})
        if world()[0]:
            return
        self.path.write_text(json.dumps({"run": self.label, "curve": self.history, "provenance": PROVENANCE}, indent=1))
        print(f"{self.label} step {step:4d}  held-out EM {em:.3f}  {seconds:.0f}s", flush=True)


def finish(
    out: Path, label: str, model: Any, tokenizer: Any, callback: Curve, finals: dict[str, list[int]], **extra: Any
) -> None:
    last = callback.history[-1]
    if not world()[0]:
        print(
            f"{label}: monitoring EM {callback.history[0]['em']:.3f} -> {last['em']:.3f} in {last['step']} steps, "
            f"{last['minutes']:.1f} min",
            flush=True,
        )
    policy = getattr(model, "policy", model)
    if not world()[0]:
        policy.save_pretrained(out / label / "final")  # for `eval --checkpoint OUT/<run>/final`
        tokenizer.save_pretrained(out / label / "final")
    for name, seeds in finals.items():
        save_react_result(
            out,
            scored_label(label, name),
            policy.eval(),
            tokenizer,
            seeds,
            steps=last["step"],
            minutes=last["minutes"],
            monitor=last["em"],
            processes=world()[1],
            held_out=name,
            **extra,
        )


RL_TYPES = {
    "all": ("bridge", "comparison", "comparison (yes/no)"),
    "bridge": ("bridge",),
    "names": ("bridge", "comparison"),
    "comparison": ("comparison",),
}


def share_indices(kinds: Sequence[str], share: float) -> list[int]:
    """Indices into rows of ``kinds`` (``bridge`` or ``comparison``) that make named comparisons ``share`` of them:
    every bridge row once, and the comparison rows cycled (repeated, or cut) to ``share / (1 - share)`` bridge rows.
    The trainer's sampler shuffles the rows, so a repeated comparison is drawn about as often as any other."""
    check_comparison_share("names", share)
    bridge = [i for i, k in enumerate(kinds) if k == "bridge"]
    named = [i for i, k in enumerate(kinds) if k == "comparison"]
    if not bridge or not named:
        raise ValueError(f"--comparison-share needs bridge and comparison rows, got {len(bridge)} and {len(named)}")
    count = round(share / (1 - share) * len(bridge))
    return bridge + [named[j % len(named)] for j in range(count)]


def check_comparison_share(types: str, share: float | None) -> None:
    """Refuse a ``--comparison-share`` that :func:`rl_tasks` cannot make: it mixes the ``names`` tasks, and a share is
    between 0 and 1."""
    if share is None:
        return
    if types != "names":
        raise ValueError(f"--comparison-share mixes the 'names' tasks; got --rl-types {types}: add --rl-types names")
    if not 0 < share < 1:
        raise ValueError(f"--comparison-share must be between 0 and 1 (exclusive), got {share}")


def rl_tasks(types: str, comparison_share: float | None = None, seeds: Sequence[int] | None = None) -> Any:
    """The RL task rows: the training seeds whose question type is in ``RL_TYPES[types]``: every one (``all``), the
    bridge questions (``bridge``: the one type whose answer a sampled episode can only get right by searching), the
    questions whose answer is a name (``names``: bridge and named comparisons, no yes/no question, whose sampled
    answer is right half the time by chance) or the named comparisons alone (``comparison``). With ``names``,
    ``comparison_share`` sets the named comparisons' share of the rows (their natural share is 37%). ``seeds``: the
    training reset seeds (default 0..TRAIN_SEEDS-1; :func:`training_seeds` under the held-out partition)."""
    from agentgym_r1.trainers.common import task_dataset

    check_comparison_share(types, comparison_share)
    seeds = list(range(TRAIN_SEEDS)) if seeds is None else list(seeds)
    rows = task_dataset(max(seeds) + 1)  # the trainers' own task rows: row i plays reset seed i
    if seeds != list(range(len(rows))):
        rows = rows.select(seeds)
    if types != "all":
        kinds = [question_type(t) for t in questions(seeds)]
        keep = [i for i, kind in enumerate(kinds) if kind in RL_TYPES[types]]
        if comparison_share is not None:
            keep = [keep[i] for i in share_indices([kinds[i] for i in keep], comparison_share)]
        rows = rows.select(keep)
    named = "" if comparison_share is None else f", named comparisons {100 * comparison_share:.0f}% of them"
    print(f"RL tasks: {len(rows)} training rows ({types}{named})", flush=True)
    return rows


def train(
    out: Path,
    start: Path,
    label: str,
    trainer_class: Any,
    args: Any,
    minutes: float,
    every: int,
    types: str = "all",
    budget: str = "wall",
    schedule: str = "cosine",
    comparison_share: float | None = None,
    steps: int | None = None,
    **extra: Any,
) -> None:
    """Train the checkpoint ``start`` with ``trainer_class(model, args, tokenizer)`` on the training questions of
    ``types`` for ``minutes`` (its learning curve in ``OUT/<label>/curve.json``), then save the policy and its held-out
    result. ``budget="wall"``: the minutes are wall time, monitoring included; ``"train"``: training time alone.
    With ``steps``, the run makes exactly that many updates instead (the lr on ``schedule`` over the updates), so the
    load on the machine cannot change what it trains: a confirmatory run's budget."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from agentgym_r1.trainers.budget import EveryUpdates, WallClockBudget

    tokenizer = PreTrainedTokenizerFast.from_pretrained(start)
    model = AutoModelForCausalLM.from_pretrained(start)
    (out / label).mkdir(parents=True, exist_ok=True)
    monitor, finals = held_out_sets(out)
    curve = Curve(tokenizer, monitor, label, out / label / "curve.json")
    if steps:  # the caller's args hold max_steps=steps and the schedule
        budget, callback = "updates", EveryUpdates(curve, every, steps)
    else:
        callback = WallClockBudget(
            minutes, cosine=schedule == "cosine", evaluate=curve, every=every, count_evaluation=budget == "wall"
        )
    rows = rl_tasks(types, comparison_share, training_seeds(out))
    trainer_class(model, args, tokenizer, train_dataset=rows, callbacks=[callback]).train()
    finish(
        out,
        label,
        model,
        tokenizer,
        curve,
        finals,
        start=str(start),
        types=types,
        budget=budget,
        schedule=schedule,
        comparison_share=comparison_share,
        **extra,
    )


def rl_env_kwargs(reward: str) -> dict[str, Any]:
    """The RL env: the held-out env with the outcome reward ``reward`` (``em``; ``char_f1``: partial credit for a name
    a few characters off). Held-out EM is always measured with ``em``."""
    return {**ENV_KWARGS, "reward_metric": reward}


def run_label(base: str, seed: int, reward: str) -> str:
    return f"{base}{'' if reward == 'em' else '-' + reward.replace('_', '')}-seed{seed}"


def run_grpo(
    out: Path,
    start: Path,
    minutes: float,
    every: int,
    lr: float,
    layout: str,
    estimator: str,
    seed: int,
    batch: int,
    generations: int,
    threads: int,
    temperature: float,
    types: str,
    reward: str = "em",
    budget: str = "wall",
    iterations: int = 1,
    schedule: str = "cosine",
    comparison_share: float | None = None,
    steps: int | None = None,
) -> None:
    from agentgym_r1.trainers.configs import AgentGRPOConfig
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    name = {"grpo": "grpo", "rloo": "rloo", "reinforce_pp": "reinforcepp"}[estimator]
    label = run_label(
        f"{name}-{layout}"
        + ("" if iterations == 1 else f"-it{iterations}")
        + ("" if schedule == "cosine" else f"-{schedule}")
        + ("" if comparison_share is None else f"-cmp{round(100 * comparison_share)}"),
        seed,
        reward,
    )
    args = AgentGRPOConfig(
        output_dir=str(out / label),
        env_id=ENV_ID,
        env_kwargs=rl_env_kwargs(reward),
        max_turns=MAX_TURNS,
        max_new_tokens=MAX_NEW_TOKENS,
        num_generations=generations,
        per_device_train_batch_size=batch,
        max_completion_length=BUDGET["completion"],
        layout=layout,
        advantage_estimator=estimator,
        learning_rate=lr,
        lr_scheduler_type="cosine" if steps and schedule == "cosine" else "constant",  # else WallClockBudget's
        beta=0.0,
        temperature=temperature,
        max_steps=steps or 100_000,
        logging_steps=5,
        report_to="tensorboard",
        gradient_checkpointing=False,
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        num_tasks=TRAIN_SEEDS,
        seed=seed,
        data_seed=seed,
        num_iterations=iterations,
    )
    train(
        out,
        start,
        label,
        AgentGRPOTrainer,
        args,
        minutes,
        every,
        types,
        budget,
        schedule,
        comparison_share,
        steps,
        threads=threads,
        lr=lr,
        batch=batch,
        temperature=temperature,
        reward=reward,
        iterations=iterations,
    )


def run_ppo(
    out: Path,
    start: Path,
    minutes: float,
    every: int,
    lr: float,
    advantage_mask: bool,
    loss_mask: bool,
    seed: int,
    batch: int,
    threads: int,
    temperature: float,
    types: str,
    reward: str = "em",
    budget: str = "wall",
    steps: int | None = None,
) -> None:
    from agentgym_r1.trainers.configs import AgentPPOConfig
    from agentgym_r1.trainers.ppo import AgentPPOTrainer

    label = run_label("ppo" + ("" if advantage_mask else "-noadv") + ("" if loss_mask else "-noloss"), seed, reward)
    args = AgentPPOConfig(
        output_dir=str(out / label),
        env_id=ENV_ID,
        env_kwargs=rl_env_kwargs(reward),
        max_turns=MAX_TURNS,
        max_new_tokens=MAX_NEW_TOKENS,
        rollout_batch_size=batch,
        mini_batch_size=batch // 2,
        ppo_epochs=2,
        max_completion_length=BUDGET["completion"],
        learning_rate=lr,
        lr_scheduler_type="cosine" if steps else "constant",  # a wall-clock run: WallClockBudget's cosine
        max_steps=steps or 100_000,
        logging_steps=5,
        report_to="tensorboard",
        save_strategy="no",
        use_cpu=True,
        seed=seed,
        temperature=temperature,
        num_tasks=TRAIN_SEEDS,
        advantage_mask=advantage_mask,
        loss_mask=loss_mask,
    )
    train(
        out,
        start,
        label,
        AgentPPOTrainer,
        args,
        minutes,
        every,
        types,
        budget,
        steps=steps,
        threads=threads,
        lr=lr,
        batch=batch,
        temperature=temperature,
        reward=reward,
    )


# -- reporting ---------------------------------------------------------------------------------------------------------
def run_eval(out: Path, checkpoint: Path, rag: bool) -> None:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    name = checkpoint.name if rag or checkpoint.name != "final" else checkpoint.parent.name
    for held, seeds in held_out_sets(out)[1].items():
        if rag:
            save_rag_result(
                out, scored_label(f"eval-{name}", held), model, tokenizer, seeds, rag_k(checkpoint), held_out=held
            )
        else:
            save_react_result(out, scored_label(f"eval-{name}", held), model, tokenizer, seeds, held_out=held)


def run_table(out: Path) -> None:
    """The results as Markdown rows: run, held-out EM [95% CI], its number of questions, steps, minutes."""
    print(
        "| run | held-out EM [95% CI] | questions | steps | wall min | monitoring EM (128) |\n|---|---|---|---|---|---|"
    )
    for path in sorted((out / "results").glob("*.json")):
        r = json.loads(path.read_text())
        print(
            f"| {r['run']} | {100 * r['em']:.1f}% [{100 * r['low']:.1f}, {100 * r['high']:.1f}] | {r['n']} | "
            f"{r.get('steps', '')} | {r.get('minutes', 0):.1f} | {100 * r.get('monitor', math.nan):.1f}% |"
        )


def run_plot(
    out: Path,
    plots: Path,
    stem: str,
    note: str,
    xlabel: str = "wall minutes of training (one torch thread, two runs on two cores)",
) -> None:
    """Learning curves (monitoring EM against wall minutes): RL algorithms, and PPO's mask ablation; the SFT start and
    naive RAG as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {p.parent.name: json.loads(p.read_text())["curve"] for p in sorted(out.glob("*/curve.json"))}
    baselines = {}
    for name in ("sft", "rag"):
        path = out / "results" / f"{name}.json"
        if path.exists():
            baselines[name] = json.loads(path.read_text()).get("monitor")
    if curves and baselines.get("sft") is None:  # every run starts from the SFT checkpoint: its step-0 point
        baselines["sft"] = next(iter(curves.values()))[0]["em"]
    plots.mkdir(parents=True, exist_ok=True)
    groups = {
        "algorithms": lambda n: "-noadv" not in n and "-noloss" not in n,
        "ppo_masks": lambda n: n.startswith("ppo"),
    }
    for group, keep in groups.items():
        if not any(keep(name) for name in curves):
            continue
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for name, curve in curves.items():
            if keep(name):
                ax.plot([c["minutes"] for c in curve], [100 * c["em"] for c in curve], marker=".", label=name)
        styles = {"sft": ("SFT start (ReAct)", ":"), "rag": ("naive RAG", "--")}
        for name, value in baselines.items():
            if value is not None:
                ax.axhline(100 * value, color="grey", linestyle=styles[name][1], label=styles[name][0])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out EM, 128 monitoring questions (%)")
        ax.set_title(
            f"HotpotQA (synthetic, easy), tiny Qwen2: {group.replace('_', ' ')}{note and f' ({note})'}", fontsize=10
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(plots / f"{stem}_{group}.svg")
        plt.close(fig)
        print(f"wrote {plots / f'{stem}_{group}.svg'}")


def main() -> None:
    from agentgym_r1.leaderboard.cli import int_arg

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["sft", "rag", "grpo", "ppo", "eval", "table", "plot"])
    parser.add_argument("--out", type=Path, default=Path("runs/hotpot"))
    parser.add_argument("--minutes", type=float, default=10.0, help="RL: wall minutes of training")
    parser.add_argument(
        "--steps", type=int, help="RL: exactly this many updates (the lr on --schedule over them) instead of --minutes"
    )
    parser.add_argument("--eval-every", type=int, default=10, help="RL: monitoring EM every this many steps")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument(
        "--batch", type=int, default=64, help="RL: episodes per step and process (GRPO: groups x generations)"
    )
    parser.add_argument("--generations", type=int, default=8, help="GRPO: samples per question")
    parser.add_argument("--temperature", type=float, default=1.0, help="RL: sampling temperature of the rollouts")
    parser.add_argument(
        "--rl-types",
        choices=sorted(RL_TYPES),
        default="all",
        help="RL: the training questions' types (all; bridge; names: bridge and named comparisons; "
        "comparison: named comparisons)",
    )
    parser.add_argument(
        "--comparison-share",
        type=float,
        help="RL with --rl-types names: the named comparisons' share of the task rows, their rows "
        "repeated to reach it (natural share: 37%%)",
    )
    parser.add_argument(
        "--reward",
        choices=["em", "char_f1"],
        default="em",
        help="RL: the env's outcome reward (held-out EM is measured with em either way)",
    )
    parser.add_argument(
        "--budget",
        choices=["wall", "train"],
        default="wall",
        help="RL: --minutes of wall time, monitoring included (wall), or of training alone (train)",
    )
    parser.add_argument("--layout", choices=["concatenated", "step"], default="concatenated")
    parser.add_argument("--estimator", choices=["grpo", "rloo", "reinforce++"], default="grpo")
    parser.add_argument(
        "--schedule",
        choices=["cosine", "constant"],
        default="cosine",
        help="GRPO: the lr over the budget (cosine to zero, or constant)",
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=1,
        help="GRPO: optimizer steps on each sampled batch (TRL's num_iterations; the ratio is clipped after the first)",
    )
    parser.add_argument("--no-advantage-mask", action="store_true", help="PPO: advantages on env tokens too")
    parser.add_argument("--no-loss-mask", action="store_true", help="PPO: env tokens in the loss")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path, help="eval: the model directory")
    parser.add_argument(
        "--start",
        "--start-from",
        type=Path,
        help="RL: the checkpoint to start from (default OUT/sft, the SFT stop; OUT/sft-steps/stepN is "
        "the SFT model after N steps). Under torchrun write --start-from: torchrun's own parser takes "
        "--start for an abbreviation of its --start-method",
    )
    parser.add_argument("--rag", action="store_true", help="eval: the checkpoint is a naive RAG model")
    parser.add_argument("--plots", type=Path, default=Path("benchmarks/plots"))
    parser.add_argument("--plot-name", default="hotpotqa", help="plot: files PLOTS/<name>_{algorithms,ppo_masks}.svg")
    parser.add_argument("--plot-note", default="", help="plot: a note on the setup for the titles")
    parser.add_argument(
        "--plot-xlabel",
        default="wall minutes of training (one torch thread, two runs on two cores)",
        help="plot: the x axis's label (how the runs shared the cores)",
    )
    parser.add_argument("--sft-target", type=float, default=0.12)
    parser.add_argument("--sft-chunk", type=int, default=50)
    parser.add_argument("--sft-max-steps", type=int, default=3000)
    parser.add_argument(
        "--sft-resume", type=int, default=0, help="sft: continue the checkpoint --start, which had this many SFT steps"
    )
    parser.add_argument("--sft-episodes", type=int, default=20_000, help="expert episodes (training seeds 0..N-1)")
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--sft-batch", type=int, default=16)
    parser.add_argument("--rag-minutes", type=float, default=6.0)
    parser.add_argument("--rag-patience", type=int, default=3, help="RAG: chunks without improvement before stopping")
    parser.add_argument(
        "--rag-k",
        type=int_arg(1, 20),
        default=TOP_K,
        help="RAG: passages retrieved with the question (BM25, best first)",
    )
    parser.add_argument(
        "--rag-steps",
        type=int_arg(1, 1_000_000),
        help="RAG: train exactly this many steps and keep the last (a budget in updates; default: --rag-minutes "
        "with early stopping on the monitoring EM)",
    )
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128, help="sft, rag: the model's width (4 heads, MLP 4x)")
    parser.add_argument("--vocab", type=int, default=1000, help="sft: the tokenizer's vocabulary size")
    parser.add_argument(
        "--tokenizer-corpus",
        choices=["episodes", "kb"],
        default="episodes",
        help="sft: train the tokenizer on 300 expert episodes, or on them and every KB passage",
    )
    parser.add_argument(
        "--tokenizer-pieces",
        choices=["cross-spaces", "words"],
        default="cross-spaces",
        help="sft: merges across spaces (a name's tokens depend on its neighbours), or only inside "
        "runs of letters (a name is the same tokens everywhere)",
    )
    parser.add_argument(
        "--max-completion",
        type=int,
        default=320,
        help="eval, RL: an episode's completion tokens, env tokens included (the words tokenizer "
        "needs about twice the default)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--held-out",
        nargs="+",
        choices=["legacy", *splits.SETS],
        default=["legacy"],
        help="the held-out sets scored at the end (benchmarks/hotpotqa_splits.py): legacy (the 1,024 "
        "questions of every earlier run), or any of dev, fresh, disjoint, which also make training "
        "skip the disjoint set's part of the KB and monitor on dev's first 128 questions",
    )
    parser.add_argument(
        "--protocol",
        type=Path,
        help="a confirmatory run: the committed protocol page (benchmarks/reports/); the run is "
        "refused before any work if the tree is dirty, the protocol is a draft or not committed, or "
        "its commit is not an ancestor of HEAD (benchmarks/study.py)",
    )
    a = parser.parse_args()
    if "legacy" in a.held_out and len(a.held_out) > 1:
        parser.error(
            f"--held-out legacy is the earlier runs' split; it cannot be scored beside {a.held_out} (their "
            f"training skips part of the KB). Give legacy alone, or any of dev, fresh, disjoint"
        )
    HELD_OUT[:] = list(dict.fromkeys(a.held_out))
    PROVENANCE.update(
        study.start(__file__, a.out, a.protocol, a.seed if a.phase in ("grpo", "ppo") else None, HELD_OUT)
    )  # a named error refuses a confirmatory run here, before any work
    if a.comparison_share is not None and a.phase != "grpo":
        parser.error(f"--comparison-share mixes the RL tasks of grpo; got it for {a.phase}")
    try:
        check_comparison_share(a.rl_types, a.comparison_share)
    except ValueError as error:
        parser.error(str(error))
    BUDGET["completion"] = a.max_completion
    import torch

    torch.set_num_threads(a.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    a.out.mkdir(parents=True, exist_ok=True)
    if a.phase == "sft":
        if a.sft_resume and not a.start:
            parser.error("--sft-resume N needs --start, the checkpoint that had N SFT steps")
        run_sft(
            a.out,
            a.sft_target,
            a.sft_chunk,
            a.sft_max_steps,
            a.sft_episodes,
            a.sft_lr,
            a.sft_batch,
            a.layers,
            a.start,
            a.sft_resume,
            a.hidden,
            a.vocab,
            a.tokenizer_corpus,
            a.tokenizer_pieces,
        )
    elif a.phase == "rag":
        run_rag(
            a.out,
            a.sft_chunk,
            a.rag_minutes,
            a.rag_patience,
            a.sft_episodes,
            a.sft_lr,
            a.sft_batch,
            a.layers,
            a.hidden,
            a.rag_k,
            a.rag_steps,
            a.start,
        )
    elif a.phase == "grpo":
        estimator = "reinforce_pp" if a.estimator == "reinforce++" else a.estimator
        run_grpo(
            a.out,
            a.start or a.out / "sft",
            a.minutes,
            a.eval_every,
            a.lr,
            a.layout,
            estimator,
            a.seed,
            a.batch,
            a.generations,
            a.threads,
            a.temperature,
            a.rl_types,
            a.reward,
            a.budget,
            a.iterations,
            a.schedule,
            a.comparison_share,
            a.steps,
        )
    elif a.phase == "ppo":
        run_ppo(
            a.out,
            a.start or a.out / "sft",
            a.minutes,
            a.eval_every,
            a.lr,
            not a.no_advantage_mask,
            not a.no_loss_mask,
            a.seed,
            a.batch,
            a.threads,
            a.temperature,
            a.rl_types,
            a.reward,
            a.budget,
            a.steps,
        )
    elif a.phase == "eval":
        run_eval(a.out, a.checkpoint, a.rag)
    elif a.phase == "table":
        run_table(a.out)
    else:
        run_plot(a.out, a.plots, a.plot_name, a.plot_note, a.plot_xlabel)


if __name__ == "__main__":
    main()
