"""Wall time of one multi-turn GRPO step with 1 and 2 processes (CPU, gloo), same global batch, same tiny model.

Builds a tiny Qwen2-style model (hidden 128, 2 heads: head_dim 64, the shape vLLM's CPU attention takes) and its
tokenizer once, then launches ``torchrun --nproc_per_node N`` of this same file for N in ``--processes`` (not
``accelerate launch --cpu --num_processes N``, which starts one process whatever N is: accelerate 1.15 sends
``--cpu`` to its ``simple_launcher``).
Each run trains ``--steps`` GRPO steps on ``AgentR1/GSM8K-v0`` (synthetic) with a global batch of ``--batch`` rows
(``--generations`` samples per prompt), each process taking ``batch / N`` of them, and prints the mean wall time
of a step after the first (which pays for start-up), split into rollout (generation and env) and the rest.

    PYTHONPATH=. python benchmarks/grpo_step_bench.py --processes 1 2 --steps 4 --batch 16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(path: Path) -> None:
    from agentgym_r1.adapters.scratch import make_model, train_tokenizer
    from agentgym_r1.testing import gsm8k_corpus

    tok = train_tokenizer(gsm8k_corpus(60), path, vocab_size=512)
    make_model(tok, path, hidden=128, layers=2, heads=2, seed=0)


def worker(model_dir: str, out: str, steps: int, batch: int, generations: int) -> None:
    from accelerate import PartialState
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, TrainerCallback

    from agentgym_r1.trainers.configs import AgentGRPOConfig
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    state = PartialState(cpu=True)  # what the trainer's use_cpu=True makes: gloo across the torchrun processes
    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    args = AgentGRPOConfig(
        output_dir=tempfile.mkdtemp(),
        env_id="AgentR1/GSM8K-v0",
        env_kwargs={"source": "synthetic"},
        per_device_train_batch_size=batch // state.num_processes,
        num_generations=generations,
        max_steps=steps,
        max_completion_length=256,
        max_new_tokens=48,
        max_turns=3,
        learning_rate=1e-4,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
        temperature=1.0,
    )
    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *a, **k):
            stamps.append(time.perf_counter())

    trainer = AgentGRPOTrainer(model, args, tok, callbacks=[Clock()])
    rollout = trainer.rollouts.play
    spent: list[float] = []

    def timed_play(*a, **k):
        t0 = time.perf_counter()
        try:
            return rollout(*a, **k)
        finally:
            spent.append(time.perf_counter() - t0)

    trainer.rollouts.play = timed_play
    start = time.perf_counter()
    trainer.train()
    if state.is_main_process:
        steps_s = [b - a for a, b in zip([start, *stamps[:-1]], stamps, strict=True)][1:]
        Path(out).write_text(
            json.dumps({"step_s": steps_s, "rollout_s": spent[1:], "processes": trainer.accelerator.num_processes})
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.worker:
        worker(a.worker[0], a.worker[1], a.steps, a.batch, a.generations)
        return
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp) / "model")
        print(
            f"GRPO step, GSM8K synthetic, global batch {a.batch} ({a.generations} per prompt), tiny model "
            f"hidden 128 / head_dim 64, {a.steps} steps (the first not counted), OMP_NUM_THREADS=1 per process"
        )
        for n in a.processes:
            out = Path(tmp) / f"out{n}.json"
            cmd = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc_per_node",
                str(n),
                __file__,
                "--steps",
                str(a.steps),
                "--batch",
                str(a.batch),
                "--generations",
                str(a.generations),
                "--worker",
                str(Path(tmp) / "model"),
                str(out),
            ]
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TRL_EXPERIMENTAL_SILENCE": "1"}
            done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{n} processes failed:\n{done.stderr[-3000:]}")
            r = json.loads(out.read_text())
            if r["processes"] != n:
                raise SystemExit(f"launched {n} processes but the trainer ran on {r['processes']}")
            step, roll = sum(r["step_s"]) / len(r["step_s"]), sum(r["rollout_s"]) / max(len(r["rollout_s"]), 1)
            print(
                f"{n} process{'es' if n > 1 else ''}: {step:.2f} s/step (rollout {roll:.2f} s, "
                f"rest {step - roll:.2f} s) over {len(r['step_s'])} steps"
            )


if __name__ == "__main__":
    main()
