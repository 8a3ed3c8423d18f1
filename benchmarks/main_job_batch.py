"""How long scoring the main job's trained rows takes at several engine batch sizes, and whether a greedy answer
moves: the same checkpoint plays the same held-out problems (the rows' generator, seed 3) at each size in turn.

    PYTHONPATH=. python benchmarks/main_job_batch.py runs/leaderboard-train/sft --episodes 512 --batches 64 16 64 16

Each size is timed after an untimed warm-up pass. Prints, per batch size, the wall time and the number of episodes
whose outcome (success, reward, turns, invalid turns) differs from the first size's. Results:
benchmarks/reports/main_job.md ("Time of the main job").
"""

from __future__ import annotations

import argparse
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a saved checkpoint of the main job (its sft/ or grpo/ folder)")
    p.add_argument("--episodes", type=int, default=512)
    p.add_argument("--batches", type=int, nargs="+", default=[16, 64, 128])
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)

    import torch

    from agentgym_r1.adapters.loading import load_model, load_tokenizer
    from agentgym_r1.leaderboard.batched import EnginePlayer
    from agentgym_r1.leaderboard.suites import env_kwargs
    from agentgym_r1.leaderboard.training import ENV_ID, HELD_OUT_OPTIONS, SOURCE, TrainBudget

    torch.set_num_threads(a.threads)
    tokenizer, model = load_tokenizer(a.checkpoint, "the checkpoint"), load_model(a.checkpoint, "the checkpoint")
    kwargs, items = env_kwargs(ENV_ID, SOURCE, HELD_OUT_OPTIONS), [(i, i) for i in range(a.episodes)]

    def play(items: list[tuple[int, int]], batch: int) -> tuple[list[tuple], float]:
        """Each item's outcome, played ``batch`` at a time by a fresh player, and the seconds the playing took."""
        player = EnginePlayer.from_model(model, tokenizer, TrainBudget().max_new_tokens)
        start = time.perf_counter()
        try:
            out = [(r.success, r.reward, r.turns, r.invalid) for r in player.play(ENV_ID, kwargs, items, batch)]
        finally:
            player.close()
        return out, time.perf_counter() - start

    # an untimed warm-up pass first: the first sizes timed in a fresh process paid for it (19.5 s at 16 when 16 ran
    # first, 9.4-10.1 s when it ran after a pass at 64)
    play(items[: max(a.batches)], max(a.batches))
    first = None
    for batch in a.batches:
        out, seconds = play(items, batch)
        first = first or out
        moved = sum(x != y for x, y in zip(first, out, strict=True))
        print(
            f"batch {batch}: {seconds:.1f} s for {a.episodes} episodes, {sum(s for s, *_ in out)} solved, "
            f"{moved} outcomes differ from batch {a.batches[0]}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
