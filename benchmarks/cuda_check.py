"""The trainers' CUDA paths on a GPU: GRPO and PPO steps with bf16 autocast on fp32 master weights, generation with
transformers on the GPU, the rollout throughput there, and LoRA: a GRPO step with ``use_peft`` (only the adapter
moves), a QLoRA step (``load_in_4bit``: the base in 4 bits through bitsandbytes; skipped, saying why, where
bitsandbytes is not installed) and asynchronous GRPO (``max_staleness: 1``: the trainer on the GPU, the generator
process beside it). Prints what it measured; exits non-zero when a check fails. (vLLM is not checked
here: the GPU machine this project is lent has no vLLM and cannot fetch one.)

    PYTHONPATH=. python benchmarks/cuda_check.py --steps 3

Then the sharded checks of ``benchmarks/sharded_check.py`` (one GPU, world size 1, each configuration in a child
process with its own one-process group): one GRPO and one PPO step under accelerate's FSDP2 plugin, and under
DeepSpeed ZeRO-2 and ZeRO-3 (then ``Trainer.save_model``), each against the same steps unsharded.
``--only fsdp2`` or ``--only deepspeed`` runs that check alone; ``--logs DIR`` keeps the children's logs there.

DeepSpeed on a machine without internet: the wheels in ``.whl-ds/`` (deepspeed 0.19.8 built as a pure-Python wheel
with ``DS_BUILD_OPS=0``: ZeRO-2/3 with a torch optimizer loads no compiled op, so neither nvcc nor ninja runs; and
the runtime requirements a torch + transformers environment may lack: hjson, py-cpuinfo, msgpack, ninja, einops,
pydantic 2 and its own), installed with

    python -m pip install --no-index --find-links .whl-ds deepspeed
    PYTHONPATH=. python benchmarks/cuda_check.py --only deepspeed --logs "$OUT/sharded"
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import torch
from sharded_check import deepspeed_check, fsdp2_check

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--only", choices=("all", "fsdp2", "deepspeed"), default="all", help="run one sharded check alone")
    p.add_argument("--logs", default=None, help="keep the sharded checks' child logs here (default: a temp dir)")
    a = p.parse_args()
    logs = a.logs or tempfile.mkdtemp(prefix="sharded-check-")
    if a.only == "deepspeed":
        deepspeed_check(logs)
        return
    assert torch.cuda.is_available(), "no CUDA device"
    if a.only == "fsdp2":
        fsdp2_check(logs)
        return
    from agentgym_r1.adapters import ChatTokenizer, Prompt, RolloutConfig, RolloutEngine, SamplingParams
    from agentgym_r1.adapters.backends.hf import HFBackend
    from agentgym_r1.adapters.scratch import make_model, train_tokenizer
    from agentgym_r1.testing import gsm8k_corpus
    from agentgym_r1.trainers.configs import AgentGRPOConfig, AgentPPOConfig
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer
    from agentgym_r1.trainers.ppo import AgentPPOTrainer

    print(torch.cuda.get_device_name(0), "torch", torch.__version__)
    # a fingerprint given, so datasets does not hash the table: its hashing fails on the GPU machine's Python 3.12
    # build (PicklingError on pyarrow's MonthDayNano)
    from datasets import Dataset
    from datasets.table import InMemoryTable

    tasks = Dataset(
        InMemoryTable.from_pylist([{"prompt": json.dumps({"seed": i})} for i in range(1000)]),
        fingerprint="cuda-check-tasks",
    )
    tok = train_tokenizer(gsm8k_corpus(60), vocab_size=512)
    env = {"env_id": "AgentR1/GSM8K-v0", "env_kwargs": {"source": "synthetic"}}
    common = dict(
        max_steps=a.steps,
        max_completion_length=256,
        max_new_tokens=48,
        max_turns=3,
        learning_rate=1e-4,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        bf16=True,
        seed=0,
        **env,
    )
    for name in ("grpo", "ppo"):
        model = make_model(tok, hidden=128, layers=2, heads=2).train()
        out = tempfile.mkdtemp()
        if name == "grpo":
            args = AgentGRPOConfig(
                output_dir=out, per_device_train_batch_size=a.batch, num_generations=4, beta=0.0, **common
            )
            trainer = AgentGRPOTrainer(model, args, tok, train_dataset=tasks)
            params = model
        else:
            args = AgentPPOConfig(output_dir=out, rollout_batch_size=a.batch, mini_batch_size=a.batch // 2, **common)
            trainer = AgentPPOTrainer(model, args, tok, train_dataset=tasks)
            params = trainer.model
        before = [q.detach().clone() for q in params.parameters()]
        t0 = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - t0
        moved = any(
            not torch.equal(x, y.detach().to(x.device)) for x, y in zip(before, params.parameters(), strict=True)
        )
        fp32 = all(q.dtype == torch.float32 for q in params.parameters())
        device = next(params.parameters()).device
        loss = trainer.state.log_history[-1].get("loss")
        print(
            f"{name}: {a.steps} steps bf16 autocast on {device}: {wall / a.steps:.2f} s/step, params moved={moved},"
            f" master weights fp32={fp32}, last loss={loss}"
        )
        assert moved and fp32 and device.type == "cuda"
    lora_checks(tok, common, tasks, a.batch)
    async_check(tok, common, tasks, a.batch)
    model = make_model(tok, hidden=128, layers=2, heads=2).cuda()
    chat = ChatTokenizer(tok)
    engine = RolloutEngine(
        HFBackend(model, chat, neutral=True),
        chat,
        RolloutConfig(samples_per_prompt=4, sampling=SamplingParams(max_new_tokens=48)),
    )
    engine.rollout([Prompt("AgentR1/GSM8K-v0", {"source": "synthetic"}, seed=99)])
    batch = engine.rollout([Prompt("AgentR1/GSM8K-v0", {"source": "synthetic"}, seed=i) for i in range(16)])
    tokens = sum(e.num_agent_tokens for e in batch.episodes)
    print(
        f"rollout on cuda (transformers): {len(batch.episodes)} episodes, {tokens / batch.timings['total']:.0f} "
        f"agent tokens/s, {len(batch.episodes) / batch.timings['total']:.2f} episodes/s"
    )
    fsdp2_check(logs)
    deepspeed_check(logs)


def async_check(tok, common: dict, tasks, batch: int) -> None:
    """GRPO with ``max_staleness: 1`` on CUDA: the trainer updates on the GPU (bf16 autocast) while the generator
    process (spawned; it samples with transformers on its own CPU copy, weights pushed after each update) plays the
    next batch. Checks every step logged its staleness (at most 1) and finite importance ratios; whether the weights
    moved is printed, not required (an untrained model's group often has one reward, so nothing to learn from)."""
    import math

    from agentgym_r1.adapters.scratch import make_model
    from agentgym_r1.trainers.configs import AgentGRPOConfig
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    steps = max(common["max_steps"], 3)
    model = make_model(tok, hidden=128, layers=2, heads=2).train()
    args = AgentGRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=batch,
        num_generations=4,
        beta=0.0,
        max_staleness=1,
        **(common | {"max_steps": steps}),
    )
    trainer = AgentGRPOTrainer(model, args, tok, train_dataset=tasks)
    before = [q.detach().clone() for q in model.parameters()]
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    moved = any(not torch.equal(x, y.detach()) for x, y in zip(before, model.parameters(), strict=True))
    logs = [h for h in trainer.state.log_history if "async/is_ratio_max" in h]
    stale = [h["async/staleness_max"] for h in logs]
    ratios = [(h["async/is_ratio_min"], h["async/is_ratio_max"]) for h in logs]
    waits = [h["async/wait_share"] for h in logs]
    print(
        f"async grpo (max_staleness 1): {steps} steps on {next(model.parameters()).device}: {wall / steps:.2f} s/step,"
        f" params moved={moved}, staleness max per step {stale}, IS ratio (min, max) per step"
        f" {[(round(lo, 3), round(hi, 3)) for lo, hi in ratios]}, trainer wait share {[round(w, 2) for w in waits]}"
    )
    finite = all(math.isfinite(v) for pair in ratios for v in pair)
    assert len(logs) == steps and finite and max(stale) <= 1 and next(model.parameters()).device.type == "cuda"


