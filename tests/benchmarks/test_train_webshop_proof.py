"""The WebShop proof's confirmatory parts (``benchmarks/train_webshop_proof.py``, issue 36 item 5): a budget in
updates reaches the trainer and the curve, results carry their provenance, and the paired comparison reads the
per-task outcomes of the same tasks."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "train_webshop_proof.py"


def load_script():
    spec = importlib.util.spec_from_file_location("train_webshop_proof", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_run_of_fixed_updates_makes_exactly_those_updates_on_a_cosine(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    from agentgym_r1.adapters.scratch import make_model, train_tokenizer

    proof = load_script()
    monkeypatch.setattr(proof, "RL_TASKS", 16)  # the held-out check reads every RL task's instruction
    monkeypatch.setattr(proof, "MAX_TURNS", 2)  # short episodes: the test is about the budget, not the shopping
    monkeypatch.setattr(proof, "MAX_NEW_TOKENS", 8)
    texts = [proof.instruction(s) for s in range(20)] + ["search[a b] click[buy now] click[< prev]"] * 5
    tokenizer = train_tokenizer(texts, tmp_path / "sft", vocab_size=400, split_digits=True, cross_spaces=True)
    make_model(tokenizer, tmp_path / "sft", hidden=32, layers=1, heads=2)
    proof.run_grpo(tmp_path, 5.0, 2, 1e-3, 0, 1, 2, 1.0, sft_episodes=4, monitor_n=1, steps=3)
    curve = json.loads((tmp_path / "grpo-seed0_curve.json").read_text())
    assert [p["step"] for p in curve] == [0, 2, 3]  # the start, every 2 updates, and the last
    assert (tmp_path / "grpo-seed0" / "final" / "model.safetensors").exists()


def test_the_paired_comparison_counts_each_task_once_and_refuses_other_tasks():
    proof = load_script()
    before = {"seeds": [3, 9], "per_task": {"score": [0.0, 1.0, 0.5, 1.0], "success": [False, True, False, True]}}
    after = {"seeds": [3, 9], "per_task": {"score": [1.0, 1.0, 0.5, 0.0], "success": [True, True, False, False]}}
    text = proof.paired(before, after)
    assert "success: 1 tasks gained, 1 lost (McNemar exact p=1)" in text
    assert "score +0.000" in text
    assert "needs both evaluations" in proof.paired(before, {**after, "seeds": [4, 10]})
