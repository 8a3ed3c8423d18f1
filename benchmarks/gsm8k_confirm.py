"""GSM8K, confirmatory (issue 36, item 3): the proof's recipe with a fixed number of updates, several seeds under two
CPU-kernel settings, scored on a fresh held-out set with McNemar's paired test.

Phases (each writes ``OUT/<kernels>/...`` and a JSON result with its provenance, see ``benchmarks/study.py``):

    python benchmarks/gsm8k_confirm.py sft  --kernels default --out runs/gsm8k-confirm
    python benchmarks/gsm8k_confirm.py grpo --kernels default --seed 0 --out runs/gsm8k-confirm
    python benchmarks/gsm8k_confirm.py all  --seeds 0 1 2 3 --kernels default avx2 --out runs/gsm8k-confirm
    python benchmarks/gsm8k_confirm.py table --out runs/gsm8k-confirm

``all`` runs each kernel setting's SFT start, then every (seed, kernel) GRPO run, the kernel settings side by side
(one process per setting, ``--threads`` each: the budget is in updates, so the load cannot change a result). The
kernel setting is ``ATEN_CPU_CAPABILITY`` (``default``: unset), set before torch loads.

**The held-out set** is fixed by rule, not by looking: problems of the synthetic generator seeded ``--held-out-seed``
in reset-seed order, keeping the first ``--held-out`` whose text is new (no earlier kept problem, and no problem
training can draw: reset seeds ``0 .. TRAIN_POOL - 1`` of the generator seeded 0, which hold the SFT episodes and
every GRPO task). About 3.5% of a generator's problems repeat a training problem's text (a template and small
numbers), so the raw reset seeds would overlap training; :func:`check_overlap` refuses any set that does, naming the
problems, before any training.

**The recipe** (``benchmarks/train_gsm8k_proof.py``'s, with updates instead of minutes): tiny Qwen2 (4 layers,
hidden 128), SFT for ``--sft-steps`` steps on ``--sft-episodes`` expert episodes in chunks of 50 (a fresh
optimizer each, as the proof did), then GRPO ``--updates`` steps of 16 tasks x 8 samples, ``dapo`` loss, beta 0,
lr ``--lr`` on a cosine to 0 over the updates, temperature 1, rows without advantage skipped (exact for dapo).

**The controls** continue each kernel setting's SFT start with the same SFT recipe instead of GRPO: as many SFT
steps as GRPO updates (equal updates), and eight times as many (equal trained sequences: a GRPO update trains on 128
episodes, an SFT step on 16), scored on the same problems and compared pairwise with the start and each GRPO run.
``control --control-lr LR`` trains the control as GRPO's rate trains instead: one run of ``--control-steps`` steps at
``LR`` on a cosine to 0, no warm-up (GRPO's schedule), so that what a lower, decaying rate gives the start is not
counted as GRPO's (``control-<steps>-lr<LR>.json``; the main job's development runs found it gains more than GRPO
there, ``benchmarks/reports/main_job.md``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import study  # benchmarks/: provenance, the confirmatory guard
from train_gsm8k_proof import ENV_ID, ENV_KWARGS, MAX_NEW_TOKENS, MAX_TURNS, solved

TRAIN_POOL = 100_000  # reset seeds 0..TRAIN_POOL-1 of the generator seeded 0: the SFT episodes and every GRPO task
SHOWN = 5  # overlapping problems named in an error


def held_out_name(seed: int) -> str:
    return f"gsm8k-synthetic-seed{seed}-new"


def problems(generator_seed: int | None, seeds: range) -> dict[int, str]:
    """Each reset seed's problem text under the generator ``generator_seed`` (``None``: training's)."""
    import gymnasium as gym

    import agentgym_r1  # noqa: F401

    extra = {} if generator_seed is None else {"seed": generator_seed}
    env = gym.make(ENV_ID, **ENV_KWARGS, **extra)
    out = {}
    for s in seeds:
        env.reset(seed=s)
        out[s] = env.unwrapped.task.prompt
    env.close()
    return out


def held_out_set(generator_seed: int, n: int, train: set[str]) -> list[int]:
    """The rule above: the first ``n`` reset seeds whose problem is new."""
    kept, seen, s = [], set(), 0
    while len(kept) < n:
        chunk = problems(generator_seed, range(s, s + 2 * n))
        for seed, text in chunk.items():
            if text not in train and text not in seen and len(kept) < n:
                kept.append(seed)
                seen.add(text)
        s += 2 * n
    return kept


def check_overlap(generator_seed: int, seeds: list[int], train: set[str]) -> None:
    """Refuse a held-out set that shares a problem text with training (or repeats one), naming the problems."""
    from agentgym_r1.error import HeldOutOverlapError

    texts = problems(generator_seed, range(max(seeds) + 1))
    shared = [s for s in seeds if texts[s] in train]
    if shared:
        named = "; ".join(f"reset seed {s}: {texts[s][:60]!r}" for s in shared[:SHOWN])
        raise HeldOutOverlapError(
            f"held-out set {held_out_name(generator_seed)}: {len(shared)} of {len(seeds)} problems are also training "
            f"problems (generator seed 0, reset seeds 0..{TRAIN_POOL - 1}), e.g. {named}; build the set with "
            f"held_out_set(), which skips them"
        )
    if len({texts[s] for s in seeds}) != len(seeds):
        raise HeldOutOverlapError(f"held-out set {held_out_name(generator_seed)} repeats a problem text")


def score(model, tokenizer, generator_seed: int, seeds: list[int]) -> list[bool]:
    """Greedy success on each held-out problem, in the order of ``seeds`` (the proof's :func:`solved`)."""
    return solved(model.eval(), tokenizer, generator_seed, seeds)


def expert_data(episodes: int, tokenizer=None):
    """The expert episodes as rows, with the tokenizer trained on 300 of them when none is given."""
    import gymnasium as gym

    from agentgym_r1.adapters.scratch import play_expert, render_chat, train_tokenizer
    from agentgym_r1.envs.gsm8k.expert import expert_actions
    from agentgym_r1.trainers.sft import expert_rows

    if tokenizer is None:
        env = gym.make(ENV_ID, **ENV_KWARGS)
        texts = []
        for seed in range(300):
            play_expert(env, seed, expert_actions)
            texts.append(render_chat(env.unwrapped.transcript.messages()))
        tokenizer = train_tokenizer(texts, vocab_size=1000, split_digits=True, cross_spaces=True)
    return tokenizer, expert_rows(ENV_ID, ENV_KWARGS, range(episodes), tokenizer, expert_actions).samples


def sft_chunks(model, tokenizer, rows, first: int, last: int, label: str) -> None:
    """SFT steps ``first .. last`` in chunks of 50, a fresh optimizer each (the proof's recipe)."""
    from agentgym_r1.trainers.sft import sft

    start, steps = time.time(), first
    while steps < last:
        chunk = min(50, last - steps)
        sft(model, tokenizer, rows, steps=chunk, batch_size=16, lr=3e-3, seed=steps)
        steps += chunk
        print(f"[{label}] sft step {steps}  {time.time() - start:.0f}s", flush=True)


def run_sft(a: argparse.Namespace, where: Path, record: dict) -> None:
    from agentgym_r1.adapters.scratch import make_model

    tokenizer, rows = expert_data(a.sft_episodes)
    model = make_model(tokenizer, hidden=128, layers=4, mlp_ratio=4).train()
    start = time.time()
    sft_chunks(model, tokenizer, rows, 0, a.sft_steps, a.kernels)
    model.save_pretrained(where / "sft")
    tokenizer.save_pretrained(where / "sft")
    write(where / "sft.json", {"steps": a.sft_steps, "seconds": time.time() - start, **record})


def run_control(a: argparse.Namespace, where: Path, record: dict, seeds: list[int]) -> None:
    """The control: the SFT start trained on for ``--control-steps`` more SFT steps, scored on the same problems."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(where / "sft")
    model = AutoModelForCausalLM.from_pretrained(where / "sft").train()
    _, rows = expert_data(a.sft_episodes, tokenizer)
    start = time.time()
    if a.control_lr is None:  # the SFT recipe continued: chunks of 50 at 3e-3
        sft_chunks(model, tokenizer, rows, a.sft_steps, a.sft_steps + a.control_steps, f"{a.kernels} control")
        name = f"control-{a.control_steps}.json"
    else:  # GRPO's rate and schedule: one optimizer, a cosine to 0 over the steps
        from agentgym_r1.trainers.sft import sft

        sft(
            model,
            tokenizer,
            rows,
            steps=a.control_steps,
            batch_size=16,
            lr=a.control_lr,
            schedule="cosine",
            warmup_steps=0,
            seed=a.sft_steps,
        )
        name = f"control-{a.control_steps}-lr{a.control_lr:g}.json"
    seconds = time.time() - start
    after = score(model, tokenizer, a.held_out_seed, seeds)
    write(
        where / name,
        {"steps": a.control_steps, "lr": a.control_lr, "seconds": seconds} | {"after": after, **record},
    )


def run_grpo(a: argparse.Namespace, where: Path, record: dict, seeds: list[int]) -> None:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from agentgym_r1.trainers.configs import AgentGRPOConfig
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    tokenizer = PreTrainedTokenizerFast.from_pretrained(where / "sft")
    start_file = where / "start.json"
    if not start_file.exists():  # the SFT start's score, once per kernel setting (every seed starts from it)
        before = score(AutoModelForCausalLM.from_pretrained(where / "sft"), tokenizer, a.held_out_seed, seeds)
        write(start_file, {"success": before, **record})
    before = json.loads(start_file.read_text())["success"]
    model = AutoModelForCausalLM.from_pretrained(where / "sft")
    args = AgentGRPOConfig(
        output_dir=str(where / f"grpo{a.tag}-seed{a.seed}"),
        env_id=ENV_ID,
        env_kwargs=ENV_KWARGS,
        max_turns=MAX_TURNS,
        max_new_tokens=MAX_NEW_TOKENS,
        num_generations=8,
        per_device_train_batch_size=128,
        max_completion_length=160,
        learning_rate=a.lr,
        lr_scheduler_type="cosine",
        beta=0.0,
        temperature=1.0,
        max_steps=a.updates,
        logging_steps=10,
        report_to="none",
        gradient_checkpointing=False,
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        num_tasks=TRAIN_POOL,
        seed=a.seed,
        data_seed=a.seed,
        **({"use_peft": True, "lora_r": 16, "lora_alpha": 32, "lora_target_modules": ["all-linear"]} if a.lora else {}),
    )
    start = time.time()
    trainer = AgentGRPOTrainer(model, args, tokenizer)
    trainer.train()
    seconds = time.time() - start
    after = score(trainer.model, tokenizer, a.held_out_seed, seeds)  # with LoRA, the adapted model
    logs = [h for h in trainer.state.log_history if "loss" in h]
    write(
        where / f"grpo{a.tag}-seed{a.seed}.json",
        {
            "seed": a.seed,
            "lora": a.lora,
            "lr": a.lr,
            "updates": trainer.state.global_step,
            "seconds": seconds,
            "before": before,
            "after": after,
        }
        | {"log": logs, **record},
    )
    print(f"[grpo {a.kernels} seed {a.seed}] {sum(before)} -> {sum(after)} of {len(seeds)}  {seconds:.0f}s")


def write(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(row, indent=1))


def summary(before: list[bool], after: list[bool]) -> dict[str, Any]:
    from agentgym_r1.leaderboard.board import mcnemar, wilson

    n = len(before)
    gained = sum(b and not a for a, b in zip(before, after, strict=True))
    lost = sum(a and not b for a, b in zip(before, after, strict=True))
    lo, hi = wilson(sum(before), n), wilson(sum(after), n)
    return {
        "n": n,
        "before": dataclasses.asdict(lo),
        "after": dataclasses.asdict(hi),
        "gained": gained,
        "lost": lost,
        "p": mcnemar(gained, lost),
        "separated": hi.low > lo.high,
    }


def table(out: Path) -> str:
    """The runs' table in Markdown, and the rule's verdict."""
    lines = [
        "| kernels | seed | updates | SFT start | after GRPO | gain | gained / lost | McNemar p | apart |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for path in sorted(out.glob("*/grpo-seed*.json")):
        r = json.loads(path.read_text())
        s = summary(r["before"], r["after"])
        rows.append(s)
        b, f = s["before"], s["after"]
        lines.append(
            f"| {path.parent.name} | {r['seed']} | {r['updates']} | {100 * b['value']:.1f}% "
            f"[{100 * b['low']:.1f}, {100 * b['high']:.1f}] | {100 * f['value']:.1f}% [{100 * f['low']:.1f}, "
            f"{100 * f['high']:.1f}] | {100 * (f['value'] - b['value']):+.1f} | {s['gained']} / {s['lost']} | "
            f"{s['p']:.2g} | {'yes' if s['separated'] else 'no'} |"
        )
    lines += ["", "| kernels | control | score | against the start | GRPO seeds against it (gained / lost, p) |"]
    lines.append("|---|---|---|---|---|")
    for path in sorted(out.glob("*/control-*.json")):
        c = json.loads(path.read_text())
        if not (path.parent / "start.json").exists():
            continue  # the start is scored by the first GRPO run
        start = json.loads((path.parent / "start.json").read_text())["success"]
        s = summary(start, c["after"])
        f = s["after"]
        runs = []
        for grpo in sorted(path.parent.glob("grpo-seed*.json")):
            g = json.loads(grpo.read_text())
            t = summary(c["after"], g["after"])
            runs.append(f"seed {g['seed']}: {t['gained']} / {t['lost']}, {t['p']:.2g}")
        at = "" if c.get("lr") is None else f" at lr {c['lr']:g}, cosine"
        lines.append(
            f"| {path.parent.name} | SFT +{c['steps']} steps{at} | {100 * f['value']:.1f}% [{100 * f['low']:.1f}, "
            f"{100 * f['high']:.1f}] | {s['gained']} / {s['lost']}, p {s['p']:.2g} | {'; '.join(runs)} |"
        )
    if rows:
        sig = sum(s["p"] < 0.01 and s["gained"] > s["lost"] for s in rows)
        apart = sum(s["separated"] for s in rows)
        gains = [100 * (s["after"]["value"] - s["before"]["value"]) for s in rows]
        lines.append("")
        lines.append(
            f"{len(rows)} runs: gain {min(gains):+.1f} to {max(gains):+.1f} points; McNemar p < 0.01 with a gain in "
            f"{sig} of {len(rows)}; 95% intervals apart in {apart} of {len(rows)}. Rule (every run p < 0.01 with a "
            f"gain): {'met' if sig == len(rows) else 'not met'}."
        )
    return "\n".join(lines)


def spawn(a: argparse.Namespace, phase: str, kernels: str, seed: int | None = None, tag: str = "") -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    env.pop("ATEN_CPU_CAPABILITY", None)
    if kernels != "default":
        env["ATEN_CPU_CAPABILITY"] = kernels
    cmd = [sys.executable, __file__, phase, "--kernels", kernels, *forwarded(a)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if phase == "control":
        cmd += ["--control-steps", tag]
    with open(a.out / f"{kernels}-{phase}{'' if seed is None else seed}{tag}.log", "w") as log:
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)  # the child keeps its own fd


def forwarded(a: argparse.Namespace) -> list[str]:
    keys = ("out", "threads", "updates", "lr", "sft_steps", "sft_episodes", "held_out", "held_out_seed", "protocol")
    args = []
    for key in keys:
        value = getattr(a, key)
        if value is not None:
            args += [f"--{key.replace('_', '-')}", str(value)]
    return args


def run_all(a: argparse.Namespace) -> None:
    """Each kernel setting's SFT, then the seeds' GRPO runs, kernel settings side by side."""
    a.out.mkdir(parents=True, exist_ok=True)

    def wait(procs: list[subprocess.Popen]) -> None:
        for p in procs:
            if p.wait():
                raise SystemExit(f"a phase failed (exit {p.returncode}): see the logs in {a.out}")

    if not all((a.out / k / "sft.json").exists() for k in a.kernels_all):
        wait([spawn(a, "sft", k) for k in a.kernels_all if not (a.out / k / "sft.json").exists()])
    for seed in a.seeds:
        todo = [k for k in a.kernels_all if not (a.out / k / f"grpo-seed{seed}.json").exists()]
        wait([spawn(a, "grpo", k, seed) for k in todo])
        print(table(a.out), flush=True)
    for steps in a.controls:
        todo = [k for k in a.kernels_all if not (a.out / k / f"control-{steps}.json").exists()]
        wait([spawn(a, "control", k, tag=str(steps)) for k in todo])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("phase", choices=["sft", "grpo", "control", "all", "table"])
    p.add_argument("--out", type=Path, default=Path("runs/gsm8k-confirm"))
    p.add_argument("--kernels", default="default", help="sft/grpo: the setting this process runs under")
    p.add_argument("--kernels-all", nargs="+", default=["default", "avx2"], help="all: the settings to run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--updates", type=int, default=200)
    p.add_argument("--control-steps", type=int, default=200, help="control: more SFT steps from the start")
    p.add_argument("--controls", type=int, nargs="*", default=[200, 1600], help="all: the controls' SFT steps")
    p.add_argument("--control-lr", type=float, help="control: at this lr on a cosine to 0 (GRPO's schedule)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--sft-steps", type=int, default=850)
    p.add_argument("--sft-episodes", type=int, default=20_000)
    p.add_argument("--held-out", type=int, default=1024)
    p.add_argument("--held-out-seed", type=int, default=7)
    p.add_argument("--lora", action="store_true", help="grpo: train a LoRA adapter (r 16, alpha 32, all linear)")
    p.add_argument("--tag", default="", help="grpo: a suffix of the run's files (exploratory variants)")
    p.add_argument("--protocol", type=Path, help="a confirmatory run: the committed protocol page")
    a = p.parse_args(argv)
    if a.phase == "table":
        print(table(a.out))
        return 0
    for seed in a.seeds if a.phase == "all" else [a.seed]:  # refused before any work (benchmarks/study.py)
        record = study.start(__file__, a.out, a.protocol, seed, [held_out_name(a.held_out_seed)])
    if a.phase == "all":
        run_all(a)
        print(table(a.out))
        return 0
    train = set(problems(None, range(TRAIN_POOL)).values())
    seeds = held_out_set(a.held_out_seed, a.held_out, train)
    check_overlap(a.held_out_seed, seeds, train)  # the guard, before any training
    import torch

    torch.set_num_threads(a.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    record = {
        **record,
        "kernels": a.kernels,
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": a.threads,
    }
    where = a.out / a.kernels
    if a.phase == "sft":
        run_sft(a, where, record)
    else:
        (run_grpo if a.phase == "grpo" else run_control)(a, where, record, seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
