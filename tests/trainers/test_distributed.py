"""GRPO and PPO under ``torchrun --nproc_per_node 2`` (CPU, gloo) take the same step as one process on the
same fixed batch: advantages, loss and parameter update, with each group's samples split across the processes
(C1: GRPO crashed there; C2: PPO's critic broke DDP), also with row skipping and in the step layout, where
the processes hold different numbers of rows (TRL's per-row all-gathers aborted the run). A wall-clock budget stops
every process at the same step with the same learning rates when their clocks disagree (each process read its own clock:
the first to spend the budget left the others waiting in an all-reduce, and their learning rates differed). Processes
that never joined one group (``use_cpu=False`` without a GPU) are refused instead of training a copy each, and so is the
step layout with a loss that averages over each process's rows (padded to the largest count, they would scale the
update)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from tests.trainers.kit import torchrun  # noqa: E402

ALGOS = ("grpo", "grpo-rowmean", "grpo-skip", "grpo-step", "ppo")


@pytest.fixture(scope="module")
def steps(tmp_path_factory) -> dict[int, dict[str, dict]]:
    """Every algorithm's step under 1 and under 2 processes: one ``torchrun`` a process count, running the algorithms
    one after the other (``dist_many``), so the imports and the process group are paid twice, not ten times."""
    tmp = tmp_path_factory.mktemp("dist")
    runs: dict[int, dict[str, dict]] = {}
    for processes in (1, 2):
        out = tmp / f"step-{processes}"
        torchrun(processes, "tests.trainers.dist_many", str(out), str(tmp / f"run-{processes}"), *ALGOS, timeout=400)
        runs[processes] = {a: torch.load(f"{out}-{a}.pt", weights_only=False) for a in ALGOS}
    return runs


def _trained_rows(run: dict) -> list[tuple[float, float]]:
    """(advantage sum, trained tokens) of each row with a gradient (trained tokens and a nonzero advantage), sorted:
    the same multiset however the rows are spread over processes and padded."""
    return sorted(
        (round(float(a), 4), float(t))
        for a, t in zip(run["advantages"], run["trained"], strict=True)
        if t > 0 and a != 0
    )


@pytest.mark.parametrize("algo", ALGOS)
def test_two_processes_take_the_single_process_step(steps, algo) -> None:
    one, two = steps[1][algo], steps[2][algo]
    assert (one["processes"], two["processes"]) == (1, 2)  # the trainer saw as many processes as were launched
    assert one["advantages"].abs().sum() > 0
    if algo in ("grpo", "grpo-rowmean", "ppo"):  # one row per episode, in the same order
        torch.testing.assert_close(two["advantages"], one["advantages"], rtol=1e-4, atol=1e-5)
    else:  # rows dropped (grpo-skip) or turn rows (grpo-step): each process holds its own count, padded to one
        assert _trained_rows(two) == _trained_rows(one)
    if algo == "grpo-skip":  # the second group scores the same on every row: none of its rows trains
        assert len(_trained_rows(one)) == 4
    if algo == "grpo-step":  # 8 episodes, 3 of them one turn long
        assert len(_trained_rows(one)) == 13
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-3, abs=1e-6)
    assert any(u.abs().sum() > 0 for u in one["update"])
    # padded to other widths, the step layout's rows sum in another order: a few float32 roundings apart
    atol = 1e-6 if algo in ("grpo", "grpo-rowmean", "ppo") else 1e-5
    for a, b in zip(two["update"], one["update"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=atol)


def test_a_wall_clock_budget_stops_every_process_at_the_same_step(tmp_path) -> None:
    out = tmp_path / "budget"
    torchrun(2, "tests.trainers.dist_budget", "budget", str(out), str(tmp_path / "run-budget"), timeout=180)
    main, other = (torch.load(f"{out}.rank{r}.pt", weights_only=False) for r in (0, 1))
    assert main["steps"] == other["steps"] == 5  # the main process's clock: 1 s a step, a 5 s budget
    assert other["lrs"] == pytest.approx(main["lrs"])
    assert main["lrs"][0] > main["lrs"][-1] > 0  # on the cosine
    torch.testing.assert_close(other["params"], main["params"])  # the same optimizer steps on both


def test_processes_that_did_not_join_one_group_are_refused(tmp_path) -> None:
    out = tmp_path / "refuse"
    torchrun(2, "tests.trainers.dist_budget", "refuse", str(out), str(tmp_path / "run-refuse"), timeout=180)
    for rank in (0, 1):
        errors = torch.load(f"{out}.rank{rank}.pt", weights_only=False)
        assert set(errors) == {"grpo", "ppo"}
        for message in errors.values():
            assert "2 processes were launched (WORLD_SIZE=2) but the trainer runs on 1" in message
            assert "use_cpu=True" in message


def test_step_rows_with_a_row_mean_loss_are_refused_on_two_processes(tmp_path) -> None:
    out = tmp_path / "step-mean"
    torchrun(2, "tests.trainers.dist_budget", "step-mean", str(out), str(tmp_path / "run-step-mean"), timeout=180)
    for rank in (0, 1):
        errors = torch.load(f"{out}.rank{rank}.pt", weights_only=False)
        for loss in ("grpo", "dr_grpo"):
            assert errors[loss] is not None, f"layout='step' with loss_type={loss!r} on 2 processes was accepted"
            assert f"layout='step' with loss_type={loss!r} on 2 processes" in errors[loss]
            assert "Use a token-sum loss" in errors[loss]
        assert errors["dapo"] is None  # token sums over the whole batch: padding rows add nothing
