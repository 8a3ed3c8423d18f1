"""LoRA (``use_peft``) in both trainers, on the tiny model: only adapter tensors move, GRPO's rows, masks and
advantages are full fine-tuning's for the same seed, PPO's policy and critic each move only their own adapter (and
the critic its head), checkpoints hold the adapter and tokenizer and load back on their base, and the bad inputs of
issue 37 (a target that matches nothing, a missing base, a quantized base on CPU, peft not installed) are refused
with the fix."""

from __future__ import annotations

import json
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")

from agentgym_r1.error import ConfigError, DependencyNotInstalled, ModelFilesError  # noqa: E402
from tests.trainers.kit import (  # noqa: E402
    CountEnv,
    grpo_args,
    ppo_args,
    run_one_step,
    tiny_model,
    tiny_tokenizer,
)

LORA = {"use_peft": True, "lora_r": 4, "lora_alpha": 8, "lora_target_modules": ["q_proj", "v_proj", "down_proj"]}
SMALL = {"per_device_train_batch_size": 4, "num_generations": 2}  # two groups of two: enough, and quick
ROW_KEYS = ("prompt_ids", "completion_ids", "completion_mask", "tool_mask", "advantages", "num_items_in_batch")


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def split(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Copies of (base tensors, adapter tensors) of an adapted model, by name."""
    base, adapter = {}, {}
    for name, p in model.named_parameters():
        (adapter if "lora_" in name else base)[name] = p.detach().clone()
    return base, adapter


def moved(before: dict[str, torch.Tensor], model: torch.nn.Module) -> dict[str, bool]:
    now = dict(model.named_parameters())
    return {name: not torch.equal(t, now[name].detach()) for name, t in before.items()}


@pytest.mark.parametrize(
    ("layout", "estimator"),
    [("concatenated", "grpo"), ("step", "rloo"), ("concatenated", "reinforce_pp")],
)
def test_lora_grpo_trains_only_the_adapter_on_full_fine_tunings_rows(tmp_path, tokenizer, layout, estimator) -> None:
    """Two steps with LoRA: every base tensor bit-identical, the adapter moved; the first step's rows, masks and
    advantages equal full fine-tuning's from the same model and seed (a fresh adapter's B is zero, so both sample
    from the same policy)."""
    kw = dict(layout=layout, advantage_estimator=estimator, loss_type="dapo", **SMALL)
    full, _ = run_one_step(tiny_model(tokenizer), grpo_args(tmp_path / "full", **kw), tokenizer)
    model = tiny_model(tokenizer)
    args = grpo_args(tmp_path / "lora", max_steps=2, **kw, **LORA)
    captured: dict = {}

    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    trainer = AgentGRPOTrainer(model, args, tokenizer, make_env=CountEnv)
    score = trainer._generate_and_score_completions

    def first_rows(inputs):
        out = score(inputs)
        captured.setdefault("out", out)
        return out

    trainer._generate_and_score_completions = first_rows
    base, adapter = split(trainer.model)
    assert base and adapter and all(not p.requires_grad for n, p in trainer.model.named_parameters() if n in base)
    trainer.train()
    assert not any(moved(base, trainer.model).values()), "a base tensor changed"
    assert any(moved(adapter, trainer.model).values()), "the adapter did not move"
    for key in ROW_KEYS:
        torch.testing.assert_close(captured["out"][key], full["out"][key], rtol=0, atol=0, msg=key)


def test_lora_grpo_with_a_kl_term_uses_the_base_as_reference(tmp_path, tokenizer) -> None:
    """beta > 0 in the step layout: the reference log-probabilities are the base's (adapter off), as TRL's own path
    computes them; before, the adapted policy was its own reference and the KL term was always zero."""
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    model = tiny_model(tokenizer)
    args = grpo_args(tmp_path, layout="step", loss_type="dapo", beta=0.1, max_steps=2, **SMALL, **LORA)
    trainer = AgentGRPOTrainer(model, args, tokenizer, make_env=CountEnv)
    outs: list = []
    score = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: outs.append(score(inputs)) or outs[-1]
    trainer.train()
    out = outs[-1]  # the second step: the adapter has moved, so the policy is no longer the base
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    attn = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    keep = out["completion_ids"].size(1)
    with torch.no_grad():
        policy = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, keep)[0]
        with trainer.model.disable_adapter():
            base = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, keep)[0]
    mask = out["completion_mask"].bool()
    torch.testing.assert_close(out["ref_per_token_logps"][mask], base[mask])
    assert (policy - base)[mask].abs().max() > 1e-6


def test_lora_ppo_moves_each_adapter_only_where_it_should(tmp_path, tokenizer) -> None:
    """The policy and the critic each train their own adapter on a frozen base, the critic its value head too; the
    optimizer holds only those tensors, and a checkpoint holds the adapter, the tokenizer and the critic's part."""
    from agentgym_r1.trainers.ppo import AgentPPOTrainer

    model = tiny_model(tokenizer)
    args = ppo_args(tmp_path, save_strategy="steps", save_steps=1, rollout_batch_size=4, mini_batch_size=2, **LORA)
    trainer = AgentPPOTrainer(model, args, tokenizer, make_env=CountEnv)
    m = trainer.model
    parts = {"policy": m.policy, "critic": m.critic}
    before = {part: split(module) for part, module in parts.items()}
    head = [p.detach().clone() for p in m.value_head.parameters()]
    trainer.train()
    for part, module in parts.items():
        base, adapter = before[part]
        assert not any(moved(base, module).values()), f"the {part}'s base changed"
        assert any(moved(adapter, module).values()), f"the {part}'s adapter did not move"
    assert any(not torch.equal(a, b) for a, b in zip(head, m.value_head.parameters(), strict=True))
    in_optimizer = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert in_optimizer == {id(p) for p in m.parameters() if p.requires_grad}
    policy_ids = {id(p) for p in m.policy.parameters() if p.requires_grad}
    assert set(map(id, trainer.optimizer.param_groups[0]["params"])) == policy_ids  # no critic tensor in it
    ckpt = tmp_path / "checkpoint-1"
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "critic.pt"} <= {
        p.name for p in ckpt.iterdir()
    }
    assert not (ckpt / "model.safetensors").exists()
    critic = torch.load(ckpt / "critic.pt", weights_only=True)["critic"]
    assert critic and all("lora_" in name for name in critic)  # the critic's adapter, not a copy of the base


