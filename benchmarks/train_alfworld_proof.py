"""Learning on ALFWorld (issue 36, item 5): SFT on expert episodes of generated games, then GRPO, scored on unseen
generated games and on the 24 real games.

Phases (each prints what it measured; everything lands in ``--out``):

    python benchmarks/train_alfworld_proof.py sft  --out runs/alfworld --threads 1          # tokenizer, tiny Qwen2, SFT
    python benchmarks/train_alfworld_proof.py grpo --out runs/alfworld --steps 40 --seed 0 --threads 1
    python benchmarks/train_alfworld_proof.py eval --out runs/alfworld --seed 0             # SFT vs GRPO, paired
    python benchmarks/alfworld_confirm.py runs/alfworld                                      # pooled over seeds

``sft --start runs/alfworld/sft --sft-resume 300 --sft-max-steps 340`` continues the SFT checkpoint that had 300 steps
up to step 340 (the continued-SFT control), into ``OUT/sft-continued`` (``eval --models sft,grpo,sft-continued``
plays it): SFT runs in chunks of ``--sft-chunk`` steps, each drawing its batches with its first step as seed and
starting a fresh optimizer (:func:`proof_common.chunks`), so the continued steps see the batches, and take the steps,
of a run from 0 to 340. A continuation trains to ``--sft-max-steps`` whatever its monitoring success; one whose
settings differ from those the checkpoint recorded is refused before any work (:func:`proof_common.check_resume`).

**Games** (:mod:`alfworld_splits`): generated games (``source="generated"``, ``easy``: rooms of 4-27 receptacles, each
game solved by fast-downward, whose plan is its walkthrough) numbered by index under a generator seed per role: SFT
games from seed 1, RL games from seed 2, the final held-out games from seed 3 and the monitoring games (checked during
SFT and GRPO, a development set) from seed 4. Training games never ask for a held-out goal class
(:data:`alfworld_splits.HELD_OUT_GOALS`); a held-out game asks for one, and its room inventory and object set are no
training game's. Every phase draws the sets and checks that before any work (an overlap stops it with
``HeldOutOverlapError`` naming it) and writes them to ``split.json``. The 24 real games are ALFWorld's ``valid_unseen``
games in the shared data (4 per task type), played as they are.

**The expert** is the env's own: :meth:`ALFWorldEnv.expert_plan` at reset, the game's walkthrough, played through the
env by the rollout engine (:func:`agentgym_r1.trainers.sft.expert_rows`), so every observation in an SFT episode is the
env's. It knows where the objects are (the intro does not say), so a model cannot match it: imitation teaches where
objects usually are and the commands' shapes; finding an object that is elsewhere is what RL can add.

**What the model sees.** The system prompt is one line (:data:`SYSTEM`): the task is in the first observation, and the
tokenizer (trained on the SFT episodes, merges across spaces) makes a constant line a few tokens. The admissible
commands are not shown: the env keeps them in ``info``, not in the observation; a game offers a dozen or more at
every turn (hundreds of tokens a turn on the real rooms), which a tiny model with a 2,048-token window and a CPU
budget cannot afford; and the expert does not read them. An invalid command gets the env's explanation instead. History:
the full episode (one sequence per episode, the rollout engine's default and what GRPO trains on), capped at
:data:`MAX_TURNS` turns and :data:`MAX_COMPLETION` tokens after the first prompt: the expert needs 4-10 commands, a
turn's feedback is one receptacle's contents, and the history is what tells the agent which places it has searched
(keeping only the last turns would let it loop); only long failing episodes reach the cap, which ends them unsolved.

**What is and is not shown** (by a run of the drafted protocol, ``benchmarks/reports/alfworld_learning_protocol.md``):
success on unseen generated games before and after GRPO, with Wilson intervals, and McNemar's exact test on the same
games, against the start and against the continued-SFT control; the same on the 24 real games; pooled over the GRPO
seeds, the success gain with a bootstrap interval over seeds and games (``benchmarks/alfworld_confirm.py``). Not shown:
transfer to ALFWorld's real training distribution (no real training games here: the real games are larger rooms written
in the older grammar, ``put O in/on R`` where generated games say ``move O to R``, so near-zero real success is the
expected start); learning from one seed (one GRPO seed per run: repeat it over seeds for a claim); anything on
``medium``/``hard`` generated games.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from functools import cache
from pathlib import Path
from typing import Any

import alfworld_splits as splits  # benchmarks/: the games and the disjointness check
import study  # benchmarks/: provenance of every result, the confirmatory guard (--protocol)
from proof_common import (
    Curve,
    Limits,
    add_continuation_flags,
    budget_problem,
    continuation_problem,
    cpu_grpo_config,
    expert_sft_rows,
    flags_problem,
    greedy_episodes,
    load_checkpoint,
    model_paths,
    print_pairs,
    sft_in_chunks,
)

ENV_ID = "AgentR1/ALFWorld-v1"
SYSTEM = "Household task. One command per turn: go to X, open X, take O from X, move O to X, heat/cool/clean O with X."
GENERATOR_SEEDS = {"sft": 1, "rl": 2, "final": 3, "monitor": 4}
SFT_GAMES, RL_GAMES, MONITOR_N, FINAL_N, REAL_N = 1000, 1000, 64, 500, 24
MAX_TURNS, MAX_NEW_TOKENS = 20, 24
MAX_PROMPT, MAX_COMPLETION = 384, 1024
TOKENIZER_GAMES = 300
PROVENANCE: dict[str, Any] = {}  # study.start's record (commit, dirty, kernels, protocol), written with every result


def env_kwargs(role: str) -> dict[str, Any]:
    """The env of one role's generated games (``sft``, ``rl``, ``final``, ``monitor``)."""
    return {"source": "generated", "seed": GENERATOR_SEEDS[role], "difficulty": "easy", "system_prompt": SYSTEM}


