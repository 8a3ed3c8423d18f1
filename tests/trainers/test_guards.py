"""A run whose weights stop being finite stops with a named error and saves nothing (issue 41, defect 7: with
``learning_rate: .inf`` the command exited 0 having saved 108,224 of 108,224 weights as NaN; transformers' default
``logging_nan_inf_filter`` hides the NaN losses from the log)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

import yaml  # noqa: E402

from agentgym_r1.trainers.cli import run_from_argv  # noqa: E402
from agentgym_r1.trainers.configs import AgentGRPOConfig  # noqa: E402
from agentgym_r1.trainers.grpo import AgentGRPOTrainer  # noqa: E402
from agentgym_r1.trainers.guards import FiniteGuard, TrainingDivergedError  # noqa: E402
from agentgym_r1.trainers.ppo import AgentPPOTrainer  # noqa: E402
from tests.trainers.kit import CountEnv, ppo_args, tiny_model, tiny_tokenizer  # noqa: E402


def poisoned_model(tokenizer):
    """A loadable model with one NaN weight (a damaged fine-tune): its loss and gradients are NaN."""
    model = tiny_model(tokenizer)
    with torch.no_grad():
        next(model.parameters())[0, 0] = float("nan")
    return model


def test_grpo_run_that_diverges_stops_and_saves_nothing(tmp_path) -> None:
    tok = tiny_tokenizer()
    poisoned_model(tok).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    out = tmp_path / "out"
    config = {
        "model_init": str(tmp_path / "model"),
        "output_dir": str(out),
        "use_cpu": True,
        "report_to": "none",
        "env_id": "AgentR1/GSM8K-v0",
        "env_kwargs": {"source": "synthetic"},
        "max_steps": 2,
        "max_completion_length": 32,
        "max_new_tokens": 8,
        "max_turns": 2,
        "num_tasks": 8,
        "max_prompt_tokens": 4096,
        "save_strategy": "no",
        "num_generations": 2,
        "per_device_train_batch_size": 2,
        "learning_rate": 1e-3,
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(TrainingDivergedError, match=r"optimizer step 1: [\d,]+ of [\d,]+ weights are NaN"):
        run_from_argv(AgentGRPOConfig, AgentGRPOTrainer, ["--config", str(tmp_path / "run.yaml")])
    assert not (out / "model.safetensors").exists()  # before: saved, all NaN, and the command exited 0


def test_ppo_run_that_diverges_stops(tmp_path) -> None:
    tok = tiny_tokenizer()
    trainer = AgentPPOTrainer(poisoned_model(tok), ppo_args(tmp_path), tok, make_env=CountEnv)
    with pytest.raises(TrainingDivergedError, match="NaN or infinite"):
        trainer.train()


def test_a_finite_run_is_not_stopped(tmp_path) -> None:
    tok = tiny_tokenizer()
    trainer = AgentPPOTrainer(tiny_model(tok), ppo_args(tmp_path), tok, make_env=CountEnv)
    trainer.train()
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


@pytest.mark.parametrize("loss", [math.nan, math.inf])
def test_a_non_finite_logged_loss_stops_the_run(loss) -> None:
    """With logging_nan_inf_filter off, transformers logs the NaN loss itself; the guard stops on it."""
    from transformers import TrainerControl, TrainerState

    guard = FiniteGuard(accelerator=None)
    guard.on_log(None, TrainerState(), TrainerControl(), logs={"loss": 0.5})
    with pytest.raises(TrainingDivergedError, match="training loss is"):
        guard.on_log(None, TrainerState(), TrainerControl(), logs={"loss": loss})
