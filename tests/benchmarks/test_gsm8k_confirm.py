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
