"""Sharded training through accelerate on one GPU against the same steps unsharded (issue 37): FSDP2
(:func:`fsdp2_check`) and DeepSpeed ZeRO-2 and ZeRO-3 (:func:`deepspeed_check`). ``benchmarks/cuda_check.py`` runs
them (``--only fsdp2``, ``--only deepspeed``).

Every configuration runs in a child process of its own (``python benchmarks/sharded_check.py MODE NAMES SIZE
OUT``, ``SIZE`` the model's width and GRPO's rows, e.g. ``512x64``), all started at once on the one GPU, each with
a one-process group on 127.0.0.1 (``RANK``/``WORLD_SIZE``/``MASTER_PORT``, as ``torchrun`` sets them) and
accelerate's plugin switched on through the environment that
``accelerate launch --config_file configs/accelerate_*.yaml`` gives its processes (``accelerate/utils/launch.py``;
``DeepSpeedPlugin.__post_init__`` reads ``ACCELERATE_DEEPSPEED_*``, ``TrainingArguments.__post_init__`` makes the
plugin when ``ACCELERATE_USE_DEEPSPEED`` is set and ``Trainer`` fills its ``auto`` values from the run's arguments,
``propagate_args_to_deepspeed``), except ``mixed_precision``: the steps run in fp32 so that sharded and unsharded
updates can be compared to float rounding.

A child takes one GRPO and/or one PPO step (SGD, seed 0; torch's generator reseeded to the seed when the step
begins, so every configuration samples the same rollout, whatever its set-up drew) and saves the parameter
updates, gathered to full tensors (FSDP2: ``full_tensor()``; ZeRO-3: ``deepspeed.zero.GatheredParameters``), a
digest of each rollout's token ids, and what ran: accelerate's distributed type, the parameters' kinds and, under
DeepSpeed, the ZeRO stage the engine ran, its optimizer class and how many parameters it partitioned. Under
DeepSpeed the child then saves the model with ``Trainer.save_model`` (ZeRO-3: the 16-bit gather, which PPO needs)
and compares the saved weights (PPO: the policy's directory and ``critic.pt``) with the gathered ones.

The DeepSpeed model is wider (``hidden`` 512) than the FSDP2 one (128): ZeRO-3 keeps parameters under
``stage3_param_persistence_threshold`` (100,000 elements by default) whole on every process, and at 128 that is
every parameter of the scratch model, so nothing would be partitioned. Its GRPO step plays 64 episodes (16 groups
of 4) instead of 16: an untrained model's group often has one reward, hence no advantage, and a step in which no
group has two would move nothing and show nothing (on this machine's CPU, at 512 wide, 3 of 4 groups had one).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

DEEPSPEED_ENV = {  # configs/accelerate_zero{2,3}.yaml as `accelerate launch` passes them (fp32 here, see above)
    "ACCELERATE_USE_DEEPSPEED": "true",
    "ACCELERATE_GRADIENT_CLIPPING": "1.0",
    "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "none",
    "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE": "none",
    "ACCELERATE_DEEPSPEED_ZERO3_INIT": "false",
}
MODES = {
    "plain": {},
    "fsdp2": {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT"},
    "zero2": DEEPSPEED_ENV | {"ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"},
    "zero3": DEEPSPEED_ENV
    | {"ACCELERATE_DEEPSPEED_ZERO_STAGE": "3", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true"},
}
WORLD_OF_ONE = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
MARK = "sharded check"  # the lines a child prints for the parent to show


# -- the child: one configuration's steps ----------------------------------------------------------------------------
def child(mode: str, names: list[str], size: str, out: str) -> None:
    """The steps of ``names`` (``grpo``, ``ppo``) under ``mode`` (its environment set by the parent); writes the
    updates and what ran to ``out`` after each step, and under DeepSpeed checks ``Trainer.save_model`` last."""
    results: dict[str, Any] = {"updates": {}, "report": {}}
    trainers = {}
    for name in names:
        hidden, rows = (int(x) for x in size.split("x"))
        trainer, params = make_trainer(name, hidden, rows)
        digests = record_rollouts(trainer)
        before = full_weights(params)
        trainer.train()
        after = full_weights(params)
        results["updates"][name] = [a - b for a, b in zip(after, before, strict=True)]
        results["report"][name] = {"rollouts": digests, **describe(trainer, params)}
        print(f"{MARK} [{mode}] {name}: {json.dumps(results['report'][name])}", flush=True)
        torch.save(results, out)
        trainers[name] = (trainer, params, after)
    if mode.startswith("zero"):
        for name, (trainer, params, after) in trainers.items():
            results["report"][name]["save"] = save_check(trainer, params, after, name)
            print(f"{MARK} [{mode}] {name} save_model: {json.dumps(results['report'][name]['save'])}", flush=True)
            torch.save(results, out)


def make_trainer(name: str, hidden: int, grpo_rows: int) -> tuple[Any, Any]:
    """The GRPO or PPO trainer of one step on the scratch model (seed 0) and the module whose parameters train."""
    from datasets import Dataset
    from datasets.table import InMemoryTable

    from agentgym_r1.adapters.scratch import make_model, train_tokenizer
    from agentgym_r1.testing import gsm8k_corpus
    from agentgym_r1.trainers.configs import AgentGRPOConfig, AgentPPOConfig
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer
    from agentgym_r1.trainers.ppo import AgentPPOTrainer

    tok = train_tokenizer(gsm8k_corpus(60), vocab_size=512)
    rows = [{"prompt": json.dumps({"seed": i})} for i in range(64)]
    # a fingerprint given, so datasets does not hash the table (its hashing fails on the GPU machine's Python 3.12)
    tasks = Dataset(InMemoryTable.from_pylist(rows), fingerprint="sharded-check-tasks")
    common = dict(
        max_steps=1, max_completion_length=128, max_new_tokens=32, max_turns=2, learning_rate=1e-3, logging_steps=1,
        report_to="none", save_strategy="no", bf16=False, seed=0, optim="sgd", output_dir=tempfile.mkdtemp(),
        env_id="AgentR1/GSM8K-v0", env_kwargs={"source": "synthetic"},
    )  # fmt: skip
    model = make_model(tok, hidden=hidden, layers=2, heads=2, seed=0).train()
    if name == "grpo":
        args = AgentGRPOConfig(per_device_train_batch_size=grpo_rows, num_generations=4, beta=0.0, **common)
        trainer = AgentGRPOTrainer(model, args, tok, train_dataset=tasks)
    else:
        args = AgentPPOConfig(rollout_batch_size=16, mini_batch_size=16, ppo_epochs=1, **common)
        trainer = AgentPPOTrainer(model, args, tok, train_dataset=tasks)
    trainer.add_callback(reseed_at_step_begin())
    return trainer, (trainer.model if name == "ppo" else model)


def reseed_at_step_begin() -> Any:
    """A callback that seeds torch's generators with ``args.seed`` when a step begins, before its rollout."""
    from transformers import TrainerCallback, set_seed

    class Reseed(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            set_seed(args.seed)

    return Reseed()


def record_rollouts(trainer: Any) -> list[str]:
    """A digest of every rollout's token ids, appended as the trainer plays them (its ``Rollouts.play``)."""
    digests: list[str] = []
    play = trainer.rollouts.play

    def recorded(backend: Any, resets: Any) -> Any:
        batch = play(backend, resets)
        tokens = repr([(s.prompt_ids, s.completion_ids) for s in batch.samples]).encode()
        digests.append(hashlib.sha256(tokens).hexdigest()[:16])
        return batch

    trainer.rollouts.play = recorded
    return digests


def full_weights(module: Any) -> list[torch.Tensor]:
    """Copies (on the CPU) of ``module``'s parameters, whole: ZeRO-3's partitioned ones gathered, FSDP2's shards
    (``DTensor``) gathered, others as they are."""
    params = list(module.parameters())
    if any(hasattr(p, "ds_id") for p in params):
        import deepspeed

        with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
            return [p.detach().clone().cpu() for p in params]
    return [(p.full_tensor() if hasattr(p, "full_tensor") else p.detach()).clone().cpu() for p in params]


def describe(trainer: Any, params: Any) -> dict[str, Any]:
    """What ran: accelerate's distributed type, the parameters' kinds and, under DeepSpeed, the engine's ZeRO stage,
    its optimizer's class and how many parameters ZeRO-3 partitioned (the rest it keeps whole: small ones)."""
    engine = trainer.model_wrapped
    tensors = list(params.parameters())
    info: dict[str, Any] = {
        "distributed_type": str(trainer.accelerator.distributed_type),
        "parameters": sorted({type(p).__name__ for p in tensors}),
        "engine": type(engine).__name__,
    }
    if hasattr(engine, "zero_optimization_stage"):
        info["zero_stage"] = engine.zero_optimization_stage()
        info["optimizer"] = type(getattr(engine, "optimizer", None)).__name__
        info["partitioned"] = sum(hasattr(p, "ds_id") and not getattr(p, "ds_persist", False) for p in tensors)
        info["parameter_tensors"] = len(tensors)
    return info


def save_check(trainer: Any, params: Any, after: list[torch.Tensor], name: str) -> dict[str, Any]:
    """``Trainer.save_model`` under DeepSpeed, then the saved weights against the trained ones: GRPO's model
    directory; PPO's policy directory (keys under ``policy.``) and ``critic.pt`` (``critic.``, ``value_head.``)."""
    from safetensors.torch import load_file

    out = tempfile.mkdtemp()
    trainer.save_model(out)
    prefix = "policy." if name == "ppo" else ""
    saved = {}
    for file in sorted(f for f in os.listdir(out) if f.endswith(".safetensors")):
        saved |= {prefix + k: v for k, v in load_file(os.path.join(out, file)).items()}
    if name == "ppo":
        critic = torch.load(os.path.join(out, "critic.pt"), weights_only=True)
        saved |= {f"{part}.{k}": v for part in ("critic", "value_head") for k, v in critic[part].items()}
    trained = dict(zip([n for n, _ in params.named_parameters()], after, strict=True))
    compared = [n for n in trained if n in saved]
    diff = max(((saved[n].float() - trained[n].float()).abs().max().item() for n in compared), default=float("nan"))
    missing = [n for n in trained if n not in saved]  # a tied weight is saved once, under one of its names
    return {"files": sorted(os.listdir(out)), "compared": len(compared), "missing": missing, "largest_difference": diff}


# -- the parent: start the children, compare ------------------------------------------------------------------------
def run_children(jobs: dict[str, tuple[str, str, int]], logs: str, timeout: float = 420) -> dict[str, Any]:
    """Start every job (label -> mode, names, size) at once, each with its own port; wait for all. Returns each
    label's results (``None`` where the child failed); prints the child's own lines, and the end of its log (kept
    in ``logs``) when it failed. A child still running after ``timeout`` seconds (a collective that never returns)
    is killed, so that the others' results and its log still come back within a GPU session's command limit."""
    os.makedirs(logs, exist_ok=True)
    sockets = [socket.socket() for _ in jobs]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    procs = {}
    for (label, (mode, names, size)), port in zip(jobs.items(), ports, strict=True):
        env = {**os.environ, **WORLD_OF_ONE, "MASTER_PORT": str(port), **MODES[mode]}
        log = open(os.path.join(logs, f"{label}.log"), "w")  # noqa: SIM115 (closed below, after the child ends)
        cmd = [sys.executable, os.path.abspath(__file__), mode, names, size, os.path.join(logs, f"{label}.pt")]
        procs[label] = (subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log)
    start, results = time.monotonic(), {}
    for label, (proc, log) in procs.items():
        try:
            code = proc.wait(timeout=max(1.0, start + timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
            print(f"{MARK} [{label}]: killed after {timeout:.0f} s")
        log.close()
        print(f"{MARK} [{label}]: exit {code} after {time.monotonic() - start:.0f} s (all started at once)")
        results[label] = report_child(label, code, logs)
    return results


def report_child(label: str, code: int, logs: str) -> Any:
    with open(os.path.join(logs, f"{label}.log"), encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    for line in lines:
        if line.startswith(MARK):
            print(line)
    if code != 0:
        print(f"{MARK} [{label}]: FAILED (exit {code}); the end of {logs}/{label}.log:")
        print("\n".join("    " + line for line in lines[-60:]))
    path = os.path.join(logs, f"{label}.pt")
    return torch.load(path, weights_only=False) if os.path.exists(path) else None


def compare(label: str, sharded: Any, plain: Any, names: list[str]) -> list[str]:
    """Print each step's largest update and largest difference sharded vs unsharded; returns what failed."""
    failed = []
    for name in names:
        if not sharded or name not in sharded["updates"] or not plain or name not in plain["updates"]:
            failed.append(f"{label} {name}: no result (see the child's log above)")
            continue
        moved = max(u.abs().max().item() for u in plain["updates"][name])
        diff = max(
            (a - b).abs().max().item() for a, b in zip(sharded["updates"][name], plain["updates"][name], strict=True)
        )
        same = sharded["report"][name]["rollouts"] == plain["report"][name]["rollouts"]
        print(
            f"{label} check {name}: largest update {moved:.3e}, largest difference sharded vs unsharded {diff:.3e}, "
            f"rollouts identical to the unsharded step's: {same}"
        )
        if not (moved > 0 and diff <= 1e-5 + 1e-3 * moved):
            why = " (no update at all: no group had two rewards)" if moved == 0 else ""
            failed.append(f"{label} {name}: update {moved:.3e}{why}, difference {diff:.3e}, same rollouts {same}")
    return failed


def fsdp2_check(logs: str) -> None:
    """FSDP2 through accelerate on one GPU: one GRPO and one PPO step sharded and unsharded (the scratch model at
    ``hidden`` 128); fails when an update differs by more than 1e-5 + 1e-3 x the largest update."""
    results = run_children(
        {"fsdp2": ("fsdp2", "grpo,ppo", "128x16"), "plain128": ("plain", "grpo,ppo", "128x16")}, logs
    )
    for name in ("grpo", "ppo"):
        kinds = (results["fsdp2"] or {}).get("report", {}).get(name, {}).get("parameters")
        assert kinds == ["DTensor"], f"fsdp2 {name}: parameters {kinds}, not DTensors"
    failed = compare("fsdp2", results["fsdp2"], results["plain128"], ["grpo", "ppo"])
    assert not failed, failed


def deepspeed_check(logs: str) -> None:
    """DeepSpeed ZeRO-2 and ZeRO-3 through accelerate on one GPU: one GRPO and one PPO step each (a child process
    per step), against the same steps unsharded; then ``save_model``. Skipped, saying why, without CUDA or
    without the deepspeed package (install line: ``benchmarks/cuda_check.py``'s docstring)."""
    import importlib.util

    if not torch.cuda.is_available() or importlib.util.find_spec("deepspeed") is None:
        why = "no CUDA device" if not torch.cuda.is_available() else "the deepspeed package is not installed"
        print(f"deepspeed check: SKIPPED: {why} (accelerate enables DeepSpeed only on GPUs)")
        return
    from importlib.metadata import version

    print(f"deepspeed check: deepspeed {version('deepspeed')}, accelerate {version('accelerate')}")
    jobs = {"plain512": ("plain", "grpo,ppo", "512x64")}
    jobs |= {f"{zero}-{name}": (zero, name, "512x64") for zero in ("zero2", "zero3") for name in ("grpo", "ppo")}
    results = run_children(jobs, logs)
    failed = []
    for zero in ("zero2", "zero3"):
        for name in ("grpo", "ppo"):
            failed += check_engine(zero, name, results[f"{zero}-{name}"])
            failed += compare(zero, results[f"{zero}-{name}"], results["plain512"], [name])
    assert not failed, failed


def check_engine(zero: str, name: str, result: Any) -> list[str]:
    """The engine ran the stage asked for (ZeRO-3: some parameters partitioned), and its save matched."""
    report = (result or {}).get("report", {}).get(name)
    if report is None:
        return []  # compare() reports the missing result
    stage = int(zero[-1])
    failed = []
    if report.get("zero_stage") != stage or "DEEPSPEED" not in report["distributed_type"]:
        failed.append(f"{zero} {name}: ran {report['distributed_type']} stage {report.get('zero_stage')}")
    if stage == 3 and not report.get("partitioned"):
        failed.append(f"{zero} {name}: no parameter was partitioned")
    save = report.get("save")
    if save is None or save["missing"] or not save["largest_difference"] <= 1e-6:
        failed.append(f"{zero} {name}: save_model {save}")
    return failed


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2].split(","), sys.argv[3], sys.argv[4])
