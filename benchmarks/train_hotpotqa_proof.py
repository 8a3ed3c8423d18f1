"""HotpotQA proof of learning on CPU: the Agent-R1 table in miniature (issue 12).

A tiny Qwen2-style model (tokenizer trained here) learns to search a generated multi-hop knowledge base:

    python benchmarks/train_hotpotqa_proof.py sft  --out runs/hotpot    # tokenizer, model, ReAct SFT checkpoint
    python benchmarks/train_hotpotqa_proof.py rag  --out runs/hotpot    # naive RAG: answer from one retrieval
    python benchmarks/train_hotpotqa_proof.py grpo --out runs/hotpot --layout step --estimator rloo --seed 1
    python benchmarks/train_hotpotqa_proof.py ppo  --out runs/hotpot --no-advantage-mask --no-loss-mask
    python benchmarks/train_hotpotqa_proof.py eval --out runs/hotpot --checkpoint runs/hotpot/sft
    python benchmarks/train_hotpotqa_proof.py table --out runs/hotpot   # the rows, as Markdown
    python benchmarks/train_hotpotqa_proof.py plot  --out runs/hotpot   # learning curves -> benchmarks/plots/

The env is ``AgentR1/HotpotQA-v0``, ``source="synthetic"``, ``difficulty="easy"``, Search-R1 tags
(``<search>q</search>``, ``<answer>a</answer>``), one passage per search (``top_k=1``) and a one-line system prompt
(the tag instructions follow it). Expert episodes: search each supporting title in turn (the first entity, then the
bridge entity its passage names, or the two entities compared), then answer. SFT and RL draw training questions
with reset seeds 0..7999; held-out questions are drawn from reset seed 1,000,000 on, skipping any question a training
seed draws or an earlier held-out seed drew (the knowledge base is shared, the questions are not); ``sft`` prints that
check.

Held-out EM is greedy: 128 questions to monitor runs, and 1,024 further ones (never used to pick anything) for the
table, with a 95% Wilson interval. The ReAct SFT stops at the first chunk whose monitoring EM reaches ``--sft-target``
(every chunk is kept under ``OUT/sft-steps/stepN``, ``--start`` picks one for RL); the RAG SFT keeps its best chunk and
stops when it no longer improves. Each RL run trains for ``--minutes`` of wall time (lr on a cosine over that time;
``grpo --schedule constant`` keeps it constant) and writes its learning curve to ``OUT/<run>/curve.json`` and its result
(with EM by question type) to ``OUT/results/<run>.json``. ``--temperature`` sets the rollouts' sampling temperature and
``--rl-types bridge`` draws RL tasks only from the bridge questions (the README's second setup: ``--temperature 0.6
--rl-types bridge``). ``sft --start CKPT --sft-resume N`` continues an SFT checkpoint that had N steps, its learning
curve in ``OUT/sft-continued/curve.json`` (the README's third look compares it with RL in the same wall time). ``grpo
--iterations 2`` takes two optimizer steps on each sampled batch (TRL's ``num_iterations``; the README's sixth look).
``sft --vocab N --tokenizer-corpus kb`` trains a larger tokenizer on the KB passages too, and ``sft --tokenizer-pieces
words`` one whose merges stay inside runs of letters, so a name is the same tokens in the question and in a query (its
episodes are about twice as long: give ``--max-completion 640`` to that run's ``sft``, ``grpo``, ``ppo`` and ``eval``;
the README's seventh look).

**Held-out sets never scored before** (issue 36; ``benchmarks/hotpotqa_splits.py`` says which seeds each set and every
earlier run used): ``--held-out fresh disjoint`` scores the end of a run on 1,024 fresh questions and on 512
questions over a part of the KB (two countries) that no training task touches, ``--held-out dev`` on the 512
development questions (for choosing a learning rate or the naive RAG's k). With any of them, SFT, RL and the RAG
demonstrations train on the first 8,000 reset seeds whose task stays clear of that part, runs are monitored on dev's
first 128 questions, the sets are cached in ``OUT/splits.json`` and each result is ``OUT/results/<run>.<set>.json``.
Before any training the script checks that no held-out question is a training question (and that no entity of the
disjoint set is touched by training): an overlap stops it with ``HeldOutOverlapError`` naming the first few. The
default ``--held-out legacy`` keeps the earlier runs' 128 + 1,024 questions and training seeds. Every result and curve
records ``provenance`` (``git rev-parse HEAD``, a dirty-tree flag); ``--protocol benchmarks/reports/<study>.md`` makes a
run confirmatory and refuses it before any work if the tree is dirty, the protocol is a draft or not committed, or its
commit is not an ancestor of HEAD (``benchmarks/study.py``).

``grpo`` and ``ppo`` also run as one run on several processes (the README's eighth look: one run on both cores)::

    OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node 2 benchmarks/train_hotpotqa_proof.py grpo \
        --out runs/h10 --start-from runs/hotpot/sft --batch 32 ...

``--batch`` is then per process (``--batch 32`` on 2 processes: 64 episodes a step), the wall-clock budget follows the
main process's clock, greedy evaluation splits its questions over the processes, and rank 0 alone writes. Write
``--start-from`` there: torchrun's parser takes ``--start`` for an abbreviation of its ``--start-method``.
"""

