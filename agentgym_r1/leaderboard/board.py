"""The board: per env its metrics with 95% confidence intervals, and the Agent-R1 paper's reported rows beside them.

Rates of 0/1 outcomes (success, accuracy, EM) use the Wilson score interval; means of other quantities (F1, score,
turns) use Student's t interval; the invalid-action rate is pooled over turns with a Wilson interval (it treats turns
as independent, so it is a little narrow). Both come from ``scipy.stats``. A run that plays each task K > 1 times
also gets pass@1 and pass@K with the unbiased estimator of Chen et al. 2021 (arXiv:2107.03374), its t interval over
tasks (Wilson over tasks when every task's estimate is 0 or 1). ``eval`` and the board print the same figures
(:func:`fill`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentgym_r1.leaderboard.policies import env_family
from agentgym_r1.leaderboard.store import EpisodeRecord, ResultsStore, TrainingRecord
from agentgym_r1.leaderboard.suites import options_label

# Per env family: (metric key in info["metrics"], column label, in percent). "success" is the episode's success flag.
METRICS: dict[str, tuple[tuple[str, str], ...]] = {
    "GSM8K": (("accuracy", "accuracy"),),
    "PythonMath": (("accuracy", "accuracy"),),
    "HotpotQA": (("em", "EM"), ("f1", "F1")),
    "ALFWorld": (("success", "success"),),
    "WebShop": (("score", "score"), ("success", "success rate")),
    "ToolEnv": (("success", "success"),),
}

# The Agent-R1 table (Qwen3-4B), reported in the Agent-R1 README "Experimental Snapshot" and docs/experiments.md,
# https://github.com/AgentR1/Agent-R1 (technical report arXiv:2511.14460). Percentages. Reported, not run here.
REFERENCE_SOURCE = "Agent-R1 (arXiv:2511.14460; github.com/AgentR1/Agent-R1 README), Qwen3-4B"
REFERENCE: dict[str, dict[str, dict[str, float]]] = {
    "GSM8K": {
        "ReAct": {"accuracy": 53.1},
        "GRPO": {"accuracy": 83.3},
        "PPO": {"accuracy": 78.1},
        "REINFORCE": {"accuracy": 78.9},
        "RLOO": {"accuracy": 81.6},
    },
    # The paper reports one HotpotQA "Acc." column; it is shown under EM here.
    "HotpotQA": {
        "ReAct": {"em": 25.8},
        "GRPO": {"em": 59.4},
        "PPO": {"em": 56.7},
        "REINFORCE": {"em": 52.8},
        "RLOO": {"em": 55.2},
    },
    # Success rate on the seen split; the unseen split is in REFERENCE_NOTES.
    "ALFWorld": {
        "ReAct": {"success": 7.14},
        "GRPO": {"success": 81.29},
        "PPO": {"success": 76.42},
        "REINFORCE": {"success": 73.84},
        "RLOO": {"success": 79.08},
    },
    "WebShop": {
        "ReAct": {"score": 51.58, "success": 23.8},
        "GRPO": {"score": 65.83, "success": 44.2},
        "PPO": {"score": 70.18, "success": 46.0},
        "REINFORCE": {"score": 63.41, "success": 41.8},
        "RLOO": {"score": 68.02, "success": 45.1},
    },
}
REFERENCE_NOTES: dict[str, str] = {
    "HotpotQA": "the paper's single 'HotpotQA Acc.' column, shown under EM",
    "ALFWorld": "success on seen games; unseen: ReAct 2.98, GRPO 74.58, PPO 72.38, REINFORCE 69.57, RLOO 73.46",
}


@dataclass
class Stat:
    value: float
    low: float
    high: float

    @property
    def half(self) -> float:
        return (self.high - self.low) / 2


@dataclass
class Paired:
    """A trained agent's two rows compared episode by episode: ``pairs`` episodes played by both (matched by identity:
    the same env, source, options, job seed, episode index and reset seed), ``gained`` solved only after training,
    ``lost`` only before, and McNemar's exact two-sided ``p`` (:func:`mcnemar`)."""

    pairs: int
    gained: int
    lost: int
    p: float


def mcnemar(gained: int, lost: int) -> float:
    """McNemar's exact test: under no change each discordant pair is equally likely to go either way, so ``gained``
    is Binomial(gained + lost, 1/2); the two-sided p of ``scipy.stats.binomtest`` (1.0 with no discordant pair)."""
    if gained + lost == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(gained, gained + lost, 0.5).pvalue)


def pair_outcomes(before: Sequence[object], after: Sequence[object]) -> Paired:
    """The paired test of two lists of outcomes on the same episodes, in the same order (truthy: solved): how many
    only ``after`` solved, how many only ``before``, and McNemar's exact p. Lists of different lengths are an error."""
    if len(before) != len(after):
        raise ValueError(f"paired outcomes need the same episodes: {len(before)} before, {len(after)} after")
    gained = sum(bool(a) and not b for b, a in zip(before, after, strict=True))
    lost = sum(bool(b) and not a for b, a in zip(before, after, strict=True))
    return Paired(len(before), gained, lost, mcnemar(gained, lost))


