"""Held-out sets of the HotpotQA proof that no run has scored, and the check that none overlaps training (issue 36).

The proof (``benchmarks/train_hotpotqa_proof.py``) plays ``AgentR1/HotpotQA-v0`` on the generated KB of seed 0 with
5,000 entities; ``reset(seed=s)`` draws question ``index`` from ``s`` (the env's ``np_random``), so a *reset seed*
names a question. What every earlier run used (the script's constants since it was written, 9dff1ab):

* **training**: reset seeds 0..7,999. SFT expert episodes 0..N-1 (``--sft-episodes`` at most 8,000), the tokenizer's
  300 episodes 0..299, the RL rows 0..7,999 (``task_dataset(8000)``; ``--rl-types`` selects among them), the naive
  RAG's demonstrations 0..N-1.
* **legacy held-out**: reset seeds from 1,000,000 on, skipping a training question or a repeat: 128 monitoring and
  1,024 table questions in :data:`LEGACY_SEEDS` (1,000,000..1,001,516: 365 were skipped). Scored by about 115
  runs: a development set now.

This module adds, each from reset seeds no run used, each skipping any question (by text) of training, of the legacy
set and of the sets before it:

* **dev** (:data:`DEV_FROM`, 512 questions, reset seeds 2,000,000..2,001,322; its first 128 monitor the runs and stop
  the SFT): for anything still to choose (a learning rate, the naive RAG's k).
* **fresh** (:data:`FRESH_FROM`, 1,024, reset seeds 3,000,000..3,002,584): the training distribution, new questions.
* **disjoint** (:data:`DISJOINT_FROM`, 512, reset seeds 4,000,032..4,017,472): questions over a part of the KB that no
  training task touches.
* **ablation** (:data:`ABLATION_FROM`, 1,024): the training distribution, new questions, for the PPO mask ablation
  (issue 36, item 4), so that it looks at neither fresh nor disjoint. Drawn after the others, it changes none of them.

Training under the partition: the first 8,000 clear reset seeds, 0..15,979 (half of the tasks touch the held-out
part). Because training already draws most of the KB's distinct bridge questions, a set that skips training texts has
fewer bridges than the generator's coin gives: fresh holds 234 bridges, 468 named and 322 yes/no comparisons (the
legacy set: 365 bridges). Of fresh's 234 bridge answers 224 are training answers (the same names recur); of
disjoint's 256, 101 are (years and occupations; no name). Built in 34 s on a loaded 2-core machine.

**The part held out** (:func:`partition`): two of the KB's twelve countries, drawn with :data:`PARTITION_SEED` from
the sorted names; an entity is held out when it belongs there (a city by its country, a person by the birthplace, an
organisation by its headquarters, a work by its creator's birthplace): about 1/6 of the KB. A question *uses* its
supporting passages' entities and its answer when the answer is an entity (:meth:`Partition.entities`); a training
task *touches* those and every entity its supporting passages name (an employer, a founder: what the expert's
searches show; :meth:`Partition.touched`). Under the partition, training keeps the first 8,000 reset seeds from 0 whose
task touches no held-out entity (:func:`training_seeds`), dev and fresh take only such questions, and disjoint only
questions whose every entity is held out, half bridges and half comparisons as the generator's coin gives
(:func:`type_quotas`). Within a type the templates are *not* in the generator's mix, and cannot be: a template that
follows two random links (an organisation and its founder, a person and the employer) has both ends held out for
about 1/36 of its questions, so the held-out part has only some 20-60 distinct questions of each such template, while
a template that follows one link inside a country (a work and its creator's birthplace) has hundreds. The disjoint
set is therefore mostly those one-link bridges: report its EM by template beside fresh's. Rivers and countries are
attributes, not entities (they have no passage); the held-out countries' rivers are answers of held-out questions
only. What the partition cannot prevent: an RL rollout's own searches can return a held-out passage (the index holds
the whole KB, as at evaluation).

:func:`check_overlap` is the guard the script runs before any training: a held-out set sharing a question text with
training, or (disjoint) an entity with what training touches, raises :class:`~agentgym_r1.error.HeldOutOverlapError`
naming the count and the first few.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym_r1.error import HeldOutOverlapError, StudyError

Questions = Callable[[Sequence[int]], list[Any]]  # reset seeds -> the tasks they draw (the proof's `questions`)

TRAIN_SEEDS = 8000
LEGACY_SEEDS = range(1_000_000, 1_001_517)  # the legacy monitoring + table questions (the script's held_out.json)
DEV_FROM, FRESH_FROM, DISJOINT_FROM, ABLATION_FROM = 2_000_000, 3_000_000, 4_000_000, 5_000_000
SIZES = {"dev": 512, "fresh": 1024, "disjoint": 512, "ablation": 1024}
SETS = tuple(SIZES)
N_MONITOR = 128  # the dev questions that monitor runs
PARTITION_SEED, HELD_COUNTRIES = 36, 2
SCAN_LIMIT = 200_000  # reset seeds one set may scan before it gives up (about 2 ms each)
CHUNK = 4096
SHOWN = 5  # overlapping questions or entities named in an error


@dataclass(frozen=True)
class Partition:
    """The held-out part of a KB: its ``countries`` and their entities (``held``, passage titles), with each entity's
    ``links`` (the titles its passage names)."""

    countries: tuple[str, ...]
    held: frozenset[str]
    links: dict[str, tuple[str, ...]]

    def entities(self, task: Any) -> set[str]:
        """The entities a question uses: its supporting passages' titles, and its answer when that is an entity."""
        used = set(task.meta["supporting_titles"])
        answer = task.answer[0] if isinstance(task.answer, list | tuple) else task.answer
        return used | ({answer} if answer in self.links else set())

    def touched(self, task: Any) -> set[str]:
        """What a training task shows: its entities and every entity its supporting passages name."""
        used = self.entities(task)
        return used.union(*(self.links[t] for t in task.meta["supporting_titles"]))

    def is_clear(self, task: Any) -> bool:
        """Whether a task touches no held-out entity (a training, dev or fresh question)."""
        return not self.touched(task) & self.held

    def is_held(self, task: Any) -> bool:
        """Whether every entity a question uses is held out (a disjoint question)."""
        return self.entities(task) <= self.held