def real_kwargs() -> dict[str, Any]:
    """The 24 real ``valid_unseen`` games of the shared data (``$AGENTGYM_SHARED_DATA/alfworld``)."""
    root = Path(os.environ.get("AGENTGYM_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    return {"source": str(root / "alfworld"), "split": "valid_unseen", "system_prompt": SYSTEM}


def limits() -> Limits:
    """The episode bounds, read when called (a test may shorten them)."""
    return Limits(MAX_TURNS, MAX_NEW_TOKENS, MAX_PROMPT, MAX_COMPLETION)


@cache
def _env(role: str) -> Any:
    import gymnasium as gym

    import agentgym_r1  # noqa: F401  (registers the ids)

    return gym.make(ENV_ID, **(real_kwargs() if role == "real" else env_kwargs(role)))


def expert_actions(role: str) -> Any:
    """An ``actions`` callable for :func:`~agentgym_r1.trainers.sft.expert_rows`: the env's expert plan of the task,
    read at reset in an env of its own."""

    def actions(task: Any) -> list[str]:
        env = _env(role)
        env.reset(options={"task_id": task.id})
        return env.unwrapped.expert_plan()

    return actions


def draw_games(sft_games: int, rl_games: int, monitor_n: int, final_n: int) -> dict[str, Any]:
    """Every set of generated games, checked: the held-out sets share no goal class, layout or object set with the
    training games (:func:`alfworld_splits.check_disjoint` raises before any work otherwise)."""
    start = time.time()
    sft, sft_skipped = splits.training_games(GENERATOR_SEEDS["sft"], sft_games)
    rl, rl_skipped = splits.training_games(GENERATOR_SEEDS["rl"], rl_games)
    training = sft + rl
    monitor, monitor_counts = splits.held_out_games(GENERATOR_SEEDS["monitor"], monitor_n, training)
    final, final_counts = splits.held_out_games(GENERATOR_SEEDS["final"], final_n, training)
    check_held_out(training, {"monitor": monitor, "final": final})
    counts = {
        "sft": {"games": len(sft), "skipped_held_out_goal": sft_skipped},
        "rl": {"games": len(rl), "skipped_held_out_goal": rl_skipped},
        "monitor": monitor_counts,
        "final": final_counts,
        "training_layouts": len({g.layout for g in training}),
    }
    print(f"games drawn and checked in {time.time() - start:.0f}s: {counts}", flush=True)
    return {"sft": sft, "rl": rl, "monitor": monitor, "final": final, "counts": counts}


def check_held_out(training: list[splits.GameKey], held_out: dict[str, list[splits.GameKey]]) -> None:
    """Each held-out set against the training games (raises ``HeldOutOverlapError`` naming the overlaps)."""
    for name, games in held_out.items():
        splits.check_disjoint(training, games, name)


def record_games(out: Path, games: dict[str, Any]) -> None:
    """Write the games to ``split.json``; when an earlier phase wrote it, refuse (before any work) a draw whose
    training games differ from the ones it recorded: a held-out set checked against fewer games than were trained
    on could hold a trained game."""
    from agentgym_r1.error import StudyError

    path = out / "split.json"
    if path.exists():
        recorded = json.loads(path.read_text())
        for role in ("sft", "rl"):
            was = [(g["seed"], g["index"]) for g in recorded[role]]
            now = [(g.seed, g.index) for g in games[role]]
            if was != now:
                raise StudyError(
                    f"{path} records {len(was)} {role} games and this run drew {len(now)} "
                    f"(--{role}-games {len(now)}): pass the sizes of the phase that wrote it, or use a new --out"
                )
    record = {k: [g.to_json() for g in v] for k, v in games.items() if k != "counts"}
    path.write_text(json.dumps({"counts": games["counts"], **record, "provenance": PROVENANCE}))


def generated_prompts(role: str, games: list[splits.GameKey]) -> list[Any]:
    """Engine prompts of generated games of ``role``, each by its index."""
    from agentgym_r1.adapters import Prompt

    return [Prompt(ENV_ID, env_kwargs(role), None, {"index": g.index}) for g in games]


def real_prompts(n: int) -> list[Any]:
    """Engine prompts of the first ``n`` real games."""
    from agentgym_r1.adapters import Prompt

    return [Prompt(ENV_ID, real_kwargs(), None, {"index": i}) for i in range(n)]


def play(model: Any, tokenizer: Any, batch: list[Any]) -> list[dict[str, Any]]:
    """Greedy episodes: each game's outcome (its task id, success, turns, why it ended)."""
    episodes = greedy_episodes(
        model,
        tokenizer,
        batch,
        limits(),
    )
    return [
        {"game": e.task_id, "success": bool(e.success), "turns": len(e.turns), "end": e.end_reason} for e in episodes
    ]


def summary(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """Success rate with its 95% Wilson interval."""
    from agentgym_r1.leaderboard.board import wilson

    w = wilson(sum(o["success"] for o in outcomes), len(outcomes))
    return {"n": len(outcomes), "success": w.value, "success_ci": [w.low, w.high]}


def fmt(r: dict[str, Any]) -> str:
    low, high = r["success_ci"]
    return f"success {100 * r['success']:.1f}% [{100 * low:.1f}, {100 * high:.1f}] (n={r['n']})"


def monitor(model: Any, tokenizer: Any, games: list[splits.GameKey]) -> dict[str, Any]:
    return summary(play(model, tokenizer, generated_prompts("monitor", games)))


def expert_texts(games: list[splits.GameKey]) -> list[str]:
    """The rendered chats of the expert's episodes on ``games`` (SFT games): the tokenizer's corpus."""
    from agentgym_r1.adapters.scratch import render_chat

    env, texts = _env("sft"), []
    for game in games:
        env.reset(options={"index": game.index})
        for command in env.unwrapped.expert_plan():
            *_, terminated, truncated, _ = env.step(command)
            if terminated or truncated:
                break
        texts.append(render_chat(env.unwrapped.transcript.messages()))
    return texts


def start_model(sft_games: list[splits.GameKey], layers: int, vocab: int, start_from: Path | None) -> tuple[Any, Any]:
    """The tokenizer and model SFT trains: the checkpoint ``start_from`` (a continuation), or a tokenizer trained on
    the expert's episodes of the first :data:`TOKENIZER_GAMES` SFT games and a tiny Qwen2 from scratch."""
    if start_from is not None:
        return load_checkpoint(start_from)
    from agentgym_r1.adapters.scratch import make_model, train_tokenizer

    tokenizer = train_tokenizer(expert_texts(sft_games[:TOKENIZER_GAMES]), vocab_size=vocab, cross_spaces=True)
    return tokenizer, make_model(tokenizer, hidden=128, layers=layers, mlp_ratio=4)


def expert_episodes(tokenizer: Any, sft_games: list[splits.GameKey]) -> list[Any]:
    """The SFT data: the expert's episodes of the SFT games that end in success (the env's expert plan played through
    the env by the engine)."""
    options = [{"index": g.index} for g in sft_games]
    return expert_sft_rows(
        ENV_ID, env_kwargs("sft"), [0] * len(sft_games), tokenizer, expert_actions("sft"), "SFT games", options
    )


def run_sft(
    out: Path,
    games: dict[str, Any],
    target: float,
    run: dict[str, Any],
    max_steps: int,
    layers: int,
    vocab: int,
    start_from: Path | None = None,
    resume: int = 0,
) -> None:
    """SFT from :func:`start_model` into ``OUT/sft`` in chunks of ``run["chunk"]`` steps (batch ``run["batch"]``, lr
    ``run["lr"]``), each followed by a monitoring check and a save, until ``max_steps`` or a monitoring success of
    ``target``; or, with ``start_from`` and ``resume``, the checkpoint that had ``resume`` steps continued to
    ``max_steps`` into ``OUT/sft-continued`` (the continued-SFT control: the batches and steps of the run from 0,
    :func:`proof_common.chunks`)."""
    start = time.time()
    tokenizer, model = start_model(games["sft"], layers, vocab, start_from)
    model.train()
    print(f"tiny Qwen2: {sum(p.numel() for p in model.parameters())} parameters, {layers} layers", flush=True)
    episodes = expert_episodes(tokenizer, games["sft"])
    print(f"({time.time() - start:.0f}s)", flush=True)
    record = {
        "episodes": len(episodes),
        "games": len(games["sft"]),
        "start": None if start_from is None else {"checkpoint": str(start_from), "steps": resume},
        "provenance": PROVENANCE,
    }
    sft_in_chunks(
        model,
        tokenizer,
        episodes,
        out,
        run=run,
        resume=resume,
        max_steps=max_steps,
        check=lambda model: monitor(model, tokenizer, games["monitor"]),
        stop=lambda point, seconds: point["success"] >= target,
        record=record,
        fmt=fmt,
        checked="monitoring",
    )


def run_grpo(
    out: Path,
    games: dict[str, Any],
    steps: int,
    every: int,
    lr: float,
    seed: int,
    n_prompts: int,
    generations: int,
    temperature: float,
) -> None:
    """GRPO from the SFT checkpoint on the RL games, exactly ``steps`` updates (the lr on a cosine over them)."""
    from datasets import Dataset

    from agentgym_r1.trainers.budget import EveryUpdates
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    tokenizer, model = load_checkpoint(out / "sft")
    label = f"grpo-seed{seed}"
    args = cpu_grpo_config(
        out / label,
        env_id=ENV_ID,
        # num_games: the trainer's check that the env builds resets it on a drawn game; drawn among the RL games'
        # indices, not among 2**31 (each new one costs a planner run)
        env_kwargs={**env_kwargs("rl"), "num_games": max(g.index for g in games["rl"]) + 1},
        limits=limits(),
        prompts=n_prompts,
        generations=generations,
        lr=lr,
        temperature=temperature,
        seed=seed,
        steps=steps,
    )
    tasks = Dataset.from_list([{"prompt": json.dumps({"options": {"index": g.index}})} for g in games["rl"]])
    curve = Curve(lambda m: monitor(m, tokenizer, games["monitor"]), out / f"{label}_curve.json", fmt)
    callback = EveryUpdates(curve, every, steps)
    trainer = AgentGRPOTrainer(model, args, tokenizer, train_dataset=tasks, callbacks=[callback])
    start = time.time()
    trainer.train()
    if trainer.state.global_step != steps:  # e.g. an epoch without one full batch: transformers stops, silently
        from agentgym_r1.error import StudyError

        raise StudyError(f"{label} made {trainer.state.global_step} updates, not the {steps} asked; nothing saved")
    model.save_pretrained(out / label / "final")
    tokenizer.save_pretrained(out / label / "final")
    first, last = curve.points[0], curve.points[-1]
    print(
        f"{label}: {trainer.state.global_step} updates, {(time.time() - start) / 60:.1f} min wall with the monitoring "
        f"checks; monitoring success {100 * first['success']:.1f}% -> {100 * last['success']:.1f}%"
    )


def run_eval(out: Path, games: dict[str, Any], seed: int, which: str, real_n: int) -> None:
    """Greedy play of the SFT checkpoint, the GRPO run's final model and/or the continued SFT on the final held-out
    generated games and the real games; each result in ``final_<label>.json``, per part each game's key (its task id)
    and outcome, with the draw's counts and the provenance; then the paired comparisons of the results there are (each
    against the start, GRPO against the continued SFT)."""
    models = model_paths(out, seed)
    for name in which.split(","):
        label, path = models[name]
        tokenizer, model = load_checkpoint(path)
        model.eval()
        result: dict[str, Any] = {}
        for part, batch in (("generated", generated_prompts("final", games["final"])), ("real", real_prompts(real_n))):
            start = time.time()
            outcomes = play(model, tokenizer, batch)
            result[part] = {**summary(outcomes), "per_game": outcomes}
            print(f"{label}: {part} {fmt(result[part])}  {time.time() - start:.0f}s", flush=True)
        result.update(draw=games["counts"], provenance=PROVENANCE)
        (out / f"final_{label}.json").write_text(json.dumps(result, indent=1))
    print_pairs(out, seed, paired)


def paired(before: dict[str, Any], after: dict[str, Any]) -> str:
    """GRPO against SFT on the same games, per part: games gained and lost, McNemar's exact p."""
    from agentgym_r1.leaderboard.board import pair_outcomes

    lines = []
    for part in ("generated", "real"):
        a, b = before[part]["per_game"], after[part]["per_game"]
        if [o["game"] for o in a] != [o["game"] for o in b]:
            lines.append(f"{part}: not the same games in both results (re-run eval)")
            continue
        p = pair_outcomes([o["success"] for o in a], [o["success"] for o in b])
        diff = after[part]["success"] - before[part]["success"]
        lines.append(
            f"{part}, paired on {p.pairs} games: success {100 * diff:+.1f} points, {p.gained} gained, {p.lost} lost "
            f"(McNemar exact p={p.p:.2g})"
        )
    return "\n".join(lines)


def protocol_problem(protocol: dict[str, Any], a: Any) -> str | None:
    """Why the parsed command ``a`` is not a run the protocol registered, or ``None``: ``grpo --steps`` equal to
    ``config.grpo.updates`` (:func:`~proof_common.budget_problem`), the registered games in every phase
    (``--sft-games``, ``--rl-games``, ``--monitor`` equal to ``config.games``' ``sft``, ``rl``, ``monitor``: the
    held-out sets are drawn apart from the training games), and ``eval`` on the registered sets (``--final`` and
    ``--real`` equal to ``held_out.final_generated.games`` and ``held_out.real_24.games``)."""
    games, held = (protocol.get("config") or {}).get("games") or {}, protocol.get("held_out") or {}
    sizes = {"--sft-games": games.get("sft"), "--rl-games": games.get("rl"), "--monitor": games.get("monitor")}
    final = {
        "--final": (held.get("final_generated") or {}).get("games"),
        "--real": (held.get("real_24") or {}).get("games"),
    }
    return (
        budget_problem(protocol, a)
        or flags_problem(a, sizes, "the registered games", "config.games")
        or (a.phase == "eval" and flags_problem(a, final, "eval scores the registered sets", "held_out"))
        or None
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["sft", "grpo", "eval"])
    parser.add_argument("--out", type=Path, default=Path("runs/alfworld"))
    parser.add_argument("--protocol", type=Path, help="a confirmatory run: its committed protocol")
    parser.add_argument("--seed", type=int, default=0, help="GRPO: the trainer's seed (task order, sampling)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, help="GRPO: exactly this many updates (lr on a cosine over them)")
    parser.add_argument("--eval-every", type=int, default=10, help="GRPO updates between monitoring checks")
    parser.add_argument("--lr", type=float, default=3e-4, help="GRPO learning rate")
    parser.add_argument("--prompts", type=int, default=8, help="GRPO games per update")
    parser.add_argument("--generations", type=int, default=8, help="GRPO samples per game")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--sft-games", type=int, default=SFT_GAMES)
    parser.add_argument("--rl-games", type=int, default=RL_GAMES)
    parser.add_argument("--monitor", type=int, default=MONITOR_N, help="monitoring games (held-out rule)")
    parser.add_argument("--final", type=int, default=FINAL_N, help="final held-out generated games")
    parser.add_argument("--real", type=int, default=REAL_N, help="real games scored (the first N of 24)")
    parser.add_argument("--models", default="sft,grpo", help="eval: which of sft, grpo, sft-continued to play")
    parser.add_argument("--sft-target", type=float, default=0.5, help="stop SFT at this monitoring success")
    parser.add_argument("--sft-chunk", type=int, default=50)
    parser.add_argument("--sft-max-steps", type=int, default=1000)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    add_continuation_flags(parser)
    parser.add_argument("--sft-batch", type=int, default=16)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=2000)
    a = parser.parse_args(argv)
    if a.phase == "grpo" and (a.steps is None or a.steps < 1):
        parser.error(f"grpo needs --steps N (N >= 1 updates), got {a.steps}")
    if a.phase == "grpo" and a.rl_games < a.prompts:
        parser.error(f"--rl-games ({a.rl_games}) must be at least --prompts ({a.prompts}): a GRPO batch needs them")
    if not 1 <= a.real <= REAL_N:
        parser.error(f"--real must be in [1, {REAL_N}], got {a.real}")
    run = {"chunk": a.sft_chunk, "batch": a.sft_batch, "lr": a.sft_lr, "sft_games": a.sft_games}
    problem = continuation_problem(a, run)
    if problem:
        parser.error(problem)
    held_out = ["final_generated", "real_24"] if a.phase == "eval" else None
    PROVENANCE.update(study.start(__file__, a.out, a.protocol, a.seed if a.phase == "grpo" else None, held_out))
    problem = a.protocol and protocol_problem(study.read_protocol(a.protocol), a)
    if problem:
        parser.error(f"--protocol {a.protocol}: {problem}")
    import torch

    torch.set_num_threads(a.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    a.out.mkdir(parents=True, exist_ok=True)
    if a.phase == "eval":
        _env("real")  # lists the real games: a missing data directory stops the run before any work
    games = draw_games(a.sft_games, a.rl_games, a.monitor, a.final)  # checked before any work
    record_games(a.out, games)
    if a.phase == "sft":
        run_sft(a.out, games, a.sft_target, run, a.sft_max_steps, a.layers, a.vocab, a.start, a.sft_resume)
    elif a.phase == "grpo":
        run_grpo(a.out, games, a.steps, a.eval_every, a.lr, a.seed, a.prompts, a.generations, a.temperature)
    else:
        run_eval(a.out, games, a.seed, a.models, a.real)


if __name__ == "__main__":
    main()
