"""GRPO development runs from a saved SFT checkpoint (``benchmarks/main_job_grpo_dev.py``): the start and the result
are scored on the same development problems, the config's fields reach the trainer (dynamic sampling generates more
episodes than the updates' batches hold when groups are refilled, and counts them), the table pairs the two rows, and
a protocol's held-out generator is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import main_job_grpo_dev
import pytest

from tests.benchmarks.test_main_job_start import BUDGET as START_BUDGET

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]
# the start-rule test's tiny SFT, with a tiny GRPO over it
BUDGET = {
    **START_BUDGET,
    "grpo_steps": 2,
    "grpo_prompts": 2,
    "generations": 2,
    "max_turns": 2,
    "max_completion_length": 48,
}


def tiny_start(tmp_path: Path, seed: int) -> tuple[Path, object, object, object]:
    """The tiny SFT of seed ``seed``, saved as a start: its folder, budget, tokenizer and model."""
    from agentgym_r1.leaderboard.training import TrainBudget, sft_start, train_sft

    torch.set_num_threads(1)
    budget = TrainBudget(**{**BUDGET, "seed": seed})
    tokenizer, model, rows = sft_start(budget)
    train_sft(budget, tokenizer, model, rows, None)
    start = tmp_path / "sft"
    model.save_pretrained(str(start))
    tokenizer.save_pretrained(str(start))
    return start, budget, tokenizer, model


def run_script(start: Path, seed: int, out: Path, *args: str) -> dict:
    """``main_job_grpo_dev.py`` from ``start`` on 6 development problems with the tiny budget; its result file."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "main_job_grpo_dev.py"), "--start", str(start)]
    cmd += ["--seed", str(seed), "--budget", json.dumps(BUDGET), "--dev", "6", "--out", str(out), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text(encoding="utf-8"))


def test_grpo_from_a_checkpoint_scores_both_rows_on_the_same_problems(tmp_path):
    start = tiny_start(tmp_path, 1)[0]
    out = tmp_path / "runs" / "dyn.json"
    config = {"dynamic_sampling": True, "dynamic_sampling_max_tries": 2}
    r = run_script(start, 1, out, "--config", json.dumps(config))
    assert len(r["before"]) == len(r["after"]) == 6 and set(r["before"] + r["after"]) <= {"0", "1"}
    assert r["updates"] == 2 and r["config"] == config and r["provenance"]["commit"]
    # each update plays its batch (2 tasks x 2 samples) and, the tiny start solving nothing, refills every group once
    # (dynamic_sampling_max_tries=2): the config reached the trainer
    assert r["episodes"] == 2 * 4 * 2
    row = main_job_grpo_dev.table([out]).splitlines()[-1]
    assert row.startswith("| dyn | ") and '"dynamic_sampling": true' in row and "| 2 |" in row


def test_a_protocols_held_out_generator_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        main_job_grpo_dev.main(["--start", str(tmp_path), "--out", str(tmp_path / "x.json"), "--dev-seed", "3"])


def test_the_sft_control_trains_as_many_updates_from_the_start_and_pairs_with_grpo(tmp_path):
    from agentgym_r1.adapters.loading import load_model

    start, budget, tokenizer, model = tiny_start(tmp_path, 2)

    # the control's own function moves the weights: as many updates at the given rate, from the start
    moved = load_model(str(start), "start", device="cpu")
    main_job_grpo_dev.control_sft(moved, tokenizer, budget, 1e-3)
    diff = max((p - q).abs().max().item() for p, q in zip(moved.parameters(), model.parameters(), strict=True))
    assert diff > 0

    out = tmp_path / "runs" / "sft.json"
    r = run_script(start, 2, out, "--control-sft", "1e-3", "--dev-options", '{"min_steps": 2, "max_steps": 2}')
    assert r["control_sft_lr"] == 1e-3 and r["updates"] == 2 and len(r["before"]) == len(r["after"]) == 6
    assert r["torch_capability"] == torch.backends.cpu.get_cpu_capability()  # the kernels the run used
    assert r["dev_options"] == {"min_steps": 2, "max_steps": 2}  # scored on two-step problems, recorded
    assert "| SFT at lr 0.001 |" in main_job_grpo_dev.table([out])

    # paired against another run from the same start; a run from another start is refused
    other = tmp_path / "runs" / "other.json"
    other.write_text(json.dumps({**r, "after": "".join("1" if c == "0" else "0" for c in r["after"])}))
    line = main_job_grpo_dev.versus(out, other)
    solved = r["after"].count("1")
    assert f"by the first only {solved}, by the second only {6 - solved}" in line
    other.write_text(json.dumps({**r, "start": "elsewhere"}))
    with pytest.raises(SystemExit, match="differ in start"):
        main_job_grpo_dev.versus(out, other)


