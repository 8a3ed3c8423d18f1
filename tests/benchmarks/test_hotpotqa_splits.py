"""The HotpotQA proof's held-out sets never scored before (``benchmarks/hotpotqa_splits.py``): a constructed overlap
is refused by text and by entity, and the real dev / fresh / disjoint sets (small counts) pass the check against the
training tasks and SFT episodes the script uses."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import hotpotqa_splits as splits
import pytest

from agentgym_r1.envs.hotpotqa.synthetic import build_kb
from agentgym_r1.error import HeldOutOverlapError
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]
SIZES = {"dev": 8, "fresh": 8, "disjoint": 8, "ablation": 8}


@pytest.fixture(scope="module")
def proof():
    return load_script("benchmarks/train_hotpotqa_proof.py")


@pytest.fixture(scope="module")
def kb(proof):
    return build_kb(proof.ENV_KWARGS["seed"], proof.ENV_KWARGS["kb_size"])


@pytest.fixture(scope="module")
def tasks(proof):
    return proof.TASKS  # the script's own memo of its `questions`: what its checks draw


@pytest.fixture(scope="module")
def record(tasks, kb):
    return splits.build(tasks, kb, SIZES)


def test_a_held_out_question_that_is_a_training_question_is_refused_and_named(tasks):
    train = tasks(range(10))
    held = tasks([2_000_000, 3, 2_000_001, 7])
    with pytest.raises(HeldOutOverlapError, match="2 of its 4 questions are training questions") as e:
        splits.check_overlap("fresh", held, train)
    assert train[3].prompt in str(e.value) and train[7].prompt in str(e.value)


def test_a_disjoint_question_over_an_entity_training_touches_is_refused_and_named(tasks, kb):
    part = splits.partition(kb)
    train = tasks(range(10))
    reworded = dataclasses.replace(train[0], prompt=train[0].prompt + " (reworded)")  # new text, same entities
    with pytest.raises(HeldOutOverlapError, match="is not entity-disjoint") as e:
        splits.check_overlap("disjoint", [reworded], train, part)
    assert train[0].meta["supporting_titles"][0] in str(e.value)
    splits.check_overlap("disjoint", [reworded], train)  # by text alone it would pass


def test_the_partition_holds_two_countries_and_tells_held_from_clear_tasks(tasks, kb):
    part = splits.partition(kb)
    assert len(part.countries) == 2 and 0.1 < len(part.held) / len(part.links) < 0.25
    for task in tasks(range(200)):
        used, touched = part.entities(task), part.touched(task)
        assert set(task.meta["supporting_titles"]) <= used <= touched
        assert part.is_clear(task) == (not touched & part.held)
        assert not (part.is_clear(task) and part.is_held(task))


def test_type_quotas_follow_the_generators_coin():
    assert splits.type_quotas(512) == {"bridge": 256, "comparison": 256}
    assert splits.type_quotas(9) == {"bridge": 5, "comparison": 4}


def test_the_real_sets_pass_the_check_against_the_script_training(record, tasks, kb):
    part = splits.partition(kb)
    assert record["partition"]["countries"] == list(part.countries)
    train = tasks(record["training"])
    assert len(train) == splits.TRAIN_SEEDS and all(part.is_clear(t) for t in train)
    firsts = {"dev": splits.DEV_FROM, "fresh": splits.FRESH_FROM, "disjoint": splits.DISJOINT_FROM}
    for name, first in {**firsts, "ablation": splits.ABLATION_FROM}.items():
        assert len(record[name]) == SIZES[name] and min(record[name]) >= first
    assert all(part.is_clear(t) for t in tasks(record["dev"] + record["fresh"] + record["ablation"]))
    disjoint = tasks(record["disjoint"])
    assert all(part.is_held(t) for t in disjoint)
    assert Counter(t.meta["type"] for t in disjoint) == Counter(splits.type_quotas(SIZES["disjoint"]))
    splits.check_splits(tasks, kb, record, list(splits.SETS))  # raises on any overlap


def test_the_script_stops_before_training_on_a_held_out_set_that_overlaps(proof, record, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    tampered = {**record, "fresh": [record["training"][5], *record["fresh"][1:]]}
    (out / "splits.json").write_text(json.dumps(tampered))
    proof.HELD_OUT[:] = ["fresh", "disjoint"]
    try:
        with pytest.raises(HeldOutOverlapError, match="held-out set 'fresh': 1 of its 8 questions are training"):
            proof.held_out_sets(out)
        (out / "splits.json").write_text(json.dumps(record))
        monitor, finals = proof.held_out_sets(out)
        assert monitor == record["dev"][: splits.N_MONITOR] and finals == {n: record[n] for n in ("fresh", "disjoint")}
        assert proof.training_seeds(out) == record["training"]
        rows = proof.rl_tasks("all", None, proof.training_seeds(out))
        assert [json.loads(r["prompt"])["seed"] for r in rows] == record["training"]
    finally:
        proof.HELD_OUT[:] = ["legacy"]


def test_cli_refuses_the_legacy_set_beside_the_new_ones_before_any_work(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "train_hotpotqa_proof.py"),
            "sft",
            "--out",
            str(tmp_path / "run"),
            "--held-out",
            "legacy",
            "fresh",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--held-out legacy" in out.stderr and "['legacy', 'fresh']" in out.stderr
    assert not (tmp_path / "run").exists()