import argparse
import os
from pathlib import Path

import hotpotqa_splits as splits  # benchmarks/: held-out sets never scored before, and the overlap check
import study  # benchmarks/: provenance of every result, the confirmatory guard (--protocol)

# The phases live beside this entry point, one module per concern: the tasks and held-out sets
# (hotpotqa_proof_tasks), evaluation and diagnosis (hotpotqa_proof_eval), SFT and naive RAG (hotpotqa_proof_sft),
# GRPO and PPO (hotpotqa_proof_rl), eval / table / plot (hotpotqa_proof_report). The names below are also what the
# sibling scripts (hotpotqa_answers.py, sft_old_loop.py) and the tests read from this module.
from hotpotqa_proof_eval import (
    COMPARISON_OUTCOMES,
    RAG_RECORD,
    comparison_outcome,
    comparison_outcomes,
    rag_k,
    rag_prompt,
    react_em,
    react_episodes,
    tag_bodies,
)
from hotpotqa_proof_report import run_eval, run_plot, run_table
from hotpotqa_proof_rl import RL_TYPES, check_comparison_share, rl_tasks, run_grpo, run_ppo, share_indices
from hotpotqa_proof_sft import run_rag, run_sft
from hotpotqa_proof_tasks import (
    BUDGET,
    ENV_ID,
    ENV_KWARGS,
    HELD_OUT,
    PROVENANCE,
    TASKS,
    TOP_K,
    expert_actions,
    gold,
    held_out_sets,
    question_type,
    questions,
    training_seeds,
)

__all__ = [
    "COMPARISON_OUTCOMES",
    "ENV_ID",
    "ENV_KWARGS",
    "HELD_OUT",
    "RAG_RECORD",
    "TASKS",
    "comparison_outcome",
    "comparison_outcomes",
    "expert_actions",
    "gold",
    "held_out_sets",
    "main",
    "question_type",
    "questions",
    "rag_k",
    "rag_prompt",
    "react_em",
    "react_episodes",
    "rl_tasks",
    "run_eval",
    "run_grpo",
    "run_plot",
    "run_ppo",
    "run_rag",
    "run_sft",
    "run_table",
    "share_indices",
    "tag_bodies",
    "training_seeds",
]