def lora_checks(tok, common: dict, tasks, batch: int) -> None:
    """A LoRA GRPO step on CUDA (base bit-identical, adapter moved), then QLoRA (a 4-bit base) where bitsandbytes is
    installed: the base loaded through ``load_in_4bit``'s quantization config, the adapter trained on it."""
    import importlib.util

    from agentgym_r1.adapters.loading import load_model
    from agentgym_r1.adapters.scratch import make_model
    from agentgym_r1.trainers.configs import AgentGRPOConfig
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    base_dir = tempfile.mkdtemp()
    make_model(tok, base_dir, hidden=128, layers=2, heads=2)
    tok.save_pretrained(base_dir)
    lora = dict(use_peft=True, lora_r=8, lora_alpha=16, lora_target_modules=["all-linear"], model_init=base_dir)
    for quant in ("", "load_in_4bit"):
        if quant and importlib.util.find_spec("bitsandbytes") is None:
            print("qlora: SKIPPED: bitsandbytes is not installed here (pip install bitsandbytes to check QLoRA)")
            continue
        args = AgentGRPOConfig(
            output_dir=tempfile.mkdtemp(),
            per_device_train_batch_size=batch,
            num_generations=4,
            beta=0.0,
            **common,
            **lora,
            **({quant: True} if quant else {}),
        )
        model = load_model(base_dir, **args.quantization_kwargs())
        trainer = AgentGRPOTrainer(model, args, tok, train_dataset=tasks)
        named = dict(trainer.model.named_parameters())
        base = {n: q.detach().clone() for n, q in named.items() if "lora_" not in n}
        adapter = {n: q.detach().clone() for n, q in named.items() if "lora_" in n}
        t0 = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - t0
        base_same = all(torch.equal(t, named[n].detach()) for n, t in base.items())
        adapter_moved = any(not torch.equal(t, named[n].detach()) for n, t in adapter.items())
        trainable = sum(q.numel() for q in named.values() if q.requires_grad)
        name = "qlora (4-bit base)" if quant else "lora"
        print(
            f"{name} grpo: {common['max_steps']} steps on {next(iter(named.values())).device}: "
            f"{wall / common['max_steps']:.2f} s/step, trainable params {trainable}, base unchanged={base_same}, "
            f"adapter moved={adapter_moved}, 4-bit={getattr(model, 'is_loaded_in_4bit', False)}"
        )
        assert base_same and adapter_moved and (not quant or model.is_loaded_in_4bit)


if __name__ == "__main__":
    main()
