"""The bad-config campaign as a test (issue 41, defect 7): every trainer config field given invalid values
(non-finite, negative, zero, out of range, wrong type, unknown names) and every file a run reads given missing,
empty, truncated or corrupted, through the real command path (``run_from_argv``: TrlParser and the YAML, the
config's ``__post_init__``, the preflight checks). Each must end in a named error that names the field and the value
given, raised by a stage that runs before the model is loaded.

"Before the model is loaded" is read from the error's own traceback: ``run_from_argv`` runs ``parse_config``,
``preflight``, ``load_tokenizer`` and ``check_prompt_fits`` and only then ``load_model``, so an error whose frame
under ``run_from_argv`` is one of the first four was raised before any weight was read. The table is written out
here, not derived from the checks it tests; :func:`test_every_numeric_field_is_in_the_campaign` fails when a config
gains a numeric field that the campaign does not try.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import traceback
from pathlib import Path

import pytest
import yaml

pytest.importorskip("trl")

from agentgym_r1.adapters.loading import load_tokenizer
from agentgym_r1.error import AgentGymError
from agentgym_r1.trainers.cli import parse_config, run_from_argv
from agentgym_r1.trainers.configs import AgentGRPOConfig, AgentPPOConfig
from agentgym_r1.trainers.grpo import AgentGRPOTrainer
from agentgym_r1.trainers.ppo import AgentPPOTrainer
from agentgym_r1.trainers.preflight import check_prompt_fits, preflight
from tests.trainers.kit import tiny_model, tiny_tokenizer

PRE_MODEL_STAGES = {"parse_config", "preflight", "load_tokenizer", "check_prompt_fits"}

# the bad values of each kind of field, as YAML
POSITIVE = (".inf", ".nan", "-1.0", "0", "[1]")
NON_NEGATIVE = (".inf", ".nan", "-1.0", "[1]")
UNIT = (".nan", "-0.5", "1.5")
OPEN_UNIT = (".nan", "0", "1.5")  # (0, 1]
HALF_OPEN_UNIT = (".nan", "-0.1", "1.0")  # [0, 1)
COUNT = ("0", "-3", "2.5", ".inf")
COUNT0 = ("-1", "2.5")
SEED = ("-1", "4294967296", "2.5")
PORT = ("0", "70000")
NAME = ("nope",)

SHARED = {  # fields both configs have: ours (EnvArguments) and transformers' TrainingArguments
    "learning_rate": (*POSITIVE, "2.0", "abc", "true"),
    "max_turns": COUNT,
    "max_new_tokens": COUNT,
    "max_prompt_tokens": COUNT,
    "max_failed_steps": COUNT,
    "num_tasks": (*COUNT, "abc"),
    "env_workers": COUNT0,
    "eval_episodes": COUNT0,
    "env_backend": ("fork",),
    "env_kwargs": ("5", "[1]"),
    "env_id": ("5",),
    "eval_env_kwargs": ("5",),
    "temperature": POSITIVE,
    "top_p": OPEN_UNIT,
    "top_k": COUNT0,
    "max_completion_length": (*COUNT, "1"),
    "vllm_gpu_memory_utilization": OPEN_UNIT,
    "vllm_max_model_length": COUNT,
    "per_device_train_batch_size": COUNT,
    "per_device_eval_batch_size": COUNT,
    "max_steps": ("0", "-2", "2.5", "abc"),
    "num_train_epochs": POSITIVE,
    "warmup_steps": NON_NEGATIVE,
    "weight_decay": NON_NEGATIVE,
    "adam_beta1": HALF_OPEN_UNIT,
    "adam_beta2": HALF_OPEN_UNIT,
    "adam_epsilon": POSITIVE,
    "max_grad_norm": NON_NEGATIVE,
    "label_smoothing_factor": HALF_OPEN_UNIT,
    "neftune_noise_alpha": NON_NEGATIVE,
    "logging_steps": POSITIVE,
    "save_steps": POSITIVE,
    "eval_steps": POSITIVE,
    "eval_delay": NON_NEGATIVE,
    "seed": SEED,
    "data_seed": SEED,
    "dataloader_num_workers": COUNT0,
    "dataloader_prefetch_factor": COUNT,
    "torch_empty_cache_steps": COUNT,
    "eval_accumulation_steps": COUNT,
    "save_total_limit": COUNT0,
    "ddp_bucket_cap_mb": COUNT,
    "ddp_timeout": COUNT,
    "local_rank": ("-2", "2.5"),
    "lr_scheduler_type": NAME,
    "optim": NAME,
    # LoRA (issue 37): refused whatever use_peft says, so the base config (use_peft false) reaches each check
    "lora_r": COUNT,
    "lora_alpha": POSITIVE,
    "lora_dropout": HALF_OPEN_UNIT,
    "lora_task_type": ("SEQ_CLS", "nope"),
    "lora_target_modules": ("[q_proj]", "[5]", "[]"),
    "load_in_4bit": ("true",),
    "load_in_8bit": ("true",),
}
GRPO_ONLY = {  # TRL's GRPOConfig and our AgentGRPOConfig fields
    "gradient_accumulation_steps": COUNT,
    "num_generations": ("1", "0", "2.5"),
    "num_generations_eval": COUNT,
    "generation_batch_size": COUNT,
    "steps_per_generation": COUNT,
    "num_iterations": COUNT,
    "beta": NON_NEGATIVE,
    "epsilon": POSITIVE,
    "epsilon_high": POSITIVE,
    "delta": (".nan", "0.5"),
    "min_p": UNIT,
    "sapo_temperature_neg": POSITIVE,
    "sapo_temperature_pos": POSITIVE,
    "vespo_k_pos": POSITIVE,
    "vespo_lambda_pos": POSITIVE,
    "vespo_k_neg": POSITIVE,
    "vespo_lambda_neg": POSITIVE,
    "ref_model_mixup_alpha": UNIT,
    "ref_model_sync_steps": COUNT,
    "top_entropy_quantile": UNIT,
    "entropy_coef": NON_NEGATIVE,
    "entropy_coef_min": NON_NEGATIVE,
    "entropy_coef_max": NON_NEGATIVE,
    "entropy_coef_delta": NON_NEGATIVE,
    "entropy_target": NON_NEGATIVE,
    "router_aux_loss_coef": NON_NEGATIVE,
    "vllm_tensor_parallel_size": COUNT,
    "vllm_server_port": PORT,
    "vllm_group_port": PORT,
    "vllm_server_timeout": POSITIVE,
    "vllm_importance_sampling_clip_max": POSITIVE,
    "vllm_importance_sampling_clip_min": NON_NEGATIVE,
    "vllm_importance_sampling_cap": POSITIVE,
    "off_policy_mask_threshold": NON_NEGATIVE,
    "max_tool_calling_iterations": COUNT,
    "num_completions_to_print": COUNT0,
    "repetition_penalty": (".nan", "1.2"),
    "reward_weights": ("[.nan]", "[1.0, 2.0]"),
    "pad_to_multiple_of": ("0", "-8", "2.5"),
    "loss_type": NAME,
    "importance_sampling_level": NAME,
    "multi_objective_aggregation": NAME,
    "scale_rewards": NAME,
    "vllm_mode": NAME,
    "vllm_importance_sampling_mode": NAME,
    "advantage_estimator": NAME,
    "layout": NAME,
    "step_context": ("x",),
    "process_reward_weight": NON_NEGATIVE,
    "keep_ratio": OPEN_UNIT,
    "echo_trap_window": COUNT,
    "echo_trap_ratio": UNIT,
    "max_staleness": COUNT0,
    "staleness_is_cap": POSITIVE,
    "dynamic_sampling_max_tries": COUNT,
    "dynamic_sampling_filter": NAME,
    "curriculum": NAME,
    "curriculum_band": ("[0.2]", "[-0.1, 0.5]", "[0.5, 1.5]", "[0.8, 0.2]", "[.nan, 0.5]", "[0.2, 0.5, 0.8]"),
    "curriculum_window": COUNT,
    "curriculum_explore": UNIT,
}
PPO_ONLY = {
    "gradient_accumulation_steps": ("2",),
    "rollout_batch_size": COUNT,
    "mini_batch_size": COUNT,
    "ppo_epochs": COUNT,
    "clip_range": POSITIVE,
    "value_clip_range": POSITIVE,
    "value_coef": NON_NEGATIVE,
    "critic_learning_rate": (*POSITIVE, "2.0"),
    "gamma": UNIT,
    "lam": UNIT,
    "level": NAME,
}
# numeric fields not tried, with the reason
NOT_TRIED: dict[str, str] = {}

GRPO_CASES = [(AgentGRPOConfig, f, v) for f, vs in {**SHARED, **GRPO_ONLY}.items() for v in vs]
PPO_CASES = [(AgentPPOConfig, f, v) for f, vs in {**SHARED, **PPO_ONLY}.items() for v in vs]
TRAINERS = {AgentGRPOConfig: AgentGRPOTrainer, AgentPPOConfig: AgentPPOTrainer}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny model saved with its tokenizer: what model_init points at in every case."""
    path = tmp_path_factory.mktemp("model")
    tok = tiny_tokenizer()
    tiny_model(tok).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def base_config(cls: type, model: Path, out: Path) -> dict:
    """A config every stage before the model load accepts (:func:`test_the_base_config_passes_every_check`)."""
    common = {
        "model_init": str(model),
        "output_dir": str(out),
        "use_cpu": True,
        "report_to": "none",
        "env_id": "AgentR1/GSM8K-v0",
        "env_kwargs": {"source": "synthetic"},
        "max_steps": 1,
        "max_completion_length": 64,
        "max_new_tokens": 8,
        "max_turns": 2,
        "num_tasks": 8,
        "max_prompt_tokens": 4096,
        "save_strategy": "no",
        "learning_rate": 1e-3,
    }
    if cls is AgentPPOConfig:
        return {**common, "rollout_batch_size": 2, "mini_batch_size": 2}
    return {**common, "num_generations": 2, "per_device_train_batch_size": 2}