def memo(questions: Questions) -> Questions:
    """``questions`` remembering each seed's task (the sets and their checks draw the same seeds several times)."""
    cache: dict[int, Any] = {}

    def cached(seeds: Sequence[int]) -> list[Any]:
        missing = [s for s in dict.fromkeys(seeds) if s not in cache]
        if missing:
            cache.update(zip(missing, questions(missing), strict=True))
        return [cache[s] for s in seeds]

    return cached


def partition(kb: Any, seed: int = PARTITION_SEED, count: int = HELD_COUNTRIES) -> Partition:
    """The entities of ``count`` countries of ``kb`` drawn with ``seed``, and every entity's links."""
    import numpy as np

    countries = sorted({c.country for c in kb.cities})
    rng = np.random.default_rng([seed, 0x5E1D])
    held_countries = tuple(sorted(countries[i] for i in rng.choice(len(countries), count, replace=False)))
    home = (
        {c.name: c.country for c in kb.cities}
        | {p.name: p.city.country for p in kb.people}
        | {o.name: o.city.country for o in kb.orgs}
        | {w.title: w.creator.city.country for w in kb.works}
    )
    links = (
        {c.name: () for c in kb.cities}
        | {p.name: (p.city.name, p.employer) for p in kb.people}
        | {o.name: (o.founder.name, o.city.name) for o in kb.orgs}
        | {w.title: (w.creator.name,) for w in kb.works}
    )
    held = frozenset(title for title, country in home.items() if country in held_countries)
    return Partition(held_countries, held, links)


