"""LoRA against full fine-tuning on the same model and batch: trainable parameters, optimizer-state bytes, peak RSS
and seconds per GRPO step (issue 37). Each mode runs in its own process, so each peak RSS is that mode's alone.

    nice -n 19 env PYTHONPATH=. python benchmarks/lora_bench.py --steps 3 --out runs/lora_bench.json

The model is a scratch Qwen2 (:mod:`agentgym_r1.adapters.scratch`, ``--hidden``/``--layers``), the env GSM8K
synthetic, generation with transformers; the first step is reported apart (start-up) and the rest averaged.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def child(mode: str, a: argparse.Namespace) -> dict:
    import torch
    from transformers import TrainerCallback

    from agentgym_r1.adapters.scratch import make_model, train_tokenizer
    from agentgym_r1.testing import gsm8k_corpus
    from agentgym_r1.trainers.configs import AgentGRPOConfig
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer
    from agentgym_r1.trainers.lora import count_parameters

    torch.set_num_threads(a.threads)
    tok = train_tokenizer(gsm8k_corpus(60), vocab_size=512)
    model = make_model(tok, hidden=a.hidden, layers=a.layers, heads=a.hidden // 64).train()
    lora = dict(use_peft=True, lora_r=a.rank, lora_alpha=2 * a.rank, lora_target_modules=["all-linear"])
    args = AgentGRPOConfig(
        output_dir=tempfile.mkdtemp(),
        env_id="AgentR1/GSM8K-v0",
        env_kwargs={"source": "synthetic"},
        per_device_train_batch_size=a.batch,
        num_generations=4,
        max_steps=a.steps,
        max_completion_length=192,
        max_new_tokens=48,
        max_turns=3,
        learning_rate=1e-4,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
        **(lora if mode == "lora" else {}),
    )
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.t0 = time.perf_counter()

        def on_step_end(self, *_, **__):
            times.append(time.perf_counter() - self.t0)

    trainer = AgentGRPOTrainer(model, args, tok, callbacks=[Clock()])
    trainer.train()
    state = sum(
        t.numel() * t.element_size() for s in trainer.optimizer.state.values() for t in s.values() if torch.is_tensor(t)
    )
    trainable, total = count_parameters(trainer.model)
    return {
        "mode": mode,
        "trainable_params": trainable,
        "total_params": total,
        "optimizer_state_bytes": state,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "first_step_s": times[0],
        "s_per_step": sum(times[1:]) / max(len(times) - 1, 1),
        "steps": len(times),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a)))
        return
    rows = []
    for mode in ("full", "lora"):
        cmd = [sys.executable, __file__, "--child", mode, *sys.argv[1:]]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print("| mode | trainable params | optimizer state | peak RSS | first step | s/step after |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['trainable_params']:,} of {r['total_params']:,} | "
            f"{r['optimizer_state_bytes'] / 2**20:.2f} MiB | {r['peak_rss_mb']:.0f} MB | {r['first_step_s']:.2f} s | "
            f"{r['s_per_step']:.2f} s |"
        )
    if a.out:
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"args": vars(a), "load_average": load, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