def write_config(tmp_path: Path, config: dict, extra: str = "") -> str:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config) + extra)
    return str(path)


def stage_of(error: BaseException) -> str:
    """The step of ``run_from_argv`` that raised ``error`` (the frame right under it in the traceback)."""
    names = [frame.name for frame in traceback.extract_tb(error.__traceback__)]
    assert "run_from_argv" in names, names
    return names[names.index("run_from_argv") + 1]


def refused(cls: type, config_path: str) -> AgentGymError:
    """Run the trainer's command on ``config_path``; the named error it must raise before the model load."""
    with pytest.raises(AgentGymError) as info:
        run_from_argv(cls, TRAINERS[cls], ["--config", config_path])
    stage = stage_of(info.value)
    assert stage in PRE_MODEL_STAGES, f"raised in {stage}, after the model load started: {info.value}"
    return info.value


def test_the_base_config_passes_every_check(tmp_path, model_dir) -> None:
    """Each case below changes one field of this config, so the refusal is that field's."""
    for cls in TRAINERS:
        args = parse_config(cls, ["--config", write_config(tmp_path, base_config(cls, model_dir, tmp_path / "o"))])
        preflight(args)
        check_prompt_fits(args, load_tokenizer(args.model_init))


@pytest.mark.parametrize(
    ("cls", "field", "value"), GRPO_CASES + PPO_CASES, ids=lambda x: x.__name__[5:-6] if isinstance(x, type) else str(x)
)
def test_a_bad_field_value_is_refused_before_the_model_loads(tmp_path, model_dir, cls, field, value) -> None:
    config = base_config(cls, model_dir, tmp_path / "out")
    config.pop(field, None)
    error = refused(cls, write_config(tmp_path, config, f"{field}: {value}\n"))
    message = str(error)
    assert field in message, message
    given = yaml.safe_load(value)
    assert str(given) in message or repr(given) in message, message


