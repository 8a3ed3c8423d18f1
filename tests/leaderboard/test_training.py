"""The quick suite's trained agent (``leaderboard run --suite quick``): a tiny model trained in the run (SFT, then
GRPO for a fixed number of steps), its rows before and after training on the board beside the baselines, evaluated
by the board's own jobs, its held-out learning curve on the page; ``--no-train``; and a training that fails, is
interrupted or is killed leaves the board with the rows that finished and says which row is missing.

Tiny budgets (a 1-layer model, 2 SFT and 2 GRPO steps, 4 held-out episodes), so each run takes seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from transformers import TrainerCallback  # noqa: E402

from agentgym_r1.cli import build_parser, main  # noqa: E402
from agentgym_r1.error import ConfigError  # noqa: E402
from agentgym_r1.leaderboard.board import board  # noqa: E402
from agentgym_r1.leaderboard.cli import run_board  # noqa: E402
from agentgym_r1.leaderboard.store import ResultsStore, TrainingRecord  # noqa: E402
from agentgym_r1.leaderboard.training import DEPENDS, TrainBudget, TrainPlan, grpo_config  # noqa: E402
from tests.conftest import deprecations  # noqa: E402

GSM8K = "AgentR1/GSM8K-v0"
TINY = TrainBudget(
    sft_steps=2,
    grpo_steps=2,
    eval_every=1,
    sft_episodes=16,
    sft_batch=4,
    grpo_prompts=2,
    generations=2,
    layers=1,
    hidden=32,
    vocab=300,
    tokenizer_episodes=20,
    max_new_tokens=16,
    max_turns=2,
    max_completion_length=64,
)


def board_args(results, *extra: str):
    return build_parser().parse_args(
        [
            "leaderboard",
            "run",
            "--suite",
            "quick",
            "--env",
            GSM8K,
            "--episodes",
            "4",
            "--workers",
            "1",
            "--results",
            str(results),
            *extra,
        ]
    )


def trainings(results) -> list[TrainingRecord]:
    store = ResultsStore(results)
    try:
        return store.trainings()
    finally:
        store.close()


def gsm8k_rows(results):
    store = ResultsStore(results)
    try:
        return board(store, references=False)[GSM8K]
    finally:
        store.close()


class Fail(TrainerCallback):
    """Raises ``error`` at the end of GRPO step ``at``: a failure inside the trainer, through its callback hook."""

    def __init__(self, error: BaseException, at: int = 1) -> None:
        self.error, self.at = error, at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            raise self.error
        return control


@pytest.fixture(scope="module")
def run_deprecations() -> list[str]:
    """The deprecation warnings the ``trained`` run raised (filled by that fixture)."""
    return []


@pytest.fixture(scope="module")
def trained(tmp_path_factory, run_deprecations):
    """One quick-suite run on GSM8K with the tiny budget; its results file and printed output."""
    results = tmp_path_factory.mktemp("board") / "lb.sqlite"
    with deprecations() as found:
        rc = run_board(board_args(results), TINY)
    run_deprecations.extend(found)
    return results, rc


def test_the_quick_suite_trains_an_agent_and_its_rows_stand_beside_the_baselines(trained):
    results, rc = trained
    assert rc == 0
    (rec,) = trainings(results)
    assert rec.status == "done" and rec.message is None
    assert [p[0] for p in rec.curve] == [0, 1, 2] and all(p[2] == 4 for p in rec.curve)
    rows = {r.policy: r for r in gsm8k_rows(results)}
    before = rows["tiny agent, before training (SFT 2 steps)"]
    after = rows["tiny agent, after training (SFT + GRPO 2 steps)"]
    options = "max_steps=1 min_steps=1 seed=3 system_prompt=Solve it."
    for row in (before, after):
        assert row.kind == "trained" and row.status == "done" and row.episodes == 4 and row.options == options
    # beside the baselines of the same env and options, on the same held-out episodes
    assert {r.policy for r in rows.values() if r.options == options} >= {"random", "scripted", "oracle"}
    store = ResultsStore(results)
    try:
        runs = {r["policy"]: r for r in store.runs() if r["env_kwargs"] == rec.env_kwargs}
        seeds = {p: [e.seed for e in store.episodes(r["id"])] for p, r in runs.items()}
    finally:
        store.close()
    assert seeds[rec.before_policy] == seeds[rec.after_policy] == seeds["scripted"] == [0, 1, 2, 3]
    assert rec.before_policy.startswith("hf:") and rec.after_policy.startswith("hf:")  # the board's model path
    # the curve's ends are the two rows
    assert rec.curve[0][1] == before.metrics["accuracy"].value and rec.curve[-1][1] == after.metrics["accuracy"].value
    checkpoint = results.with_name("lb-train") / "grpo"
    assert rec.checkpoint == str(checkpoint) and (checkpoint / "model.safetensors").exists()


def test_the_main_job_warns_of_no_deprecation(trained, run_deprecations):
    """A new user's first run prints no library deprecations: the GRPO config, generation with a key/value cache and
    TRL's training step use the names the installed transformers takes (transformers 5.24 warned four times)."""
    assert trained[1] == 0
    assert run_deprecations == []