def test_an_adapter_checkpoint_plays_on_its_base_and_merges(tmp_path, tokenizer) -> None:
    """GRPO's saved adapter loads on its base (``hf:`` policies, inspect: ``load_model``) with the trained policy's
    log-probabilities, and ``agentgym-r1 adapter DIR --merge OUT`` writes a plain model with the same ones."""
    from transformers import AutoModelForCausalLM

    from agentgym_r1.adapters.loading import load_model, load_tokenizer
    from agentgym_r1.cli import main
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    base_dir = tmp_path / "base"
    tiny_model(tokenizer).save_pretrained(base_dir)
    tokenizer.save_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir)  # from its directory: the adapter records the base's path
    # bf16=False: accelerate's autocast stays on the trained model's forward (TRL's GRPOConfig turns bf16 on), and
    # the logits below are compared in fp32
    args = grpo_args(tmp_path / "run", bf16=False, **SMALL, **LORA)
    trainer = AgentGRPOTrainer(model, args, tokenizer, make_env=CountEnv)
    trainer.train()
    out = tmp_path / "adapter"
    trainer.save_model(str(out))
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    ids = torch.tensor([tokenizer("12 ab 345 cd")["input_ids"]])
    trainer.model.eval()
    with torch.no_grad():
        want = trainer.model(ids).logits
        with trainer.model.disable_adapter():
            untrained = trainer.model(ids).logits
    assert (want - untrained).abs().max() > 1e-5
    loaded = load_model(str(out), "model", device="cpu")
    assert load_tokenizer(str(out)).get_vocab() == tokenizer.get_vocab()
    torch.testing.assert_close(loaded(ids).logits, want, rtol=1e-5, atol=1e-5)
    merged = tmp_path / "merged"
    assert main(["adapter", str(out), "--merge", str(merged)]) == 0
    assert (merged / "model.safetensors").exists() and (merged / "tokenizer.json").exists()
    torch.testing.assert_close(load_model(str(merged), device="cpu")(ids).logits, want, rtol=1e-5, atol=1e-5)
    from agentgym_r1.leaderboard.models import HFPolicy

    assert HFPolicy(str(out)).backend is not None  # eval --policy hf:ADAPTER_DIR

    config = json.loads((out / "adapter_config.json").read_text())
    (out / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "gone/base"}))
    with pytest.raises(ModelFilesError, match="'gone/base'"):
        load_model(str(out), "model", device="cpu")


