"""The ALFWorld proof (``benchmarks/train_alfworld_proof.py``, issue 36 item 5): its commands run end to end at a tiny
size and change the model; its held-out games share no goal class, layout or object set with training; a held-out
set that overlaps training, or a phase that draws other training games than the one before it, stops the script
before any work."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.conftest import load_script

pytest.importorskip("trl")
pytest.importorskip("textworld")

import alfworld_splits as splits  # tests/benchmarks/conftest.py puts benchmarks/ on sys.path

from agentgym_r1.error import HeldOutOverlapError, StudyError

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "train_alfworld_proof.py"
TINY = ["--sft-games", "2", "--rl-games", "2", "--monitor", "1", "--final", "1", "--real", "1"]


@pytest.fixture
def proof(monkeypatch):
    from tests.conftest import shared_data  # skips when the shared data is not beside the checkout

    monkeypatch.setenv("AGENTGYM_SHARED_DATA", str(shared_data("alfworld").parent))
    module = load_script(SCRIPT)
    monkeypatch.setattr(module, "MAX_TURNS", 3)  # short episodes: the test is about the pipeline, not the play
    # one token a turn from a barely trained model: a word piece (a command that does nothing, reward 0) or
    # punctuation (unreadable, the format penalty), so a GRPO group's rewards differ and an update moves the model
    monkeypatch.setattr(module, "MAX_NEW_TOKENS", 1)
    return module


def weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_sft_grpo_control_eval_run_end_to_end_and_change_the_model(proof, tmp_path, monkeypatch, capsys):
    from transformers import PreTrainedTokenizerFast

    import agentgym_r1.trainers.sft as sft_module
    from agentgym_r1.adapters.scratch import make_model

    seeds: list[int] = []  # each SFT chunk's batch seed (its first step)
    real = sft_module.draws
    monkeypatch.setattr(
        sft_module, "draws", lambda rows, steps, size, seed: seeds.append(seed) or real(rows, steps, size, seed)
    )
    out = tmp_path / "run"
    common = ["--out", str(out), *TINY]
    sft = ["--sft-chunk", "2", "--sft-batch", "2"]
    proof.main(["sft", *common, "--sft-max-steps", "2", *sft, "--layers", "1"])
    args = ["--steps", "2", "--eval-every", "1", "--prompts", "2", "--generations", "4", "--temperature", "1.5"]
    proof.main(["grpo", *common, *args])
    # the control: the 2-step start continued to step 4, with the batches the run from 0 would have drawn next
    control = ["--start", str(out / "sft"), "--sft-resume", "2", "--sft-max-steps", "4", *sft]
    with pytest.raises(SystemExit):  # the start recorded batch 2; a continuation drawing batches of 16 is refused
        proof.main(["sft", *common, *control, "--sft-batch", "16"])
    assert "batch 16 vs 2" in capsys.readouterr().err and not (out / "sft-continued").exists()
    proof.main(["sft", *common, *control])
    assert seeds == [0, 2]
    proof.main(["eval", *common, "--models", "sft,grpo,sft-continued"])
    assert "sft-continued against sft: generated, paired on 1 games" in capsys.readouterr().out

    split = json.loads((out / "split.json").read_text())
    assert [len(split[k]) for k in ("sft", "rl", "monitor", "final")] == [2, 2, 1, 1]
    assert split["final"][0]["goal"] in splits.HELD_OUT_GOALS and "commit" in split["provenance"]
    sft_curve = json.loads((out / "sft_curve.json").read_text())
    assert sft_curve["episodes"] == 2 and [p["step"] for p in sft_curve["curve"]] == [2]  # the expert won both
    assert [p["step"] for p in json.loads((out / "grpo-seed0_curve.json").read_text())] == [0, 1, 2]
    continued = json.loads((out / "sft-continued_curve.json").read_text())
    assert [p["step"] for p in continued["curve"]] == [4] and continued["start"]["steps"] == 2
    assert json.loads((out / "sft-continued" / "sft_run.json").read_text())["steps"] == 4
    for label in ("sft", "grpo-seed0", "sft-continued"):
        result = json.loads((out / f"final_{label}.json").read_text())
        assert [len(result[part]["per_game"]) for part in ("generated", "real")] == [1, 1]
        assert result["generated"]["per_game"][0]["game"] == f"generated-3-{split['final'][0]['index']}"
        assert result["real"]["per_game"][0]["game"].startswith("valid_unseen/")
        assert 0 <= result["generated"]["success_ci"][0] <= result["generated"]["success_ci"][1] <= 1
    # the model changed: SFT moved it from its initialisation, GRPO moved it from the SFT checkpoint
    start = make_model(PreTrainedTokenizerFast.from_pretrained(out / "sft"), hidden=128, layers=1, mlp_ratio=4)
    sft, grpo = weights(out / "sft"), weights(out / "grpo-seed0" / "final")
    assert any(not t.equal(sft[k]) for k, t in start.state_dict().items() if k in sft)
    assert any(not t.equal(grpo[k]) for k, t in sft.items())
    assert any(not t.equal(sft[k]) for k, t in weights(out / "sft-continued").items())  # the start kept, apart
    # a later phase that draws other training games than the SFT phase trained on is refused before any work
    with pytest.raises(StudyError, match="records 2 sft games and this run drew 1"):
        proof.main(["eval", *common[:2], *TINY[2:], "--sft-games", "1"])


def test_a_held_out_set_that_overlaps_training_stops_the_script_before_any_work(proof, tmp_path, monkeypatch):
    def overlapping(seed, n, training, cache_dir=None):  # a draw that forgot the rule: training games themselves
        return training[:n], {"held_out": n}

    monkeypatch.setattr(splits, "held_out_games", overlapping)
    out = tmp_path / "run"
    with pytest.raises(HeldOutOverlapError, match=r"held-out set 'monitor' overlaps training .* is a training game"):
        proof.main(["sft", "--out", str(out), *TINY])
    assert not (out / "sft").exists() and not (out / "split.json").exists()


def key(**changes) -> splits.GameKey:
    base = splits.GameKey(
        1, 0, "pick_and_place_simple", "Apple", ("kitchen", (("Fridge", 1),)), frozenset({"Apple"}), ""
    )
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(
    ("held", "reason"),
    [
        (key(), "is a training game"),
        (key(seed=3, layout=("kitchen", (("Fridge", 2),)), objects=frozenset({"Apple", "Egg"})), "asks for a Apple"),
        (key(seed=3, goal="Potato", objects=frozenset({"Potato"})), "has the layout"),
        (key(seed=3, goal="Potato", layout=("bedroom", (("Bed", 1),))), "has the object set"),
    ],
    ids=["same-game", "goal", "layout", "objects"],
)
def test_the_disjointness_check_names_each_kind_of_overlap(held, reason):
    with pytest.raises(HeldOutOverlapError, match=f"held-out set 'final' overlaps training in .* way.*{reason}"):
        splits.check_disjoint([key()], [held], "final")
    splits.check_disjoint([key()], [key(seed=3, goal="Potato", layout=("bedroom", ()), objects=frozenset())], "final")


def test_held_out_games_are_unseen_and_a_trained_layout_is_skipped():
    training, _ = splits.training_games(1, 2)
    assert all(g.goal not in splits.HELD_OUT_GOALS for g in training)
    held, counts = splits.held_out_games(3, 1, training)
    splits.check_disjoint(training, held, "final")
    assert held[0].goal in splits.HELD_OUT_GOALS and counts["layout_trained"] == 0
    # a training room with that game's inventory: the same draw now skips it, as a trained layout
    again, counts = splits.held_out_games(3, 1, [*training, dataclasses.replace(training[0], layout=held[0].layout)])
    assert again[0].index != held[0].index and counts["layout_trained"] == 1


def test_the_paired_comparison_counts_each_game_once_per_part_and_refuses_other_games(proof):
    def result(outcomes):
        per_game = [{"game": f"g{i}", "success": s} for i, s in enumerate(outcomes)]
        return {"success": sum(outcomes) / len(outcomes), "per_game": per_game}

    before = {"generated": result([False, True, False, True]), "real": result([False, False])}
    after = {"generated": result([True, True, False, False]), "real": result([True, False])}
    text = proof.paired(before, after)
    assert "generated, paired on 4 games: success +0.0 points, 1 gained, 1 lost (McNemar exact p=1)" in text
    assert "real, paired on 2 games: success +50.0 points, 1 gained, 0 lost" in text
    after["real"]["per_game"][0]["game"] = "other"
    assert "real: not the same games in both results" in proof.paired(before, after)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["eval", "--models", "sft,sft-continue"], "['sft-continue'] not among"),
        (["grpo", "--steps", "2", "--start", "CKPT", "--sft-resume", "50"], "got phase grpo"),
        (["sft", "--start", "CKPT", "--sft-resume", "50", "--sft-max-steps", "90"], "is not a saved model"),
    ],
)
def test_a_bad_continuation_is_refused_before_any_work(tmp_path, capsys, argv, message):
    proof = load_script(SCRIPT)
    (tmp_path / "ckpt").mkdir()
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit:
        proof.main([str(tmp_path / "ckpt") if a == "CKPT" else a for a in argv] + ["--out", str(out)])
    assert exit.value.code == 2 and message in capsys.readouterr().err
    assert not out.exists()


def test_a_registered_run_is_refused_unless_its_budget_games_and_sets_are_the_protocols():
    from argparse import Namespace

    proof = load_script(SCRIPT)
    protocol = {
        "held_out": {"final_generated": {"generator_seed": 3, "games": 500}, "real_24": {"games": 24}},
        "config": {"grpo": {"updates": 40}, "games": {"sft": 1000, "rl": 1000, "monitor": 64}},
    }
    run = dict(steps=None, sft_games=1000, rl_games=1000, monitor=64, final=500, real=24)
    ok = [
        Namespace(**{**run, "phase": phase, **extra})
        for phase, extra in (("grpo", {"steps": 40}), ("sft", {}), ("eval", {}))
    ]
    assert [proof.protocol_problem(protocol, a) for a in ok] == [None, None, None]
    assert "grpo needs --steps 40 (config.grpo.updates), got 20" in proof.protocol_problem(
        protocol, Namespace(**{**run, "phase": "grpo", "steps": 20})
    )
    fewer = Namespace(**{**run, "phase": "sft", "sft_games": 10})
    assert "the registered games: --sft-games 1000 --rl-games 1000 --monitor 64 (config.games), got --sft-games 10" in (
        proof.protocol_problem(protocol, fewer)
    )
    wrong_set = Namespace(**{**run, "phase": "eval", "real": 4})
    assert "eval scores the registered sets: --final 500 --real 24 (held_out), got --final 500 --real 4" in (
        proof.protocol_problem(protocol, wrong_set)
    )
