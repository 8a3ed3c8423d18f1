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
ZERO2 = {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}
SAVE16 = {"ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true"}


def launched(monkeypatch, env: dict[str, str]) -> None:
    """The environment ``accelerate launch --config_file ...`` gives its processes (accelerate/utils/launch.py)."""
    for key in (
        "ACCELERATE_USE_FSDP",
        "FSDP_VERSION",
        "ACCELERATE_USE_DEEPSPEED",
        "ACCELERATE_DEEPSPEED_ZERO_STAGE",
        "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL",
        "ACCELERATE_DEEPSPEED_CONFIG_FILE",
    ):
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


def refusal(make, tmp_path, **fields) -> str:
    """The message the config is refused with ("" when it passes every check before the deepspeed package's)."""
    try:
        make(tmp_path, use_cpu=False, **fields)
    except ConfigError as e:
        return "" if "needs the deepspeed package" in str(e) else str(e)
    return ""


@pytest.mark.parametrize("env", [FSDP2, ZERO3])
def test_async_rollouts_from_sharded_weights_are_refused(monkeypatch, tmp_path, gpu, env) -> None:
    """The generator process is sent the policy's state dict: shards under FSDP2 and ZeRO-3 (one process)."""
    launched(monkeypatch, env)
    message = refusal(grpo_args, tmp_path, max_staleness=1)
    assert message.startswith("max_staleness=1 under ")
    assert "holds this process's shards here" in message and "Set max_staleness: 0" in message


def test_async_rollouts_under_zero2_are_not_refused_for_sharding(monkeypatch, tmp_path, gpu) -> None:
    launched(monkeypatch, ZERO2)
    assert "max_staleness" not in refusal(grpo_args, tmp_path, max_staleness=1)


def ds_json(stage: int, **zero) -> dict:
    """The ``deepspeed`` field of a run config: a DeepSpeed JSON as a dict."""
    return {"deepspeed": {"zero_optimization": {"stage": stage, **zero}}}


GATHER = "stage3_gather_16bit_weights_on_model_save"


@pytest.mark.parametrize(
    ("env", "fields", "refused"),
    [
        (ZERO3, {}, True),
        ({**ZERO3, **SAVE16}, {}, False),
        ({}, ds_json(3), True),
        (SAVE16, ds_json(3), True),  # the environment fills only the JSON's "auto" values (accelerate's fill_match)
        (SAVE16, ds_json(3, **{GATHER: "auto"}), False),
        (SAVE16, ds_json(3, **{GATHER: False}), True),  # the JSON wins over the environment
        ({}, ds_json(3, **{GATHER: True}), False),
        (ZERO2, {}, False),  # full weights on every process: nothing to gather
    ],
)
def test_ppo_under_zero3_needs_its_weights_gathered_on_save(monkeypatch, tmp_path, gpu, env, fields, refused) -> None:
    """PPO writes the policy and critic.pt from the weights Trainer.save_model gathers; without the 16-bit gather
    ZeRO-3 would hand it the empty partitioned tensors."""
    launched(monkeypatch, env)
    message = refusal(ppo_args, tmp_path, **fields)
    assert message.startswith("PPO under DeepSpeed ZeRO-3 without zero3_save_16bit_model") == refused, message
    if refused:
        assert "zero3_save_16bit_model: true" in message and "empty tensors" in message


def test_zero3_read_from_accelerates_deepspeed_json(monkeypatch, tmp_path, gpu) -> None:
    """`accelerate launch` with a deepspeed_config_file passes the file, not the stage: the stage is read from it."""
    config = tmp_path / "ds.json"
    config.write_text('{"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": "auto"}')
    launched(monkeypatch, {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_CONFIG_FILE": str(config)})
    assert sharding.requested(SimpleNamespace(deepspeed=None, fsdp=None)) == sharding.Sharding(None, 3, False)
    message = refusal(grpo_args, tmp_path / "out", ds3_gather_for_generation=False)
    assert message.startswith("ds3_gather_for_generation=False under DeepSpeed ZeRO-3")
