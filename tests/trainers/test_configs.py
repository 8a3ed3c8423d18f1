"""The example configs parse into the trainers' configs through TrlParser, and ``agentgym-r1 train`` is wired."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from agentgym_r1.cli import build_parser
from agentgym_r1.trainers.cli import parse_config
from agentgym_r1.trainers.configs import AgentGRPOConfig, AgentPPOConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
# the trainers' example configs (configs/accelerate_*.yaml are accelerate's launch configs, not trainer configs)
TRAINER_CONFIGS = sorted(p for p in CONFIGS.glob("*.yaml") if not p.name.startswith("accelerate_"))


@pytest.mark.parametrize("path", TRAINER_CONFIGS, ids=lambda p: p.name)
def test_example_config_parses(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trl import TrlParser

    cls = AgentPPOConfig if path.name.startswith("ppo") else AgentGRPOConfig
    monkeypatch.setattr(sys, "argv", ["x", "--config", str(path), "--use_cpu", "true", "--bf16", "false"])
    (args,) = TrlParser((cls,)).parse_args_and_config()
    assert isinstance(args, cls) and args.env_id.startswith("AgentR1/")
    assert isinstance(args.env_kwargs, dict) and args.env_kwargs


@pytest.mark.parametrize("path", TRAINER_CONFIGS, ids=lambda p: p.name)
def test_example_config_makes_its_env(path: Path) -> None:
    """Every shipped config, loaded through its config class (every field checked), makes its env with its own
    env_kwargs and resets it: grpo_webshop.yaml shipped source: synthetic, which WebShop does not have (its
    offline source is 'generated'), so it failed at start."""
    import gymnasium as gym

    cls = AgentPPOConfig if path.name.startswith("ppo") else AgentGRPOConfig
    args = parse_config(cls, ["--config", str(path), "--use_cpu", "true", "--bf16", "false"])
    env = gym.make(args.env_id, **args.env_kwargs)
    try:
        obs, _ = env.reset(seed=0)
        assert isinstance(obs, str) and obs
    finally:
        env.close()


def test_cli_train_subcommand_passes_the_rest_to_the_trainer() -> None:
    args = build_parser().parse_args(["train", "grpo", "--config", "run.yaml", "--learning_rate", "1e-4"])
    assert args.algorithm == "grpo" and args.trainer_args == ["--config", "run.yaml", "--learning_rate", "1e-4"]


def test_trainers_package_and_cli_import_no_torch() -> None:
    import subprocess

    code = "import sys, agentgym_r1.trainers, agentgym_r1.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "module, name",
    [("grpo_config", "AgentGRPOConfig"), ("ppo_config", "AgentPPOConfig"), ("env_config", "EnvArguments")],
)
def test_each_config_lives_beside_its_trainer_and_documents_its_fields(module: str, name: str) -> None:
    """Issue 39 item 6, TRL's layout: the config in its own module (configs.py re-exports it for older callers) and
    a Parameters section, as TRL writes its configs, naming every field the class adds."""
    import dataclasses
    import importlib

    from agentgym_r1.trainers import configs

    cls = getattr(importlib.import_module(f"agentgym_r1.trainers.{module}"), name)
    assert getattr(configs, name) is cls
    doc = cls.__doc__ or ""
    assert "Parameters:" in doc
    inherited = {f.name for base in cls.__mro__[1:] if dataclasses.is_dataclass(base) for f in dataclasses.fields(base)}
    own = [f.name for f in dataclasses.fields(cls) if f.name not in inherited]
    assert own and [f for f in own if f"        {f} (`" not in doc] == []


def test_ppo_config_sets_what_its_trainer_needs(tmp_path: Path) -> None:
    """Issue 39 item 6: AgentPPOTrainer changed its args in __init__ (the batch size, remove_unused_columns); the
    config's __post_init__ does it, so the config the trainer gets is the config that was parsed."""
    from tests.trainers.kit import ppo_args

    args = ppo_args(tmp_path, rollout_batch_size=12, mini_batch_size=4)
    assert args.per_device_train_batch_size == 12 and args.remove_unused_columns is False