def type_quotas(count: int) -> dict[str, int]:
    """How many bridge and comparison questions make ``count`` in the generator's own mix (its coin: half each)."""
    return {"bridge": count - count // 2, "comparison": count // 2}


def scan(
    questions: Questions, first: int, count: int, accept: Callable[[Any], bool], skip: set[str], name: str
) -> list[int]:
    """The first ``count`` reset seeds from ``first`` on whose question ``accept`` takes and whose text is neither in
    ``skip`` nor drawn before; the texts taken join ``skip``."""
    seeds: list[int] = []
    for start in range(first, first + SCAN_LIMIT, CHUNK):
        for seed, task in zip(range(start, start + CHUNK), questions(range(start, start + CHUNK)), strict=True):
            if task.prompt not in skip and accept(task):
                seeds.append(seed)
                skip.add(task.prompt)
                if len(seeds) == count:
                    return seeds
    raise StudyError(
        f"held-out set {name!r}: {len(seeds)} of {count} questions in reset seeds {first}.."
        f"{first + SCAN_LIMIT - 1}; ask for fewer"
    )


def quota_filter(part: Partition, quotas: dict[str, int]) -> Callable[[Any], bool]:
    """Accepts a held-out question while its type's quota has room (it counts what it accepts)."""
    room = dict(quotas)

    def accept(task: Any) -> bool:
        kind = task.meta["type"]
        if room.get(kind, 0) > 0 and part.is_held(task):
            room[kind] -= 1
            return True
        return False

    return accept


def training_seeds(questions: Questions, part: Partition | None, count: int = TRAIN_SEEDS) -> list[int]:
    """The training reset seeds: 0..count-1 without a partition, else the first ``count`` whose task is clear."""
    if part is None:
        return list(range(count))
    return scan(questions, 0, count, part.is_clear, set(), "training")


def build(
    questions: Questions, kb: Any, sizes: dict[str, int] | None = None, train_count: int = TRAIN_SEEDS
) -> dict[str, Any]:
    """The partition, the training seeds under it and the reset seeds of ``dev``, ``fresh``, ``disjoint`` and
    ``ablation`` (as :data:`SIZES`), as a JSON-able record; each set skips the questions of training, of the legacy
    set and of the sets before it."""
    sizes = {**SIZES, **(sizes or {})}
    part = partition(kb)
    train = training_seeds(questions, part, train_count)
    skip = (
        {t.prompt for t in questions(range(TRAIN_SEEDS))}
        | {t.prompt for t in questions(train)}
        | {t.prompt for t in questions(LEGACY_SEEDS)}
    )
    dev = scan(questions, DEV_FROM, sizes["dev"], part.is_clear, skip, "dev")
    fresh = scan(questions, FRESH_FROM, sizes["fresh"], part.is_clear, skip, "fresh")
    disjoint = scan(
        questions,
        DISJOINT_FROM,
        sizes["disjoint"],
        quota_filter(part, type_quotas(sizes["disjoint"])),
        skip,
        "disjoint",
    )
    ablation = scan(questions, ABLATION_FROM, sizes["ablation"], part.is_clear, skip, "ablation")
    return {
        "partition": {
            "seed": PARTITION_SEED,
            "countries": list(part.countries),
            "entities": len(part.held),
            "of": len(part.links),
        },
        "training": train,
        "dev": dev,
        "fresh": fresh,
        "disjoint": disjoint,
        "ablation": ablation,
    }


def check_overlap(
    name: str, held: Sequence[Any], train: Iterable[Any], part: Partition | None = None, against: str = "training"
) -> None:
    """Refuse a held-out set ``held`` that shares a question text with ``train`` (the ``against`` questions) or repeats
    one, or, with ``part`` (the entity-disjoint set), uses an entity that a training task touches."""
    train = list(train)
    train_texts = {t.prompt for t in train}
    shared = [t.prompt for t in held if t.prompt in train_texts]
    if shared:
        raise HeldOutOverlapError(
            f"held-out set {name!r}: {len(shared)} of its {len(held)} questions are {against} "
            f"questions: {shared[:SHOWN]}. Draw it from other seeds, skipping those texts"
        )
    if len({t.prompt for t in held}) != len(held):
        raise HeldOutOverlapError(
            f"held-out set {name!r} repeats a question ({len(held)} questions, "
            f"{len({t.prompt for t in held})} distinct)"
        )
    if part is None:
        return
    touched = set().union(*(part.touched(t) for t in train))
    used = set().union(*(part.entities(t) for t in held))
    common = sorted(used & touched)
    if common:
        raise HeldOutOverlapError(
            f"held-out set {name!r} is not entity-disjoint: {len(common)} of the {len(used)} "
            f"entities its questions use are touched by training tasks: {common[:SHOWN]}. "
            f"Train on tasks clear of the partition (training_seeds with the partition)"
        )


def check_splits(questions: Questions, kb: Any, record: dict[str, Any], sets: Iterable[str]) -> None:
    """The overlap checks of the sets ``sets`` of ``record`` (from :func:`build`) against its training seeds, the
    legacy questions and each other; the disjoint set by entity too. Prints what it checked."""
    part = partition(kb)
    if list(part.countries) != record["partition"]["countries"]:
        raise HeldOutOverlapError(
            f"the held-out countries {record['partition']['countries']} of the splits record "
            f"are not this KB's {list(part.countries)}: rebuild it (delete splits.json)"
        )
    train = questions(record["training"])
    legacy = questions(LEGACY_SEEDS)
    for name in sets:
        held = questions(record[name])
        check_overlap(name, held, train, part if name == "disjoint" else None)
        check_overlap(name, held, legacy, against="legacy held-out")
        for other in SETS:
            if other != name and other in record:  # a record built before a set was added lacks it
                check_overlap(name, held, questions(record[other]), against=f"{other!r} held-out")
        print(
            f"overlap check, {name}: {len(held)} questions from reset seeds {min(record[name])}.."
            f"{max(record[name])}; none is a training ({len(train)} tasks), legacy or other held-out question"
            + (
                f"; none of their entities is touched by training (held out: {', '.join(part.countries)})"
                if name == "disjoint"
                else ""
            ),
            flush=True,
        )