def result(tmp_path: Path, name: str, start: str, after: str, control: bool, problems: list[int]) -> Path:
    path = tmp_path / f"{name}.json"
    r = {"start": start, "before": "0" * len(after), "after": after, "problems": problems}
    path.write_text(json.dumps({**r, "control_sft_lr": 6e-4} if control else r))
    return path


def test_pooled_pairs_each_starts_grpo_run_with_its_control(tmp_path):
    problems = list(range(8))
    files = [
        result(tmp_path, "a-grpo", "a", "11110000", False, problems),
        result(tmp_path, "a-ctl", "a", "11000000", True, problems),  # GRPO +2 of 8 from start a
        result(tmp_path, "b-grpo", "b", "10000000", False, problems),
        result(tmp_path, "b-ctl", "b", "10000000", True, problems),  # even from start b
    ]
    line = main_job_grpo_dev.pooled(files)
    assert line.startswith("GRPO minus control over 2 starts x 8 problems: +12.50 points [")
    assert "per start +25.0, +0.0" in line
    low, high = (float(x) for x in line.split("[")[1].split("]")[0].split(", "))
    assert low <= 12.5 <= high and low >= 0.0  # no resample can put start a's GRPO below its control
    # a start without its control, or a control on other problems, is refused
    with pytest.raises(SystemExit, match="a GRPO run and a control"):
        main_job_grpo_dev.pooled(files[:3])
    other = result(tmp_path, "b-ctl2", "b", "10000000", True, [9, *problems[1:]])
    with pytest.raises(SystemExit, match="different problems"):
        main_job_grpo_dev.pooled([*files[:3], other])


def test_listed_problems_are_played_as_the_first_ones_are(tmp_path):
    from main_job_start import outcomes

    from agentgym_r1.leaderboard.suites import env_kwargs
    from agentgym_r1.leaderboard.training import ENV_ID, HELD_OUT_OPTIONS, SOURCE

    _, budget, tokenizer, model = tiny_start(tmp_path, 1)
    kw = env_kwargs(ENV_ID, SOURCE, {**HELD_OUT_OPTIONS, "seed": 2})
    first = outcomes(model, tokenizer, budget.max_new_tokens, {"x": (kw, 6)})["x"]
    listed = outcomes(model, tokenizer, budget.max_new_tokens, {"x": (kw, [5, 0, 3])})["x"]
    assert listed == first[5] + first[0] + first[3]


def test_a_confirmatory_run_outside_its_protocol_is_refused_before_any_work(tmp_path):
    from agentgym_r1.error import ProtocolError

    protocol = tmp_path / "p.md"
    protocol.write_text("```protocol\nstatus: draft\ncommit: x\nseeds: [0]\nheld_out: []\nconfig: {}\n```\n")
    out = tmp_path / "out" / "r.json"
    with pytest.raises(ProtocolError, match="draft"):
        main_job_grpo_dev.main(
            ["--start", str(tmp_path), "--out", str(out), "--dev-seed", "13", "--protocol", str(protocol)]
        )
    assert not out.parent.exists()
    with pytest.raises(SystemExit):  # without the protocol, its held-out generator is refused to a development run
        main_job_grpo_dev.main(["--start", str(tmp_path), "--out", str(out), "--dev-seed", "13"])
