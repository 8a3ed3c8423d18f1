"""The GSM8K confirmatory study's held-out set (``benchmarks/gsm8k_confirm.py``): a generator's raw reset seeds repeat
training problems' texts, and the guard refuses them naming the problem; the set built by the rule passes it and holds
no training text and no repeat; a run with an unlisted seed is refused before any work."""

from __future__ import annotations

import gsm8k_confirm as gc
import pytest

from agentgym_r1.error import HeldOutOverlapError, ProtocolError

POOL = 40_000  # a part of the training pool is enough for the first collisions of generator seed 7


@pytest.fixture(scope="module")
def train() -> set[str]:
    return set(gc.problems(None, range(POOL)).values())


def test_raw_reset_seeds_overlap_training_and_are_refused(train):
    raw = list(range(64))
    texts = gc.problems(7, range(64))
    shared = [s for s in raw if texts[s] in train]
    assert shared  # the generator repeats training problems: the raw seeds are not a held-out set
    with pytest.raises(HeldOutOverlapError, match=f"reset seed {shared[0]}: "):
        gc.check_overlap(7, raw, train)


def test_the_rule_keeps_new_problems_only_and_passes_the_guard(train):
    held = gc.held_out_set(7, 64, train)
    texts = gc.problems(7, range(max(held) + 1))
    assert len(held) == 64 and held == sorted(held)
    assert not {texts[s] for s in held} & train and len({texts[s] for s in held}) == 64
    skipped = [s for s in range(max(held) + 1) if s not in held]
    assert skipped and all(texts[s] in train or texts[s] in {texts[h] for h in held if h < s} for s in skipped)
    gc.check_overlap(7, held, train)  # no error


def test_a_confirmatory_run_outside_the_protocol_is_refused(tmp_path):
    protocol = tmp_path / "p.md"
    protocol.write_text("```protocol\nstatus: draft\ncommit: x\nseeds: [0]\nheld_out: []\nconfig: {}\n```\n")
    with pytest.raises(ProtocolError, match="draft"):
        gc.main(["grpo", "--seed", "0", "--out", str(tmp_path / "out"), "--protocol", str(protocol)])
    assert not (tmp_path / "out").exists()  # refused before any work


def test_the_control_at_grpos_rate_is_its_own_row_beside_the_recipes_control(tmp_path):
    """``control --control-lr``: one run at that rate on a cosine (GRPO's schedule), written apart from the recipe's
    control and labelled with its rate in the table."""
    import argparse
    import json

    pytest.importorskip("trl")
    from agentgym_r1.adapters.scratch import make_model

    tokenizer, _ = gc.expert_data(1)
    make_model(tokenizer, tmp_path / "default" / "sft", hidden=32, layers=1)
    tokenizer.save_pretrained(tmp_path / "default" / "sft")
    seeds = [0, 1, 2]
    (tmp_path / "default" / "start.json").write_text(json.dumps({"success": [False] * 3}))
    base = dict(sft_episodes=8, sft_steps=0, control_steps=2, kernels="default", held_out_seed=7, threads=1)
    gc.run_control(argparse.Namespace(**base, control_lr=None), tmp_path / "default", {}, seeds)
    gc.run_control(argparse.Namespace(**base, control_lr=3e-4), tmp_path / "default", {}, seeds)
    recipe = json.loads((tmp_path / "default" / "control-2.json").read_text())
    lower = json.loads((tmp_path / "default" / "control-2-lr0.0003.json").read_text())
    assert recipe["lr"] is None and lower["lr"] == 3e-4 and len(lower["after"]) == 3
    text = gc.table(tmp_path)
    assert "| default | SFT +2 steps at lr 0.0003, cosine |" in text and "| default | SFT +2 steps |" in text