def pair_episodes(before: list[EpisodeRecord], after: list[EpisodeRecord]) -> Paired:
    """The paired test of two runs of the same job but the policy: episodes are matched by (index, reset seed), never
    by their order in the lists; an episode only one run played is left out."""
    start = {(e.idx, e.seed): e.success for e in before}
    pairs = [(start[(e.idx, e.seed)], e.success) for e in after if (e.idx, e.seed) in start]
    return pair_outcomes([b for b, _ in pairs], [a for _, a in pairs])


IDENTITY = ("env_id", "env_version", "source", "env_kwargs", "seed")  # a run's episodes are the same tasks as another's


def paired_rows(store: ResultsStore) -> dict[int, Paired]:
    """The paired test of every trained agent whose two rows are stored, by the after-training run's id: one per env
    identity (:data:`IDENTITY`), so runs of other options or seeds are never paired."""
    runs = store.runs()
    out = {}
    for rec in store.trainings():
        ends: dict[tuple, dict[str, int]] = {}
        for run in runs:
            if run["policy"] in (rec.before_policy, rec.after_policy):
                ends.setdefault(tuple(run[k] for k in IDENTITY), {})[run["policy"]] = run["id"]
        out |= {
            ids[rec.after_policy]: pair_episodes(
                store.episodes(ids[rec.before_policy]), store.episodes(ids[rec.after_policy])
            )
            for ids in ends.values()
            if len(ids) == 2
        }
    return out


@dataclass
class Row:
    env_id: str
    source: str
    policy: str
    kind: str  # random | baseline | oracle | model | trained | reported
    episodes: int = 0
    planned: int = 0
    metrics: dict[str, Stat] = field(default_factory=dict)
    turns: Stat | None = None
    passk: tuple[int, Stat, Stat] | None = None
    invalid: Stat | None = None
    errors: int = 0
    status: str = ""
    message: str | None = None
    seed: int | None = None
    meta: dict[str, str] = field(default_factory=dict)
    options: str = ""  # the run's env options beyond its source (``difficulty=hard``), as the board shows them
    paired: Paired | None = None  # on a trained agent's after-training row: the paired test against its start

    @property
    def reported(self) -> bool:
        return self.kind == "reported"


def wilson(successes: float, n: int) -> Stat:
    """The 95% Wilson score interval of ``successes`` out of ``n`` (``scipy.stats.binomtest``)."""
    if n == 0:
        return Stat(math.nan, math.nan, math.nan)
    from scipy.stats import binomtest

    k = round(successes)
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return Stat(k / n, float(ci.low), float(ci.high))