def build_parser() -> argparse.ArgumentParser:
    """The command line: a phase and its flags, this module's docstring for the description."""
    from agentgym_r1.leaderboard.cli import int_arg

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=["sft", "rag", "grpo", "ppo", "eval", "table", "plot"])
    parser.add_argument("--out", type=Path, default=Path("runs/hotpot"))
    parser.add_argument("--minutes", type=float, default=10.0, help="RL: wall minutes of training")
    parser.add_argument(
        "--steps", type=int, help="RL: exactly this many updates (the lr on --schedule over them) instead of --minutes"
    )
    parser.add_argument("--eval-every", type=int, default=10, help="RL: monitoring EM every this many steps")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument(
        "--batch", type=int, default=64, help="RL: episodes per step and process (GRPO: groups x generations)"
    )
    parser.add_argument("--generations", type=int, default=8, help="GRPO: samples per question")
    parser.add_argument("--temperature", type=float, default=1.0, help="RL: sampling temperature of the rollouts")
    parser.add_argument(
        "--rl-types",
        choices=sorted(RL_TYPES),
        default="all",
        help="RL: the training questions' types (all; bridge; names: bridge and named comparisons; "
        "comparison: named comparisons)",
    )
    parser.add_argument(
        "--comparison-share",
        type=float,
        help="RL with --rl-types names: the named comparisons' share of the task rows, their rows "
        "repeated to reach it (natural share: 37%%)",
    )
    parser.add_argument(
        "--reward",
        choices=["em", "char_f1"],
        default="em",
        help="RL: the env's outcome reward (held-out EM is measured with em either way)",
    )
    parser.add_argument(
        "--budget",
        choices=["wall", "train"],
        default="wall",
        help="RL: --minutes of wall time, monitoring included (wall), or of training alone (train)",
    )
    parser.add_argument("--layout", choices=["concatenated", "step"], default="concatenated")
    parser.add_argument("--estimator", choices=["grpo", "rloo", "reinforce++"], default="grpo")
    parser.add_argument(
        "--schedule",
        choices=["cosine", "constant"],
        default="cosine",
        help="GRPO: the lr over the budget (cosine to zero, or constant)",
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=1,
        help="GRPO: optimizer steps on each sampled batch (TRL's num_iterations; the ratio is clipped after the first)",
    )
    parser.add_argument("--no-advantage-mask", action="store_true", help="PPO: advantages on env tokens too")
    parser.add_argument("--no-loss-mask", action="store_true", help="PPO: env tokens in the loss")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path, help="eval: the model directory")
    parser.add_argument(
        "--start",
        "--start-from",
        type=Path,
        help="RL: the checkpoint to start from (default OUT/sft, the SFT stop; OUT/sft-steps/stepN is "
        "the SFT model after N steps). Under torchrun write --start-from: torchrun's own parser takes "
        "--start for an abbreviation of its --start-method",
    )
    parser.add_argument("--rag", action="store_true", help="eval: the checkpoint is a naive RAG model")
    parser.add_argument("--plots", type=Path, default=Path("benchmarks/plots"))
    parser.add_argument("--plot-name", default="hotpotqa", help="plot: files PLOTS/<name>_{algorithms,ppo_masks}.svg")
    parser.add_argument("--plot-note", default="", help="plot: a note on the setup for the titles")
    parser.add_argument(
        "--plot-xlabel",
        default="wall minutes of training (one torch thread, two runs on two cores)",
        help="plot: the x axis's label (how the runs shared the cores)",
    )
    parser.add_argument("--sft-target", type=float, default=0.12)
    parser.add_argument("--sft-chunk", type=int, default=50)
    parser.add_argument("--sft-max-steps", type=int, default=3000)
    parser.add_argument(
        "--sft-resume", type=int, default=0, help="sft: continue the checkpoint --start, which had this many SFT steps"
    )
    parser.add_argument("--sft-episodes", type=int, default=20_000, help="expert episodes (training seeds 0..N-1)")
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--sft-batch", type=int, default=16)
    parser.add_argument("--rag-minutes", type=float, default=6.0)
    parser.add_argument("--rag-patience", type=int, default=3, help="RAG: chunks without improvement before stopping")
    parser.add_argument(
        "--rag-k",
        type=int_arg(1, 20),
        default=TOP_K,
        help="RAG: passages retrieved with the question (BM25, best first)",
    )
    parser.add_argument(
        "--rag-steps",
        type=int_arg(1, 1_000_000),
        help="RAG: train exactly this many steps and keep the last (a budget in updates; default: --rag-minutes "
        "with early stopping on the monitoring EM)",
    )
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128, help="sft, rag: the model's width (4 heads, MLP 4x)")
    parser.add_argument("--vocab", type=int, default=1000, help="sft: the tokenizer's vocabulary size")
    parser.add_argument(
        "--tokenizer-corpus",
        choices=["episodes", "kb"],
        default="episodes",
        help="sft: train the tokenizer on 300 expert episodes, or on them and every KB passage",
    )
    parser.add_argument(
        "--tokenizer-pieces",
        choices=["cross-spaces", "words"],
        default="cross-spaces",
        help="sft: merges across spaces (a name's tokens depend on its neighbours), or only inside "
        "runs of letters (a name is the same tokens everywhere)",
    )
    parser.add_argument(
        "--max-completion",
        type=int,
        default=320,
        help="eval, RL: an episode's completion tokens, env tokens included (the words tokenizer "
        "needs about twice the default)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--held-out",
        nargs="+",
        choices=["legacy", *splits.SETS],
        default=["legacy"],
        help="the held-out sets scored at the end (benchmarks/hotpotqa_splits.py): legacy (the 1,024 "
        "questions of every earlier run), or any of dev, fresh, disjoint, which also make training "
        "skip the disjoint set's part of the KB and monitor on dev's first 128 questions",
    )
    parser.add_argument(
        "--protocol",
        type=Path,
        help="a confirmatory run: the committed protocol page (benchmarks/reports/); the run is "
        "refused before any work if the tree is dirty, the protocol is a draft or not committed, or "
        "its commit is not an ancestor of HEAD (benchmarks/study.py)",
    )
    return parser