def test_a_target_that_matches_no_module_lists_the_models_modules(tmp_path, tokenizer) -> None:
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer
    from agentgym_r1.trainers.ppo import AgentPPOTrainer

    bad = {**LORA, "lora_target_modules": ["q_proj", "qkv"]}
    for trainer, args in ((AgentGRPOTrainer, grpo_args), (AgentPPOTrainer, ppo_args)):
        with pytest.raises(ConfigError, match="'qkv' matches no module") as info:
            trainer(tiny_model(tokenizer), args(tmp_path, **bad), tokenizer, make_env=CountEnv)
        assert "q_proj, up_proj, v_proj" in str(info.value) or "gate_proj" in str(info.value)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"load_in_4bit": True}, "needs a CUDA device"),
        ({"load_in_8bit": True, "use_peft": False}, "use_peft"),
        ({"load_in_4bit": True, "load_in_8bit": True}, "choose one"),
        ({"use_peft": False, "lora_target_modules": ["q_proj"]}, "use_peft=false"),
        ({"lora_target_modules": [""]}, "list of module names"),
    ],
)
def test_lora_config_errors_say_how_to_fix(tmp_path, change, says) -> None:
    for make in (grpo_args, ppo_args):
        with pytest.raises(ConfigError, match=says):
            make(tmp_path, **{**LORA, **change})


def test_use_peft_without_peft_names_the_extra(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)  # what importlib sees when peft is not installed
    with pytest.raises(DependencyNotInstalled, match=r"agentgym-r1\[lora\]"):
        grpo_args(tmp_path, **LORA)


def test_ppo_adapters_keep_a_bf16_bases_dtype_under_zero3(tokenizer) -> None:
    """Under ZeRO-3 every trainable tensor of PolicyWithCritic is in the base's dtype (ZeRO-3's coalesced all-gather
    takes one dtype: trl#6089); elsewhere peft's default makes a bf16 base's adapters fp32."""
    from types import SimpleNamespace

    from peft import LoraConfig

    from agentgym_r1.trainers import lora
    from agentgym_r1.trainers.ppo import PolicyWithCritic

    config = LoraConfig(task_type="CAUSAL_LM", r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    zero3 = SimpleNamespace(deepspeed={"zero_optimization": {"stage": 3}}, fsdp=None)
    zero2 = SimpleNamespace(deepspeed={"zero_optimization": {"stage": 2}}, fsdp=None)
    assert lora.adapter_keeps_base_dtype(zero3) and not lora.adapter_keeps_base_dtype(zero2)
    for keep, dtypes in ((True, {torch.bfloat16}), (False, {torch.float32})):
        model = PolicyWithCritic(tiny_model(tokenizer, dtype=torch.bfloat16), config, autocast_adapter_dtype=not keep)
        adapters = {p.dtype for n, p in model.named_parameters() if "lora_" in n}
        assert adapters == dtypes
        assert next(model.value_head.parameters()).dtype == torch.bfloat16
