"""The WebShop proof's confirmatory parts (``benchmarks/train_webshop_proof.py``, issue 36 item 5): a budget in
updates reaches the trainer and the curve, results carry their provenance, the paired comparison reads the
per-task outcomes of the same tasks, and a continued SFT (the control) takes the steps of the run that did not stop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "train_webshop_proof.py"


def test_a_run_of_fixed_updates_makes_exactly_those_updates_on_a_cosine(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    from agentgym_r1.adapters.scratch import make_model, train_tokenizer

    proof = load_script(SCRIPT)
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
    proof = load_script(SCRIPT)
    before = {"seeds": [3, 9], "per_task": {"score": [0.0, 1.0, 0.5, 1.0], "success": [False, True, False, True]}}
    after = {"seeds": [3, 9], "per_task": {"score": [1.0, 1.0, 0.5, 0.0], "success": [True, True, False, False]}}
    text = proof.paired(before, after)
    assert "success: 1 tasks gained, 1 lost (McNemar exact p=1)" in text
    assert "score +0.000" in text
    assert "needs both evaluations" in proof.paired(before, {**after, "seeds": [4, 10]})


def tiny(proof, monkeypatch):
    """The proof with tiny budgets: few RL tasks to check held-out seeds against, one monitoring task, short episodes
    (8 tokens a turn) and a tokenizer trained on a few expert episodes."""
    for name, value in (("RL_TASKS", 16), ("MONITOR_N", 1), ("MAX_NEW_TOKENS", 8)):
        monkeypatch.setattr(proof, name, value)
    monkeypatch.setattr(proof, "TOKENIZER_EPISODES", 3)
    return proof


@pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning")  # eval pairs one task: no t-interval
def test_a_continued_sft_takes_the_batches_and_steps_of_the_run_that_did_not_stop(tmp_path, monkeypatch, capsys):
    pytest.importorskip("trl")
    import torch
    from safetensors.torch import load_file

    import agentgym_r1.trainers.sft as sft_module

    proof = tiny(load_script(SCRIPT), monkeypatch)
    seen: list[tuple[int, list[int]]] = []
    real = sft_module.draws

    def draws(rows, steps, batch_size, seed):  # the real draw, recorded with its seed
        seen.append((seed, real(rows, steps, batch_size, seed)))
        return seen[-1][1]

    monkeypatch.setattr(sft_module, "draws", draws)

    def sft(out, max_steps, start=None, resume=0):
        proof.run_sft(out, 2.0, 2, max_steps, 4, 1e-3, 2, 1, 2000, start_from=start, resume=resume)

    proof.PROVENANCE.update(proof.study.start(proof.__file__, tmp_path))
    sft(tmp_path / "whole", 3)  # 0 -> 3 in chunks 0-2, 2-3
    whole, seen[:] = list(seen), []
    sft(tmp_path / "split", 2)  # 0 -> 2, then 2 -> 3 from the saved checkpoint
    sft(tmp_path / "split", 3, tmp_path / "split" / "sft", 2)
    assert [s for s, _ in seen] == [s for s, _ in whole] == [0, 2]
    assert seen == whole and [len(b) for _, b in seen] == [4, 2]  # batch 2: two steps, then one
    after = load_file(tmp_path / "whole" / "sft" / "model.safetensors")
    continued = load_file(tmp_path / "split" / "sft-continued" / "model.safetensors")
    assert all(torch.equal(after[k], continued[k]) for k in after)
    start = load_file(tmp_path / "split" / "sft" / "model.safetensors")
    assert not all(torch.equal(after[k], start[k]) for k in after)  # the start is kept, not overwritten
    curve = json.loads((tmp_path / "split" / "sft-continued_curve.json").read_text())
    assert [p["step"] for p in curve["curve"]] == [3] and curve["start"]["steps"] == 2
    assert "commit" in curve["provenance"]

    proof.run_eval(tmp_path / "split", 0, 4, final_n=1, which="sft,sft-continued", final_first=3_000_000)
    result = json.loads((tmp_path / "split" / "final_sft-continued.json").read_text())
    assert len(result["per_task"]["seed"]) == len(result["per_task"]["score"]) == len(result["per_task"]["success"])
    assert result["per_task"]["seed"][0] >= 3_000_000 and "commit" in result["provenance"]
    assert "sft-continued against sft: paired on 1 tasks" in capsys.readouterr().out

    start = str(tmp_path / "split" / "sft")
    argv = ["sft", "--start", start, "--sft-resume", "2", "--sft-max-steps", "4", "--sft-chunk", "2"]
    monkeypatch.setattr("sys.argv", ["train_webshop_proof.py", *argv, "--out", str(tmp_path / "no")])
    with pytest.raises(SystemExit):  # the checkpoint recorded batch 2; this continuation would draw batches of 16
        proof.main()
    assert "batch 16 vs 2" in capsys.readouterr().err and not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["sft", "--sft-resume", "400"], "--sft-resume 400 needs --start"),
        (["sft", "--start", "CKPT", "--sft-resume", "400", "--sft-max-steps", "400"], "must be above --sft-resume 400"),
        (["sft", "--start", "CKPT", "--sft-resume", "30", "--sft-max-steps", "80"], "not a multiple of --sft-chunk 50"),
        (["sft", "--start", "CKPT", "--sft-resume", "400", "--sft-max-steps", "440"], "is not a saved model"),
        (["sft", "--start", "CKPT"], "needs --sft-resume N"),
        (["grpo", "--start", "CKPT", "--sft-resume", "400"], "got phase grpo"),
        (["eval", "--models", "sft,grpo,sft-continue"], "['sft-continue'] not among"),
    ],
)
def test_a_bad_continuation_is_refused_before_any_work(tmp_path, monkeypatch, capsys, argv, message):
    proof = load_script(SCRIPT)
    (tmp_path / "ckpt").mkdir()
    out = tmp_path / "out"
    argv = [str(tmp_path / "ckpt") if a == "CKPT" else a for a in argv]
    monkeypatch.setattr("sys.argv", ["train_webshop_proof.py", *argv, "--out", str(out)])
    with pytest.raises(SystemExit) as exit:
        proof.main()
    assert exit.value.code == 2 and message in capsys.readouterr().err
    assert not out.exists()


def test_a_registered_run_is_refused_unless_its_budget_and_final_set_are_the_protocols():
    from argparse import Namespace

    proof = load_script(SCRIPT)
    protocol = {
        "held_out": {"final_fresh": {"first_seed": 4000000, "tasks": 1000}},
        "config": {"grpo": {"updates": 40}},
    }
    run = dict(steps=None, sft_minutes=float("inf"), final_first=4000000, final=1000)
    ok = [
        Namespace(**{**run, "phase": phase, **extra})
        for phase, extra in (("grpo", {"steps": 40}), ("sft", {}), ("eval", {}))
    ]
    assert [proof.protocol_problem(protocol, a) for a in ok] == [None, None, None]
    assert "--steps 40" in proof.protocol_problem(protocol, Namespace(**{**run, "phase": "grpo"}))  # a minutes budget
    assert "--sft-minutes" in proof.protocol_problem(
        protocol, Namespace(**{**run, "phase": "sft", "sft_minutes": 20.0})
    )
    wrong_set = Namespace(**{**run, "phase": "eval", "final_first": 1000000})
    assert "--final-first 4000000 --final 1000" in proof.protocol_problem(protocol, wrong_set)