def main() -> None:
    parser = build_parser()
    a = parser.parse_args()
    if "legacy" in a.held_out and len(a.held_out) > 1:
        parser.error(
            f"--held-out legacy is the earlier runs' split; it cannot be scored beside {a.held_out} (their "
            f"training skips part of the KB). Give legacy alone, or any of dev, fresh, disjoint"
        )
    HELD_OUT[:] = list(dict.fromkeys(a.held_out))
    PROVENANCE.update(
        study.start(__file__, a.out, a.protocol, a.seed if a.phase in ("grpo", "ppo") else None, HELD_OUT)
    )  # a named error refuses a confirmatory run here, before any work
    if a.comparison_share is not None and a.phase != "grpo":
        parser.error(f"--comparison-share mixes the RL tasks of grpo; got it for {a.phase}")
    try:
        check_comparison_share(a.rl_types, a.comparison_share)
    except ValueError as error:
        parser.error(str(error))
    BUDGET["completion"] = a.max_completion
    import torch

    torch.set_num_threads(a.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    a.out.mkdir(parents=True, exist_ok=True)
    run_phase(parser, a)


def run_phase(parser: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Run the phase ``a.phase`` with its flags (``parser`` refuses ``--sft-resume`` without ``--start``)."""
    if a.phase == "sft":
        if a.sft_resume and not a.start:
            parser.error("--sft-resume N needs --start, the checkpoint that had N SFT steps")
        run_sft(
            a.out,
            a.sft_target,
            a.sft_chunk,
            a.sft_max_steps,
            a.sft_episodes,
            a.sft_lr,
            a.sft_batch,
            a.layers,
            a.start,
            a.sft_resume,
            a.hidden,
            a.vocab,
            a.tokenizer_corpus,
            a.tokenizer_pieces,
        )
    elif a.phase == "rag":
        run_rag(
            a.out,
            a.sft_chunk,
            a.rag_minutes,
            a.rag_patience,
            a.sft_episodes,
            a.sft_lr,
            a.sft_batch,
            a.layers,
            a.hidden,
            a.rag_k,
            a.rag_steps,
            a.start,
        )
    elif a.phase == "grpo":
        estimator = "reinforce_pp" if a.estimator == "reinforce++" else a.estimator
        run_grpo(
            a.out,
            a.start or a.out / "sft",
            a.minutes,
            a.eval_every,
            a.lr,
            a.layout,
            estimator,
            a.seed,
            a.batch,
            a.generations,
            a.threads,
            a.temperature,
            a.rl_types,
            a.reward,
            a.budget,
            a.iterations,
            a.schedule,
            a.comparison_share,
            a.steps,
        )
    elif a.phase == "ppo":
        run_ppo(
            a.out,
            a.start or a.out / "sft",
            a.minutes,
            a.eval_every,
            a.lr,
            not a.no_advantage_mask,
            not a.no_loss_mask,
            a.seed,
            a.batch,
            a.threads,
            a.temperature,
            a.rl_types,
            a.reward,
            a.budget,
            a.steps,
        )
    elif a.phase == "eval":
        run_eval(a.out, a.checkpoint, a.rag)
    elif a.phase == "table":
        run_table(a.out)
    else:
        run_plot(a.out, a.plots, a.plot_name, a.plot_note, a.plot_xlabel)


if __name__ == "__main__":
    main()
