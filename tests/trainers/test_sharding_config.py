"""Sharded configs the trainers cannot serve are refused when the config is made, before any model loads, with the
reason and the fix: FSDP or DeepSpeed asked for on CPU (accelerate 1.15 would silently train unsharded DDP copies),
FSDP1 where the rollout must gather the weights, ZeRO-3 generation through partitioned weights, and PPO's in-process
vLLM sync from shards. The launcher's request is read as ``accelerate launch`` passes it (environment variables) or
from transformers' own ``fsdp``/``deepspeed`` fields."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("trl")

from agentgym_r1.error import ConfigError
from agentgym_r1.trainers import sharding
from tests.trainers.kit import grpo_args, ppo_args

FSDP2 = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}
FSDP1 = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "1"}
ZERO3 = {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"}


def launched(monkeypatch, env: dict[str, str]) -> None:
    """The environment ``accelerate launch --config_file ...`` gives its processes (accelerate/utils/launch.py)."""
    for key in ("ACCELERATE_USE_FSDP", "FSDP_VERSION", "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_ZERO_STAGE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)


@pytest.mark.parametrize("make", [grpo_args, ppo_args])
@pytest.mark.parametrize(
    ("env", "fields", "name"),
    [
        (FSDP2, {}, "FSDP (fsdp_version 2)"),
        ({}, {"fsdp": "full_shard"}, "FSDP (fsdp_version 2)"),
        (ZERO3, {}, "DeepSpeed ZeRO-3"),
        ({}, {"deepspeed": {"zero_optimization": {"stage": 2}}}, "DeepSpeed ZeRO-2"),
    ],
)
def test_sharding_on_cpu_is_refused_with_accelerates_reason(monkeypatch, tmp_path, make, env, fields, name) -> None:
    launched(monkeypatch, env)
    with pytest.raises(ConfigError) as e:
        make(tmp_path, **fields)
    message = str(e.value)
    assert message.startswith(f"{name} on CPU (use_cpu=True")
    assert "accelerate 1.15 shards only on GPU-type process groups" in message
    assert "train an unsharded copy on every process" in message
    assert "torchrun --nproc_per_node 2 with use_cpu: true" in message  # the fix on CPU


def test_unsharded_cpu_configs_are_untouched(monkeypatch, tmp_path) -> None:
    launched(monkeypatch, {"ACCELERATE_USE_FSDP": "false"})
    assert grpo_args(tmp_path).use_cpu and ppo_args(tmp_path).use_cpu


@pytest.fixture
def gpu(monkeypatch):
    """A machine with CUDA, as far as the config check asks: the refusals below are the ones a GPU run meets."""
    monkeypatch.setattr(sharding, "_has_cuda", lambda: True)


@pytest.mark.parametrize("make", [grpo_args, ppo_args])
def test_fsdp1_is_refused_where_the_rollout_gathers_the_weights(monkeypatch, tmp_path, gpu, make) -> None:
    launched(monkeypatch, FSDP1)
    with pytest.raises(ConfigError, match=r"fsdp_version=1: the rollout gathers .* Set fsdp_version: 2"):
        make(tmp_path, use_cpu=False)


def test_zero3_generation_through_partitioned_weights_is_refused(monkeypatch, tmp_path, gpu) -> None:
    launched(monkeypatch, ZERO3)
    with pytest.raises(ConfigError, match=r"ds3_gather_for_generation=False under DeepSpeed ZeRO-3.*Set ds3_gather"):
        grpo_args(tmp_path, use_cpu=False, ds3_gather_for_generation=False)


@pytest.mark.parametrize("env", [FSDP2, ZERO3])
def test_ppo_vllm_under_sharded_weights_is_refused(monkeypatch, gpu, env) -> None:
    """On the check itself: PPO's config asks for vLLM before it (and this machine has none)."""
    launched(monkeypatch, env)
    config = SimpleNamespace(use_cpu=False, fsdp=None, deepspeed=None)
    with pytest.raises(ConfigError, match=r"PPO with use_vllm=True under .*which are shards here"):
        sharding.check_sharding(config, generates_with_transformers=False, ppo_vllm=True)
