"""The HotpotQA proof's tasks (``train_hotpotqa_proof.py``): the env and its limits, the expert's episodes, the
training seeds and the held-out sets (with the overlap check), and the run's state that ``main`` sets (``HELD_OUT``,
``PROVENANCE``, ``BUDGET``) and every phase reads."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hotpotqa_splits as splits  # benchmarks/: held-out sets never scored before, and the overlap check

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
# HELD_OUT, PROVENANCE and BUDGET are the run's state: main() sets them in place, never rebinds them, so each phase
# module reads what it set. A fresh copy of the entry point (tests/conftest.load_script) shares them with the others.
HELD_OUT = ["legacy"]  # the held-out sets scored (--held-out); "legacy" alone keeps the earlier runs' splits
PROVENANCE: dict[str, Any] = {}  # study.start's record (commit, dirty, protocol), written with every result


def gold(task: Any) -> str:
    return str(task.answer[0]) if isinstance(task.answer, list | tuple) else str(task.answer)


def expert_actions(task: Any) -> list[str]:
    """Search each supporting title (first entity, then the bridge it names; or both entities compared), answer."""
    from agentgym_r1.leaderboard.baselines.hotpotqa import supporting_titles

    return [f"<search>{t}</search>" for t in supporting_titles(task.meta)] + [f"<answer>{gold(task)}</answer>"]


def questions(seeds: Sequence[int], env_kwargs: dict[str, Any] | None = None) -> list[Any]:
    """The tasks that ``reset(seed=s)`` draws, for each seed (from ``env_kwargs``, the proof's env by default)."""
    import gymnasium as gym

    import agentgym_r1  # noqa: F401  (registers the ids)

    env = gym.make(ENV_ID, **(ENV_KWARGS if env_kwargs is None else env_kwargs))
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


def question_type(task: Any) -> str:
    """``bridge``, ``comparison`` (the answer is one of the two names compared) or ``comparison (yes/no)``."""
    return f"{task.meta['type']}{' (yes/no)' if gold(task).lower() in ('yes', 'no') else ''}"


def world() -> tuple[int, int]:
    """(this process's rank, the number of processes) of the process group the trainer joined under ``torchrun``;
    (0, 1) without one. Greedy evaluation splits its questions over the processes, and only rank 0 writes."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
