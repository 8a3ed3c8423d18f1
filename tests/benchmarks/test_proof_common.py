"""What the multi-turn proofs share (``benchmarks/proof_common.py``): the SFT data helper gives the WebShop proof the
rows it built itself (the expert's won episodes, in order), and refuses a set the expert never won."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def webshop(tmp_path_factory):
    """The WebShop proof and a tokenizer trained on a few of its instructions and commands."""
    pytest.importorskip("trl")
    from agentgym_r1.adapters.scratch import train_tokenizer

    proof = load_script(ROOT / "benchmarks" / "train_webshop_proof.py")
    texts = [proof.instruction(s) for s in range(20)] + ["search[a b] click[buy now] click[< prev]"] * 5
    path = tmp_path_factory.mktemp("tokenizer")
    return proof, train_tokenizer(texts, path, vocab_size=400, split_digits=True, cross_spaces=True)


def test_the_webshop_sft_rows_are_the_experts_won_episodes_as_the_proof_built_them(webshop, capsys):
    from agentgym_r1.trainers.sft import expert_rows

    proof, tokenizer = webshop
    rows = proof.expert_episodes(tokenizer, 4)
    # what train_webshop_proof.expert_episodes built before the helper: every episode played, the successes kept
    played = expert_rows(
        proof.ENV_ID, proof.ENV_KWARGS, range(4), tokenizer, proof.expert_actions, require_success=False
    )
    kept = [d for d in played.samples if d.success]
    assert rows == kept and len(rows) > 0
    assert f"the expert won {len(kept)} of 4 SFT tasks, kept those" in capsys.readouterr().out


def test_a_set_the_expert_never_won_is_refused(webshop):
    from proof_common import expert_sft_rows

    from agentgym_r1.error import StudyError

    proof, tokenizer = webshop
    with pytest.raises(StudyError, match="the expert won none of the 2 SFT tasks"):  # searches until the turn limit
        expert_sft_rows(
            proof.ENV_ID, proof.ENV_KWARGS, range(2), tokenizer, lambda task: ["search[x]"] * 15, "SFT tasks"
        )