def test_every_numeric_field_is_in_the_campaign() -> None:
    """A numeric field added to either config (ours, TRL's or transformers') must be tried above or listed as not
    tried, with the reason."""
    for cls, table in ((AgentGRPOConfig, {**SHARED, **GRPO_ONLY}), (AgentPPOConfig, {**SHARED, **PPO_ONLY})):
        numeric = {f.name for f in dataclasses.fields(cls) if _type_name(f.type).split(" | ")[0] in NUMERIC}
        assert numeric - set(table) - set(NOT_TRIED) == set(), cls.__name__


NUMERIC = ("int", "float", "list[float]")


def _type_name(annotation: object) -> str:
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))


# -- files: the model directory, the checkpoint to resume from, the output directory ---------------------------------
def _weights(d: Path) -> Path:
    return d / "model.safetensors"


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _corrupt_header(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[8:40] = b"x" * 32
    path.write_bytes(bytes(data))


MODEL_DAMAGE = {  # what is done to a copy of the model directory -> what the message must name
    "empty weights": (lambda d: _weights(d).write_bytes(b""), "model.safetensors"),
    "truncated weights": (lambda d: _truncate(_weights(d)), "model.safetensors"),
    "corrupted header": (lambda d: _corrupt_header(_weights(d)), "model.safetensors"),
    "garbage weights": (lambda d: _weights(d).write_bytes(b"\xff" * 1000), "model.safetensors"),
    "no weights": (lambda d: _weights(d).unlink(), "no weights"),
    "config.json not JSON": (lambda d: (d / "config.json").write_text("{not json"), "config.json"),
    "config.json without model_type": (lambda d: (d / "config.json").write_text("{}"), "config.json"),
    "no config.json": (lambda d: (d / "config.json").unlink(), "config.json"),
    "no tokenizer": (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json"),
    "damaged tokenizer": (lambda d: (d / "tokenizer.json").write_text('{"model": 5}'), "tokenizer"),
    "bad shard index": (lambda d: (d / "model.safetensors.index.json").write_text("[]"), "index"),
    "missing shard": (
        lambda d: (d / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {"w": "model-00002-of-00002.safetensors"}})
        ),
        "model-00002-of-00002",
    ),
}