def test_the_grpo_config_turns_checkpointing_off_under_the_current_name(tmp_path):
    with deprecations() as found:
        args = grpo_config(TrainPlan(str(tmp_path / "lb.sqlite"), tmp_path / "train", budget=TINY))
    assert found == []
    assert args.gradient_checkpointing is False and getattr(args, "activation_checkpointing", False) is False


def test_grpo_config_overrides_are_fields_over_the_recipe_checked_as_any_configs(tmp_path):
    plan = TrainPlan(str(tmp_path / "lb.sqlite"), tmp_path / "train", budget=TINY)
    args = grpo_config(plan, dynamic_sampling=True, dynamic_sampling_max_tries=3, learning_rate=1e-4)
    assert (args.dynamic_sampling, args.dynamic_sampling_max_tries, args.learning_rate) == (True, 3, 1e-4)
    assert args.max_steps == TINY.grpo_steps and grpo_config(plan).dynamic_sampling is False  # the rest as before
    with pytest.raises(ConfigError, match="dynamic_sampling_max_tries"):
        grpo_config(plan, dynamic_sampling=True, dynamic_sampling_max_tries=0)


def test_the_curve_is_plotted_on_the_page_and_summarised_in_the_text_renders(trained, capsys):
    results, _ = trained
    page = results.with_suffix(".html").read_text(encoding="utf-8")
    assert page.count('<svg class="plot curve"') == 1 and "held-out learning curve" in page
    assert 'tr class="trained"' in page
    assert main(["leaderboard", "show", "--results", str(results)]) == 0
    text = capsys.readouterr().out
    assert "Trained in this run on AgentR1/GSM8K-v0" in text and "Held-out success by GRPO step" in text
    # the paired test of the two rows, on the same held-out episodes, beside them in the text and on the page
    paired = "Paired test, 'tiny agent, after training (SFT + GRPO 2 steps)' against its start on the same 4 episodes"
    assert paired in text and DEPENDS in text
    assert "against its start on the same 4 episodes" in page  # the page escapes the quotes (jinja2: &#39;)
    assert main(["leaderboard", "export", "--format", "md", "--results", str(results)]) == 0
    assert "-> " in capsys.readouterr().out


def test_the_rows_score_1024_held_out_problems_and_the_curve_reads_the_first_of_them(tmp_path):
    """The suite's rows are scored on 1,024 held-out problems (enough for the paired test and tight intervals); the
    curve, read every ``eval_every`` steps during training, plays only the first ``curve_episodes`` of the same."""
    plan = TrainPlan(str(tmp_path / "lb.sqlite"), tmp_path / "train", budget=TINY)
    assert plan.episodes == 1024 and len(plan.job("sft").items()) == 1024
    assert plan.curve_items() == plan.job("grpo").items()[:128] == [(i, i) for i in range(128)]
    assert TrainPlan(plan.results, plan.out_dir, 10, curve_episodes=3, budget=TINY).curve_items() == [
        (0, 0),
        (1, 1),
        (2, 2),
    ]
    with pytest.raises(ConfigError, match="curve_episodes must be at least 1, got 0"):
        TrainPlan(plan.results, plan.out_dir, curve_episodes=0)


def test_the_rows_are_scored_64_at_a_time_with_the_answers_of_16_at_a_time(trained):
    """The trained rows play 64 episodes per engine batch (the board's other hf: jobs 16, and --concurrency sets
    both): it is cheaper for a model this small, and greedy decoding gives each problem the same answer either way."""
    from agentgym_r1.adapters.loading import load_model, load_tokenizer
    from agentgym_r1.leaderboard.batched import EnginePlayer
    from agentgym_r1.leaderboard.suites import env_kwargs
    from agentgym_r1.leaderboard.training import ENV_ID, HELD_OUT_OPTIONS, SOURCE

    results, _ = trained
    assert TrainPlan(str(results), results.parent).job("sft").concurrency == 64
    assert build_parser().parse_args(["leaderboard", "run"]).concurrency is None  # unset: each job's own default
    sft = results.with_name(results.stem + "-train") / "sft"
    model, tokenizer = load_model(str(sft), "sft", device="cpu"), load_tokenizer(str(sft), "sft")
    kwargs, items = env_kwargs(ENV_ID, SOURCE, HELD_OUT_OPTIONS), [(i, i) for i in range(72)]  # 64 and 8
    played = {}
    for batch in (16, 64):
        player = EnginePlayer.from_model(model, tokenizer, TINY.max_new_tokens)
        try:
            played[batch] = [
                (r.idx, r.success, r.reward, r.turns, r.invalid) for r in player.play(ENV_ID, kwargs, items, batch)
            ]
        finally:
            player.close()
    assert len(played[16]) == 72 and played[16] == played[64]


