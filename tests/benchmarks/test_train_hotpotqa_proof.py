"""The HotpotQA proof's RL task mix (``benchmarks/train_hotpotqa_proof.py``): the rows it trains on, and the
options it refuses before any work starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import hotpotqa_proof_rl as rl_phases  # benchmarks/ (tests/benchmarks/conftest.py): where run_grpo looks up `train`
import hotpotqa_proof_sft as sft_phases  # where run_sft and run_rag look up the held-out sets and training seeds
import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "train_hotpotqa_proof.py"


@pytest.mark.parametrize(("bridge", "named", "share"), [(10, 4, 0.5), (10, 30, 0.5), (7, 3, 0.25), (5, 5, 0.8)])
def test_share_indices_give_named_comparisons_their_share_and_keep_every_bridge_row(bridge, named, share):
    kinds = ["bridge"] * bridge + ["comparison"] * named
    kinds = [kinds[i] for i in sorted(range(len(kinds)), key=lambda i: (i * 7) % len(kinds))]  # interleaved
    picked = load_script(SCRIPT).share_indices(kinds, share)
    counts = Counter(kinds[i] for i in picked)
    assert sorted(i for i in picked if kinds[i] == "bridge") == [i for i, k in enumerate(kinds) if k == "bridge"]
    assert counts["comparison"] == round(share / (1 - share) * bridge)
    assert abs(counts["comparison"] / len(picked) - share) <= 1 / len(picked)
    # comparisons are cycled: no row repeated more than once beyond any other
    repeats = Counter(i for i in picked if kinds[i] == "comparison")
    assert max(repeats.values()) - min(repeats.values(), default=0) <= 1
    if counts["comparison"] >= named:
        assert len(repeats) == named  # every comparison row is used


@pytest.mark.parametrize(
    ("kinds", "share"), [(["bridge", "comparison"], 0.0), (["bridge", "comparison"], 1.0), (["bridge", "bridge"], 0.5)]
)
def test_share_indices_refuse_a_share_they_cannot_make(kinds, share):
    with pytest.raises(ValueError, match="comparison-share"):
        load_script(SCRIPT).share_indices(kinds, share)


def test_rl_tasks_refuse_a_share_without_the_names_tasks():
    with pytest.raises(ValueError, match="--rl-types names"):
        load_script(SCRIPT).rl_tasks("bridge", 0.5)


def test_cli_refuses_a_share_before_any_work(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "grpo",
            "--out",
            str(tmp_path / "run"),
            "--rl-types",
            "all",
            "--comparison-share",
            "0.5",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--comparison-share" in out.stderr and "--rl-types all" in out.stderr
    assert not (tmp_path / "run").exists()  # refused before the output directory was made


def test_comparison_outcomes_tell_a_wrong_pick_from_a_garbled_copy():
    from types import SimpleNamespace

    script = load_script(SCRIPT)
    seed, task = next(
        (s, t) for s, t in enumerate(script.questions(range(200))) if script.question_type(t) == "comparison"
    )
    gold = script.gold(task)
    first, second = script.expert_actions(task)[:2]
    names = [a.removeprefix("<search>").removesuffix("</search>") for a in (first, second)]
    other = names[1] if names[0] == gold else names[0]
    assert gold in names, (seed, names, gold)

    def episode(answer: str | None, success: bool = False) -> SimpleNamespace:
        actions = [first, second] + ([] if answer is None else [f"<answer>{answer}</answer>"])
        return SimpleNamespace(success=success, turns=[SimpleNamespace(action=a) for a in actions])

    cases = {
        "solved": episode(gold, success=True),
        "the other name, copied exactly": episode(other),
        "a name a few characters off": episode(other[:-1] + ("x" if other[-1] != "x" else "y")),
        "another name": episode("Qwerty Zyx"),
        "no answer": episode(None),
    }
    for expected, ep in cases.items():
        assert script.comparison_outcome(task, ep) == expected, (expected, ep)
    counts = script.comparison_outcomes([task] * len(cases), list(cases.values()))
    assert counts == dict.fromkeys(script.COMPARISON_OUTCOMES, 1)


@pytest.mark.parametrize(("phase", "schedule"), [("ppo", "cosine"), ("grpo", "cosine"), ("grpo", "constant")])
def test_a_fixed_update_budget_reaches_the_trainer(phase, schedule, tmp_path, monkeypatch):
    """``--steps N`` (issue 36: budgets in updates, never minutes): the trainer's own ``max_steps`` is N and its lr
    follows the schedule over those updates; without it the run keeps the wall-clock budget."""
    proof = load_script(SCRIPT)
    seen = []
    monkeypatch.setattr(
        rl_phases,
        "train",
        lambda out, start, label, cls, args, *a, **kw: seen.append(
            (args, kw.get("steps", a[6] if len(a) > 6 else None))
        ),
    )
    common = dict(out=tmp_path, start=tmp_path, minutes=1.0, every=4, lr=1e-4, seed=0, batch=8, threads=1)
    common |= dict(temperature=1.0, types="names")
    for steps in (12, None):
        if phase == "ppo":
            proof.run_ppo(advantage_mask=True, loss_mask=True, steps=steps, **common)
        else:
            run = dict(layout="concatenated", estimator="rloo", generations=4, schedule=schedule, steps=steps)
            proof.run_grpo(**common, **run)
    (fixed, passed), (wall, _) = seen
    assert fixed.max_steps == 12 and passed == 12
    assert fixed.lr_scheduler_type == schedule  # a SchedulerType, a str enum
    assert wall.max_steps == 100_000 and wall.lr_scheduler_type == "constant"


def hotpot_tokenizer(path):
    """A small tokenizer trained on rendered KB passages and questions, saved at ``path``."""
    import gymnasium as gym

    import agentgym_r1  # noqa: F401  (registers the ids)
    from agentgym_r1.adapters.scratch import train_tokenizer
    from agentgym_r1.envs.hotpotqa.tools import render_hits
    from agentgym_r1.retrieval import Hit

    script = load_script(SCRIPT)
    env = gym.make(script.ENV_ID, **script.ENV_KWARGS)
    texts = [render_hits([Hit(doc, 0.0, 0)]) for doc in env.unwrapped.data.documents[:300]]
    texts += [t.prompt for t in script.questions(range(40))]
    env.close()
    return train_tokenizer(texts, path, vocab_size=400, split_digits=True, cross_spaces=True)


def test_the_naive_rag_prompt_holds_the_top_k_passages(tmp_path):
    import gymnasium as gym

    from agentgym_r1.adapters import ChatTokenizer

    script = load_script(SCRIPT)
    chat = ChatTokenizer(hotpot_tokenizer(tmp_path / "tok"))
    env = gym.make(script.ENV_ID, **script.ENV_KWARGS)
    retriever = env.unwrapped.retriever
    question = script.questions([3])[0].prompt
    hits = retriever.search(question, 3)
    texts = {k: chat.tokenizer.decode(script.rag_prompt(chat, retriever, question, k)) for k in (1, 3)}
    env.close()
    squash = lambda text: "".join(text.split())  # noqa: E731  (the tokenizer's pieces may cross spaces)
    assert squash(hits[0].doc.title) in squash(texts[1]) and squash(hits[0].doc.title) in squash(texts[3])
    assert all(squash(hit.doc.title) in squash(texts[3]) for hit in hits)
    assert len(texts[3]) > len(texts[1])
    assert script.rag_k(tmp_path) == 1  # no record: the earlier runs' one passage


def test_a_naive_rag_with_a_step_budget_trains_exactly_those_steps_and_records_its_k(tmp_path, monkeypatch):
    script = load_script(SCRIPT)
    out = tmp_path / "run"
    hotpot_tokenizer(out / "tokenizer")
    monkeypatch.setattr(sft_phases, "held_out_sets", lambda out: ([100, 101], {"dev": [102, 103, 104]}))
    monkeypatch.setattr(sft_phases, "training_seeds", lambda out: list(range(12)))
    script.run_rag(
        out,
        chunk=2,
        minutes=0.0,
        patience=1,
        num_episodes=12,
        lr=1e-3,
        batch=4,
        layers=1,
        hidden=32,
        k=2,
        steps_budget=5,
    )
    record = json.loads((out / "rag" / script.RAG_RECORD).read_text())
    assert record["k"] == 2 and record["steps"] == 5  # chunks of 2, 2, then 1: exactly the budget, not a chunk more
    assert script.rag_k(out / "rag") == 2
    result = json.loads((out / "results" / "rag.dev.json").read_text())
    assert result["rag_k"] == 2 and result["steps"] == 5 and result["budget"] == "updates"
    assert result["seeds"] == [102, 103, 104] and len(result["solved"]) == 3
    assert result["em"] == sum(result["solved"]) / 3
    assert set(result["by_type"]) <= {"bridge", "comparison", "comparison (yes/no)"}


def test_an_sft_with_a_step_budget_stops_there_and_its_results_pair_with_the_other_rows(tmp_path, monkeypatch):
    """``sft --sft-max-steps`` off the chunk grid used to run on to the next chunk's end (the confirmatory study's
    equal-updates control made 850 updates for a budget of 840), and its results held no per-question outcomes, so the
    study's analysis could not pair it with the RL rows."""
    script = load_script(SCRIPT)
    out = tmp_path / "run"
    monkeypatch.setattr(sft_phases, "held_out_sets", lambda out: ([100, 101], {"dev": [102, 103, 104]}))
    monkeypatch.setattr(sft_phases, "training_seeds", lambda out: list(range(12)))
    tiny = {"target": 1.0, "chunk": 2, "num_episodes": 12, "lr": 1e-3, "batch": 4, "layers": 1, "hidden": 32}
    script.run_sft(out, max_steps=3, vocab=300, **tiny)
    result = json.loads((out / "results" / "sft.dev.json").read_text())
    assert result["steps"] == 3  # chunks of 2, then 1: exactly the budget
    assert sorted(p.name for p in (out / "sft-steps").iterdir()) == ["step2", "step3"]
    assert result["seeds"] == [102, 103, 104] and len(result["solved"]) == 3
    assert result["em"] == sum(result["solved"]) / 3
    assert set(result["by_type"]) <= {"bridge", "comparison", "comparison (yes/no)"}
    (out / "continued").mkdir()  # as the command line makes --out
    script.run_sft(out / "continued", max_steps=4, start_from=out / "sft-steps" / "step3", resume=3, **tiny)
    assert json.loads((out / "continued" / "results" / "sft.dev.json").read_text())["steps"] == 4