@pytest.mark.parametrize("cls", list(TRAINERS), ids=lambda c: c.__name__)
@pytest.mark.parametrize("damage", list(MODEL_DAMAGE))
def test_a_damaged_model_directory_is_refused_before_the_model_loads(tmp_path, model_dir, cls, damage) -> None:
    """Before: raw SafetensorError / OSError / ValueError tracebacks, and for a missing tokenizer.json a
    misleading "install sentencepiece"."""
    broken = tmp_path / "model"
    shutil.copytree(model_dir, broken)
    harm, names = MODEL_DAMAGE[damage]
    harm(broken)
    error = refused(cls, write_config(tmp_path, base_config(cls, broken, tmp_path / "out")))
    message = str(error)
    assert "model_init" in message and names in message and "sentencepiece" not in message, message


def _checkpoint(model_dir: Path, at: Path, state: bool = True, harm=None) -> Path:
    shutil.copytree(model_dir, at)
    if state:
        (at / "trainer_state.json").write_text("{}")
    (at / "critic.pt").write_bytes(b"x")
    if harm:
        harm(at)
    return at


@pytest.mark.parametrize("cls", list(TRAINERS), ids=lambda c: c.__name__)
@pytest.mark.parametrize("case", ["missing", "no trainer state", "truncated weights", "true without checkpoints"])
def test_a_bad_resume_from_checkpoint_is_refused_before_the_model_loads(tmp_path, model_dir, cls, case) -> None:
    config = base_config(cls, model_dir, tmp_path / "out")
    config["resume_from_checkpoint"] = {
        "missing": lambda: str(tmp_path / "nope"),
        "no trainer state": lambda: str(_checkpoint(model_dir, tmp_path / "ckpt", state=False)),
        "truncated weights": lambda: str(
            _checkpoint(model_dir, tmp_path / "ckpt", harm=lambda d: _truncate(_weights(d)))
        ),
        "true without checkpoints": lambda: True,
    }[case]()
    message = str(refused(cls, write_config(tmp_path, config)))
    assert "resume_from_checkpoint" in message, message


def test_ppo_resume_needs_the_critic(tmp_path, model_dir) -> None:
    ckpt = _checkpoint(model_dir, tmp_path / "ckpt")
    (ckpt / "critic.pt").unlink()
    config = {**base_config(AgentPPOConfig, model_dir, tmp_path / "out"), "resume_from_checkpoint": str(ckpt)}
    assert "critic.pt" in str(refused(AgentPPOConfig, write_config(tmp_path, config)))


@pytest.mark.parametrize("where", ["under a file", "a file"])
def test_an_output_dir_that_cannot_be_a_directory_is_refused(tmp_path, model_dir, where) -> None:
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "run" if where == "under a file" else tmp_path / "afile"
    message = str(refused(AgentGRPOConfig, write_config(tmp_path, base_config(AgentGRPOConfig, model_dir, out))))
    assert "output_dir" in message and str(tmp_path / "afile") in message, message