def test_the_rows_problems_come_from_a_generator_training_never_uses(tmp_path):
    """A study chooses its recipe on another generator seed than the main job's rows; the training generator (seed
    0) is refused as a held-out set, and the seed is part of the rows' job and the plan's key."""
    plan = TrainPlan(str(tmp_path / "lb.sqlite"), tmp_path / "train", budget=TINY)
    dev = TrainPlan(plan.results, plan.out_dir, held_out_seed=2, budget=TINY)
    assert json.loads(plan.job("sft").env_kwargs)["seed"] == 3 and json.loads(dev.job("sft").env_kwargs)["seed"] == 2
    assert plan.key != dev.key
    with pytest.raises(ConfigError, match="held_out_seed=0 is the generator the agent trains on"):
        TrainPlan(plan.results, plan.out_dir, held_out_seed=0, budget=TINY)
    with pytest.raises(ConfigError, match="sft_schedule must be one of"):
        TrainBudget(sft_schedule="exponential")
    with pytest.raises(ConfigError, match=r"grpo_schedule must be one of .* got 'warmup'"):
        TrainBudget(grpo_schedule="warmup")
    cosine = TrainPlan(plan.results, plan.out_dir, budget=replace(TINY, grpo_schedule="cosine"))
    assert grpo_config(cosine).lr_scheduler_type == "cosine" and grpo_config(plan).lr_scheduler_type == "constant"


def test_a_rerun_resumes_without_training_again(trained, capsys):
    results, _ = trained
    (rec,) = trainings(results)
    assert run_board(board_args(results), TINY) == 0
    assert "trained already" in capsys.readouterr().err
    (again,) = trainings(results)
    assert again.curve == rec.curve and again.updated_at == rec.updated_at


