"""A run that cannot train what it says fails at start with one line that says what to fix (reliability issue:
"training on nothing"), and checkpoints load with fp32 master weights."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from agentgym_r1.cli import main as cli_main  # noqa: E402
from agentgym_r1.error import ConfigError  # noqa: E402
from agentgym_r1.trainers.cli import parse_config  # noqa: E402
from agentgym_r1.trainers.configs import AgentGRPOConfig, AgentPPOConfig  # noqa: E402
from tests.trainers.kit import grpo_args, tiny_model, tiny_tokenizer  # noqa: E402

BASE = "output_dir: {out}\nuse_cpu: true\nreport_to: none\nnum_generations: 2\nper_device_train_batch_size: 2\n"


def _yaml(tmp_path, extra: str) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(BASE.format(out=tmp_path / "out") + extra)
    return str(path)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("learning_rate: [oops\n", "not valid YAML at line"),
        ("lerning_rate: 1e-5\n", "lerning_rate"),
        ("learning_rate: -1e-5\n", "negative"),
    ],
)
def test_config_mistakes_are_one_line_errors(tmp_path, extra, message) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(AgentGRPOConfig, ["--config", _yaml(tmp_path, extra)])


def test_missing_config_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        parse_config(AgentPPOConfig, ["--config", str(tmp_path / "nope.yaml")])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("model_init: tiny\n", "not a local model directory"),
        ("model_init: {out}/missing\n", "not a local model directory"),
        ("model_init: MODEL\nenv_id: AgentR1/Nope-v0\n", "Nope-v0"),
        ("model_init: MODEL\nenv_kwargs: {{sourc: synthetic}}\n", "sourc"),
    ],
)
def test_train_command_fails_at_start_with_one_line(tmp_path, capsys, extra, message) -> None:
    """Unknown env ids and options used to 'train' on env errors and exit 0; a missing model a deep traceback."""
    model_dir = tmp_path / "model"
    tok = tiny_tokenizer()
    tiny_model(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    config = _yaml(tmp_path, extra.replace("MODEL", str(model_dir)).format(out=tmp_path))
    capsys.readouterr()
    assert cli_main(["train", "grpo", "--config", config, "--max_steps", "1"]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("agentgym-r1: error:")]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in err


def test_trainer_checks_the_env_before_training(tmp_path) -> None:
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    tok = tiny_tokenizer()
    args = grpo_args(tmp_path, env_id="AgentR1/GSM8K-v0", env_kwargs={"sourc": "synthetic"})
    with pytest.raises(ConfigError, match="sourc"):
        AgentGRPOTrainer(tiny_model(tok), args, tok)


def test_a_bf16_checkpoint_loads_with_fp32_master_weights(tmp_path) -> None:
    """W7: transformers 5 loads a checkpoint in its own dtype; training in pure bf16 rounds small AdamW steps
    away. The trainers load in float32 (as TRL's create_model_from_path) unless model_init_kwargs says otherwise."""
    from agentgym_r1.trainers.preflight import build_model_and_tokenizer

    tok = tiny_tokenizer()
    tiny_model(tok, dtype=torch.bfloat16).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    model, _ = build_model_and_tokenizer(grpo_args(tmp_path, model_init=str(tmp_path / "m")))
    assert next(model.parameters()).dtype == torch.float32
    kept, _ = build_model_and_tokenizer(
        grpo_args(tmp_path, model_init=str(tmp_path / "m"), model_init_kwargs={"dtype": "bfloat16"})
    )
    assert next(kept.parameters()).dtype == torch.bfloat16