# -- task sampling: dynamic sampling and the curriculum (issue 38) ----------------------------------------------------
@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"dynamic_sampling": True, "dynamic_sampling_max_tries": 1}, "dynamic_sampling_max_tries=1"),
        ({"dynamic_sampling": True, "top_k": 1}, "top_k=1"),
        ({"curriculum": "pass_rate", "env_kwargs": {"source": "TASKS"}}, "source with levels"),
        ({"curriculum": "pass_rate", "curriculum_levels": ["easy", "nope"]}, "'nope'"),
        ({"curriculum": "pass_rate", "curriculum_levels": ["hard"]}, "at least two different"),
        ({"curriculum": "pass_rate", "env_kwargs": {"source": "synthetic", "difficulty": "hard"}}, "difficulty"),
    ],
)
def test_task_sampling_that_cannot_work_is_refused_at_start(tmp_path, model_dir, change, names) -> None:
    """Dynamic sampling that could never fill a batch, and a curriculum on a source without levels (real data, an
    env without ``difficulty``), a level the generator does not know or a single level: refused before the model
    loads, naming the field and the fix."""
    tasks = tmp_path / "tasks.jsonl"  # real data in GSM8K's format: its problems are as they are, no levels
    tasks.write_text(json.dumps({"question": "Ann has 2 apples and buys 2. How many?", "answer": "2+2=4\n#### 4"}))
    if change.get("env_kwargs", {}).get("source") == "TASKS":
        change = {**change, "env_kwargs": {"source": str(tasks)}}
    config = {**base_config(AgentGRPOConfig, model_dir, tmp_path / "out"), **change}
    message = str(refused(AgentGRPOConfig, write_config(tmp_path, config)))
    field = "dynamic_sampling" if "dynamic_sampling" in change else "curriculum"
    assert field in message and names in message, message


# -- the env and the first prompt -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"env_id": "AgentR1/Nope-v0"}, "AgentR1/Nope-v0"),
        ({"env_kwargs": {"sourc": "synthetic"}}, "sourc"),
        ({"env_id": "AgentR1/WebShop-v0", "env_kwargs": {"source": "synthetic"}}, "source"),
        ({"max_prompt_tokens": 5}, "max_prompt_tokens"),
        ({"model_init": None}, "model_init"),
        ({"model_init": "no/such/dir"}, "model_init"),
    ],
)
def test_the_env_and_the_prompt_are_checked_before_the_model_loads(tmp_path, model_dir, change, names) -> None:
    """Before: the model was loaded before the env id was looked up, and a max_prompt_tokens below the prompt was
    accepted (every episode a failed row)."""
    config = {**base_config(AgentGRPOConfig, model_dir, tmp_path / "out"), **change}
    message = str(refused(AgentGRPOConfig, write_config(tmp_path, config)))
    assert names in message, message


def test_a_refused_run_makes_no_output_dir(tmp_path, model_dir) -> None:
    """A refused run leaves nothing behind (no output directory with a half-written run)."""
    out = tmp_path / "out"
    refused(
        AgentGRPOConfig, write_config(tmp_path, base_config(AgentGRPOConfig, model_dir, out), "learning_rate: .inf\n")
    )
    assert not os.path.exists(out)


# -- asynchronous rollouts where they cannot be served (issue 38) ---------------------------------------------------
@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"use_vllm": True}, ("use_vllm", "use_vllm: false")),
        ({"layout": "step"}, ("layout='step'", "layout: concatenated")),
        ({"num_iterations": 2}, ("num_iterations=2", "num_iterations: 1")),
        ({"steps_per_generation": 2}, ("steps_per_generation=2", "steps_per_generation")),
        ({"resume_from_checkpoint": True}, ("resume_from_checkpoint=True",)),
    ],
    ids=lambda x: next(iter(x)) if isinstance(x, dict) else None,
)
def test_max_staleness_with_what_it_cannot_serve_is_refused(tmp_path, model_dir, change, names) -> None:
    """Each message names max_staleness, the setting that cannot be served and the fix (or max_staleness: 0)."""
    config = {**base_config(AgentGRPOConfig, model_dir, tmp_path / "out"), "max_staleness": 1, **change}
    message = str(refused(AgentGRPOConfig, write_config(tmp_path, config)))
    for name in ("max_staleness=1", "max_staleness: 0", *names):
        assert name in message, message


def test_a_lora_target_that_matches_no_module_is_refused_before_the_model_loads(tmp_path, model_dir) -> None:
    """Issue 37: the message lists the model's module names (read from config.json on the meta device)."""
    for cls in TRAINERS:
        config = {**base_config(cls, model_dir, tmp_path / "out"), "use_peft": True, "lora_target_modules": ["qkv"]}
        message = str(refused(cls, write_config(tmp_path, config)))
        assert "lora_target_modules" in message and "'qkv'" in message and "q_proj" in message, message


def test_an_adapter_directory_as_model_init_says_to_merge_it(tmp_path, model_dir) -> None:
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(model_dir)}))
    message = str(refused(AgentGRPOConfig, write_config(tmp_path, base_config(AgentGRPOConfig, adapter, tmp_path))))
    assert "LoRA adapter" in message and "--merge" in message, message