def mean_ci(values: list[float], bounds: tuple[float, float] | None = None) -> Stat:
    """The mean with its 95% Student's t interval (``scipy.stats.t``), clipped to ``bounds`` when given. One value,
    or values all equal, give a zero-width interval (there is no spread to estimate)."""
    n = len(values)
    if n == 0:
        return Stat(math.nan, math.nan, math.nan)
    import numpy as np
    from scipy import stats

    arr = np.asarray(values, dtype=float)
    m = float(arr.mean())
    sem = float(stats.sem(arr)) if n > 1 else 0.0
    if sem == 0.0 or not math.isfinite(sem):
        return Stat(m, m, m)
    low, high = stats.t.interval(0.95, n - 1, loc=m, scale=sem)
    if bounds is not None:
        low, high = max(bounds[0], low), min(bounds[1], high)
    return Stat(m, float(low), float(high))


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` samples of which ``c`` passed (Chen et al. 2021, eq. 1):
    ``1 - C(n-c, k) / C(n, k)``, computed as a product to stay exact for large n."""
    if n - c < k:
        return 1.0
    import numpy as np

    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_stats(episodes: list[EpisodeRecord]) -> tuple[int, Stat, Stat] | None:
    """``(k, pass@1, pass@k)`` over the tasks of a run that sampled each task k > 1 times (tasks are told apart by
    their reset seed; k is the fewest samples any task has), else None."""
    by_task: dict[int, list[bool]] = {}
    for e in episodes:
        by_task.setdefault(e.seed, []).append(e.success)
    k = min((len(v) for v in by_task.values()), default=0)
    if k < 2:
        return None
    counts = [(len(v), sum(v)) for v in by_task.values()]
    return k, metric_stat([c / n for n, c in counts]), metric_stat([pass_at_k(n, c, k) for n, c in counts])


def metric_values(family: str, key: str, episodes: list[EpisodeRecord]) -> list[float]:
    if key == "success":
        return [float(e.success) for e in episodes]
    return [float(e.metrics.get(key, e.success if key == "accuracy" else 0.0)) for e in episodes]


def metric_stat(values: list[float]) -> Stat:
    """Wilson for 0/1 outcomes, else the t interval clipped to [0, 1] (the metrics are all fractions)."""
    if all(v in (0.0, 1.0) for v in values):
        return wilson(sum(values), len(values))
    return mean_ci(values, (0.0, 1.0))


def metric_columns(env_id: str) -> tuple[tuple[str, str], ...]:
    return METRICS.get(env_family(env_id), (("success", "success"),))


def build_rows(store: ResultsStore) -> list[Row]:
    """One row per stored run (a trained agent's two runs under their names), and a ``missing`` row for each row of
    a training that did not finish."""
    trainings = store.trainings()
    names = {spec: (label, rec) for rec in trainings for spec, label in trained_labels(rec).items()}
    pairs = paired_rows(store)
    rows: list[Row] = []
    for run in store.runs():
        episodes = store.episodes(run["id"])
        label, rec = names.get(run["policy"], (run["policy"], None))
        row = Row(
            run["env_id"],
            run["source"] or "",
            label,
            "trained" if rec else run["policy_kind"] or "",
            len(episodes),
            run["episodes"] or 0,
            status=run["status"] or "",
            message=run["message"],
            seed=run["seed"],
            options=options_label(run["env_kwargs"] or ""),
            meta={k: str(run[k]) for k in ("env_version", "package_version", "git_commit", "updated_at")},
            paired=pairs.get(run["id"]),
        )
        if rec is not None and rec.status != "done" and row.status != "done":
            row.status, row.message = "missing", training_state(rec)
        fill(row, episodes)
        rows.append(row)
    stored = {run["policy"] for run in store.runs()}
    for rec in trainings:
        status = "skipped" if rec.status == "skipped" else "missing"
        rows += [
            Row(
                rec.env_id,
                rec.source,
                label,
                "trained",
                status=status,
                message=training_state(rec),
                options=options_label(rec.env_kwargs),
            )
            for spec, label in trained_labels(rec).items()
            if spec not in stored
        ]
    return rows


def trained_labels(rec: TrainingRecord) -> dict[str, str]:
    """The board's names of a trained agent's two rows, by their policy spec (``hf:CHECKPOINT?...``)."""
    b = rec.budget
    return {
        rec.before_policy: f"tiny agent, before training (SFT {b.get('sft_steps')} steps)",
        rec.after_policy: f"tiny agent, after training (SFT + GRPO {b.get('grpo_steps')} steps)",
    }


def training_state(rec: TrainingRecord) -> str:
    """Why a training's row is missing (or that it is still training), in one line."""
    again = "rerun `agentgym-r1 leaderboard run --suite quick` to train it again"
    if rec.status == "running":
        if rec.pid and _alive(rec.pid):
            return f"still training (pid {rec.pid}, {rec.message})"
        return f"the training process (pid {rec.pid}) ended before it finished, during {rec.message} (killed?); {again}"
    if rec.status in ("done", "skipped"):
        return rec.message or "trained"
    return f"{rec.message}; {again}"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process shows the board, so it is not training
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process with that id
        return True
    return True


def fill(row: Row, episodes: list[EpisodeRecord]) -> Row:
    """Set ``row``'s figures from its episodes: the one place any command computes them."""
    row.episodes = len(episodes)
    if episodes:
        family = env_family(row.env_id)
        for key, _ in metric_columns(row.env_id):
            row.metrics[key] = metric_stat(metric_values(family, key, episodes))
        row.turns = mean_ci([float(e.turns) for e in episodes])
        row.invalid = wilson(sum(e.invalid for e in episodes), sum(e.turns for e in episodes))
        row.errors = sum(e.error is not None for e in episodes)
        row.passk = pass_stats(episodes)
    return row


def reference_rows(env_ids: list[str]) -> list[Row]:
    out: list[Row] = []
    for env_id in env_ids:
        for i, (method, values) in enumerate(REFERENCE.get(env_family(env_id), {}).items()):
            metrics = {k: Stat(v / 100, math.nan, math.nan) for k, v in values.items()}
            out.append(
                Row(
                    env_id,
                    "paper",
                    f"Qwen3-4B {method}",
                    "reported",
                    metrics=metrics,
                    status="reported, not run",
                    message=None if i else REFERENCE_NOTES.get(env_family(env_id)),
                )
            )
    return out


def _level(options: str) -> int:
    """Runs of one env ordered by difficulty: the default (easy) first, then medium, hard, then any other options."""
    order = {"": 0, "difficulty=easy": 0, "difficulty=medium": 1, "difficulty=hard": 2}
    return order.get(options, 3)


def board(store: ResultsStore, references: bool = True) -> dict[str, list[Row]]:
    """Rows grouped by env id, runs first (best primary metric first), then the reported rows."""
    grouped: dict[str, list[Row]] = {}
    for row in build_rows(store):
        grouped.setdefault(row.env_id, []).append(row)
    for env_id, rows in grouped.items():
        key = metric_columns(env_id)[0][0]
        rows.sort(
            key=lambda r: (
                _level(r.options),
                r.options,
                r.kind == "oracle",
                -(r.metrics[key].value if key in r.metrics else -1.0),
            )
        )
        if references:
            rows.extend(reference_rows([env_id]))
    return dict(sorted(grouped.items()))