def test_training_is_reproducible(trained, tmp_path):
    """Fixed seeds and a step budget: a second run trains the same weights and reads the same curve."""
    results, _ = trained
    other = tmp_path / "lb.sqlite"
    assert run_board(board_args(other), TINY) == 0
    assert trainings(other)[0].curve == trainings(results)[0].curve
    from safetensors.torch import load_file

    a = load_file(results.with_name("lb-train") / "grpo" / "model.safetensors")
    b = load_file(other.with_name("lb-train") / "grpo" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_no_train_skips_the_training(tmp_path, capsys):
    results = tmp_path / "lb.sqlite"
    assert (
        main(
            [
                "leaderboard",
                "run",
                "--suite",
                "quick",
                "--env",
                GSM8K,
                "--episodes",
                "2",
                "--workers",
                "1",
                "--no-train",
                "--results",
                str(results),
            ]
        )
        == 0
    )
    assert trainings(results) == []
    assert not results.with_name("lb-train").exists()
    assert "tiny agent" not in capsys.readouterr().out
    assert {r.options for r in gsm8k_rows(results)} == {""}  # the trained agent's env is left out too


def test_an_exception_in_the_trainer_leaves_the_finished_rows_and_says_the_row_is_missing(tmp_path, capsys):
    results = tmp_path / "lb.sqlite"
    assert run_board(board_args(results), TINY, [Fail(RuntimeError("injected failure"))]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    (rec,) = trainings(results)
    assert rec.status == "failed"
    assert rec.message == "training failed during GRPO (1/2 steps): RuntimeError: injected failure"
    rows = {r.policy: r for r in gsm8k_rows(results)}
    assert rows["tiny agent, before training (SFT 2 steps)"].status == "done"  # finished: kept
    missing = rows["tiny agent, after training (SFT + GRPO 2 steps)"]
    assert missing.status == "missing" and "injected failure" in missing.message and missing.episodes == 0
    assert rows["scripted"].status == "done"
    assert "TRAINING ROW MISSING" in captured.out and "missing: training failed during GRPO" in captured.out
    assert "rerun `agentgym-r1 leaderboard run --suite quick`" in captured.out
    assert 'class="note missing"' in results.with_suffix(".html").read_text(encoding="utf-8")
    # the rerun keeps the SFT checkpoint and trains the rest
    assert run_board(board_args(results), TINY) == 0
    assert "SFT checkpoint kept" in capsys.readouterr().err
    assert trainings(results)[0].status == "done"


def test_ctrl_c_during_training_prints_the_board_and_exits_130(tmp_path, capsys):
    results = tmp_path / "lb.sqlite"
    assert run_board(board_args(results), TINY, [Fail(KeyboardInterrupt())]) == 130
    captured = capsys.readouterr()
    assert "training interrupted (Ctrl-C)" in captured.err and "Traceback" not in captured.out + captured.err
    (rec,) = trainings(results)
    assert rec.status == "interrupted" and rec.message == "training interrupted (Ctrl-C) during GRPO (1/2 steps)"
    assert "missing: training interrupted (Ctrl-C) during GRPO (1/2 steps)" in captured.out


def test_a_killed_training_process_is_reported_as_missing(tmp_path, capsys):
    """SIGKILL runs no cleanup: the record stays ``running``; once its process is gone the board says so."""
    results = tmp_path / "lb.sqlite"
    code = (
        "import sys; from agentgym_r1.leaderboard.cli import run_board; from agentgym_r1.cli import build_parser;"
        "from tests.leaderboard.test_training import TINY, board_args; import dataclasses;"
        "run_board(board_args(sys.argv[1]), dataclasses.replace(TINY, grpo_steps=1000))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(results)],
        cwd=os.getcwd(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            recs = trainings(results) if results.exists() else []
            if recs and recs[0].message.startswith("GRPO (") and not recs[0].message.startswith("GRPO (0/"):
                break
            time.sleep(0.5)
        else:
            pytest.fail("the training never reached its first GRPO step")
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    (rec,) = trainings(results)
    assert rec.status == "running"  # nothing ran to say otherwise
    assert main(["leaderboard", "show", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert f"the training process (pid {proc.pid}) ended before it finished, during {rec.message} (killed?)" in out
    rows = {r.policy: r for r in gsm8k_rows(results)}
    assert rows["tiny agent, before training (SFT 2 steps)"].status == "done"
    assert rows["tiny agent, after training (SFT + GRPO 1000 steps)"].status == "missing"


def test_a_bad_step_budget_is_refused_before_any_work(tmp_path, capsys):
    assert (
        main(
            [
                "leaderboard",
                "run",
                "--suite",
                "quick",
                "--env",
                GSM8K,
                "--train-steps",
                "0",
                "--results",
                str(tmp_path / "lb.sqlite"),
            ]
        )
        == 2
    )
    assert "argument --train-steps: must be at least 1, got 0" in capsys.readouterr().err  # the flag's type
    assert not (tmp_path / "lb.sqlite").exists()


def test_without_the_train_extra_the_agent_is_skipped_saying_so(tmp_path):
    """The board's own install (no ``train`` extra): the training is skipped with the install line, the rest runs."""
    results = tmp_path / "lb.sqlite"
    code = (
        "import sys; sys.modules['trl'] = None;"  # an import of trl now raises ImportError, as if not installed
        "from agentgym_r1.cli import main; sys.exit(main(['leaderboard', 'run', '--suite', 'quick', '--env', "
        f"'{GSM8K}', '--episodes', '2', '--workers', '1', '--results', sys.argv[1]]))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(results)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    (rec,) = trainings(results)
    assert rec.status == "skipped" and 'pip install "agentgym-r1[train]"' in rec.message
    assert "Not trained here" in done.stdout and "skipped: the quick suite's trained agent needs" in done.stdout


def test_a_training_record_is_journaled_and_rebuilt_with_the_results_file(tmp_path):
    """The training's record (status, curve) is in the journal like every episode: a deleted results file gets it
    back, so the board still shows the curve and why a row is missing."""
    results = tmp_path / "lb.sqlite"
    store = ResultsStore(results)
    rec = TrainingRecord(
        "k",
        GSM8K,
        "synthetic",
        '{"seed":1}',
        "failed",
        "training failed during GRPO (3/40 steps)",
        "hf:a",
        "hf:b",
        40,
        [[0, 0.25, 8], [10, 0.5, 8]],
        {"sft_steps": 1, "grpo_steps": 40},
    )
    store.save_training(rec)
    store.close()
    results.unlink()
    store = ResultsStore(results)
    try:
        assert "rebuilt" in store.recovery
        (back,) = store.trainings()
    finally:
        store.close()
    assert back.curve == rec.curve and back.status == "failed" and back.budget == rec.budget
    rows = {r.policy: r for r in gsm8k_rows(results)}
    assert rows["tiny agent, after training (SFT + GRPO 40 steps)"].status == "missing"
