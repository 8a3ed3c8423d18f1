"""What the multi-turn CPU proofs of learning share (``train_webshop_proof.py``, ``train_alfworld_proof.py``): greedy
play through the rollout engine, held-out monitoring along a GRPO run, and the GRPO config of a tiny model on CPU."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Limits:
    """An episode's bounds: ``turns``, tokens per turn (``new_tokens``), the first prompt's tokens (``prompt``) and
    what follows it, agent and env tokens together (``completion``)."""

    turns: int
    new_tokens: int
    prompt: int
    completion: int


def greedy_episodes(model: Any, tokenizer: Any, prompts: Sequence[Any], limits: Limits, chunk: int = 256) -> list[Any]:
    """The episodes of ``model`` on ``prompts`` (:class:`~agentgym_r1.adapters.Prompt`) within ``limits``, greedy,
    ``chunk`` at a time; the model is put back in the mode it was in."""
    from agentgym_r1.adapters import ChatTokenizer, RolloutConfig, RolloutEngine, SamplingParams
    from agentgym_r1.adapters.backends.hf import HFBackend

    chat = ChatTokenizer(tokenizer)
    config = RolloutConfig(
        max_turns=limits.turns,
        max_context_tokens=limits.prompt + limits.completion,
        max_completion_tokens=limits.completion,
        seed=None,
        sampling=SamplingParams(max_new_tokens=limits.new_tokens, temperature=0.0),
    )
    was_training = model.training
    engine = RolloutEngine(HFBackend(model, chat, neutral=True), chat, config)
    episodes: list[Any] = []
    try:
        for i in range(0, len(prompts), chunk):
            episodes += engine.rollout(list(prompts[i : i + chunk])).episodes
    finally:
        engine.close()
        model.train(was_training)
    return episodes


def load_checkpoint(path: Path) -> tuple[Any, Any]:
    """The tokenizer and model saved at ``path`` (``PreTrainedTokenizerFast``: transformers 5's ``AutoTokenizer``
    would rebuild the tiny tokenizer as Qwen2's)."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)


class Curve:
    """Held-out monitoring along a GRPO run (the ``evaluate`` of :class:`~agentgym_r1.trainers.budget.EveryUpdates`
    or :class:`~agentgym_r1.trainers.budget.WallClockBudget`): ``monitor(model)`` gives a point's figures, written to
    ``path`` with the step, the training seconds and the wall seconds, and printed with ``fmt``."""

    def __init__(self, monitor: Callable[[Any], dict[str, Any]], path: Path, fmt: Callable[[dict[str, Any]], str]):
        self.monitor, self.path, self.fmt = monitor, path, fmt
        self.start, self.points = time.time(), []

    def __call__(self, step: int, model: Any, seconds: float) -> None:
        point = {"step": step, "seconds": seconds, **self.monitor(model)}
        if step == 0:  # wall time counts from the end of the first check, as training time does
            self.start = time.time()
        self.points.append({**point, "wall": time.time() - self.start})
        self.path.write_text(json.dumps(self.points, indent=1))
        print(
            f"grpo step {step:4d}  held-out {self.fmt(point)}  training {seconds:.0f}s, "
            f"wall {self.points[-1]['wall']:.0f}s",
            flush=True,
        )


def cpu_grpo_config(
    output_dir: Path,
    *,
    env_id: str,
    env_kwargs: dict[str, Any],
    limits: Limits,
    prompts: int,
    generations: int,
    lr: float,
    temperature: float,
    seed: int,
    steps: int | None,
) -> Any:
    """GRPO of a tiny model on one CPU process: ``prompts`` tasks x ``generations`` samples a step, no KL term, fp32,
    nothing saved by the trainer. With ``steps``, exactly that many updates, the lr on a cosine over them; without,
    a constant lr and no step limit (a wall-clock run: :class:`~agentgym_r1.trainers.budget.WallClockBudget` stops
    it and sets its cosine)."""
    from agentgym_r1.trainers.configs import AgentGRPOConfig

    return AgentGRPOConfig(
        output_dir=str(output_dir),
        env_id=env_id,
        env_kwargs=env_kwargs,
        max_turns=limits.turns,
        max_new_tokens=limits.new_tokens,
        max_prompt_tokens=limits.prompt,
        max_completion_length=limits.completion,
        num_generations=generations,
        per_device_train_batch_size=prompts * generations,
        learning_rate=lr,
        lr_scheduler_type="cosine" if steps else "constant",
        beta=0.0,
        temperature=temperature,
        max_steps=steps or 100_000,
        logging_steps=5,
        report_to="none",
        gradient_checkpointing=False,
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=seed,
        data_seed=seed,
    )


RUN_FILE = "sft_run.json"  # in an SFT checkpoint: its steps and settings, which a continuation checks
PAIRS = (("sft", "grpo"), ("sft", "sft-continued"), ("sft-continued", "grpo"))  # eval's paired comparisons


def expert_sft_rows(
    env_id: str,
    env_kwargs: dict[str, Any],
    seeds: Sequence[int],
    tokenizer: Any,
    actions: Callable[[Any], list[str]],
    what: str,
    options: Sequence[dict[str, Any]] | None = None,
) -> list[Any]:
    """The SFT data: the expert's episodes (:func:`~agentgym_r1.trainers.sft.expert_rows`, one per reset seed and
    ``options``) that end in success, in order; prints how many of the ``what`` it won and their token lengths."""
    from agentgym_r1.error import StudyError
    from agentgym_r1.trainers.sft import expert_rows

    played = expert_rows(env_id, env_kwargs, seeds, tokenizer, actions, require_success=False, options=options)
    rows = [d for d in played.samples if d.success]
    if not rows:
        raise StudyError(f"the expert won none of the {len(played.samples)} {what}: there is nothing to imitate")
    lengths = sorted(len(d.prompt_ids) + len(d.completion_ids) for d in rows)
    print(
        f"vocab {len(tokenizer)}; the expert won {len(rows)} of {len(played.samples)} {what}, kept those; episode "
        f"tokens: median {lengths[len(lengths) // 2]}, max {lengths[-1]}; prompt {len(rows[0].prompt_ids)} tokens",
        flush=True,
    )
    return rows


def chunks(first: int, last: int, chunk: int) -> list[tuple[int, int]]:
    """The SFT chunks from step ``first`` to ``last``: (first step, steps) each, one starting at every ``chunk``-th
    step, the last one cut at ``last``. A chunk draws its batches with its first step as seed and starts a fresh
    optimizer whose lr, after the warm-up, is constant (:func:`~agentgym_r1.trainers.sft.sft`; its ``draws`` take one
    ``randint`` a step, so a cut chunk's batches are the first of the whole chunk's): a run continued from its
    step-``first`` checkpoint (``first`` a multiple of ``chunk``) takes the steps of a run from 0 to ``last``."""
    return [(step, min(chunk, last - step)) for step in range(first, last, chunk)]


def save_sft(path: Path, model: Any, tokenizer: Any, run: dict[str, Any]) -> None:
    """An SFT checkpoint: the model, its tokenizer and ``run`` (its steps and settings, which a continuation checks:
    :func:`check_resume`)."""
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / RUN_FILE).write_text(json.dumps(run))


def check_resume(start_from: Path | None, resume: int, max_steps: int, chunk: int, run: dict[str, Any]) -> str | None:
    """Why ``sft --start start_from --sft-resume resume`` cannot continue as the run from 0 would have gone on, or
    ``None``; ``run`` is this command's SFT settings (chunk, batch, lr, the SFT data's size), compared with those the
    checkpoint's run recorded (in its :data:`RUN_FILE`; a checkpoint saved before that file existed is not checked)."""
    if start_from is None:
        return (
            None if not resume else f"--sft-resume {resume} needs --start, the checkpoint that had {resume} SFT steps"
        )
    if resume < 1:
        return f"--start {start_from} needs --sft-resume N, the number of SFT steps that checkpoint had (N >= 1)"
    if max_steps <= resume:
        return f"--sft-max-steps {max_steps} must be above --sft-resume {resume}: a continuation trains steps N+1..M"
    if resume % chunk:
        return (
            f"--sft-resume {resume} is not a multiple of --sft-chunk {chunk}: a chunk's batches are drawn from its "
            f"first step, so only a run continued at a chunk's start takes the steps of the run from 0"
        )
    if not (start_from / "config.json").is_file():
        return f"--start {start_from} is not a saved model (no config.json); give an SFT checkpoint, e.g. OUT/sft"
    recorded = start_from / RUN_FILE
    had = json.loads(recorded.read_text()) if recorded.is_file() else {**run, "steps": resume}
    wrong = {k: (v, had.get(k)) for k, v in {**run, "steps": resume}.items() if had.get(k) != v}
    if wrong:
        return (
            "the checkpoint's SFT run differs from this continuation (given, recorded): "
            + ", ".join(f"{k} {given} vs {was}" for k, (given, was) in wrong.items())
            + f" ({recorded}); give the checkpoint's settings"
        )
    return None


def add_continuation_flags(parser: Any) -> None:
    """``--start`` and ``--sft-resume``: the continued-SFT control (:func:`continuation_problem` checks them)."""
    parser.add_argument("--start", type=Path, help="sft: continue this SFT checkpoint (with --sft-resume)")
    parser.add_argument(
        "--sft-resume",
        type=int,
        default=0,
        help="sft: the number of SFT steps the --start checkpoint had; it is trained on to --sft-max-steps",
    )


def continuation_problem(a: Any, run: dict[str, Any]) -> str | None:
    """Why the parsed command ``a`` (its ``phase``, ``models``, ``seed``, ``out`` and SFT flags) is refused before any
    work, or ``None``: ``--models`` naming something :func:`model_paths` does not, ``--start``/``--sft-resume`` outside
    ``sft``, or a continuation that would not take the steps of the run from 0 (:func:`check_resume`)."""
    for flag, value in (("--sft-chunk", a.sft_chunk), ("--sft-max-steps", a.sft_max_steps)):
        if value < 1:
            return f"{flag} must be at least 1, got {value}"
    unknown = [name for name in a.models.split(",") if name not in model_paths(a.out, a.seed)]
    if unknown:
        return f"--models {a.models}: {unknown} not among {list(model_paths(a.out, a.seed))}"
    if a.phase != "sft" and (a.start or a.sft_resume):
        return f"--start and --sft-resume continue an SFT checkpoint (phase sft), got phase {a.phase}"
    return check_resume(a.start, a.sft_resume, a.sft_max_steps, a.sft_chunk, run)


def sft_in_chunks(
    model: Any,
    tokenizer: Any,
    rows: list[Any],
    out: Path,
    *,
    run: dict[str, Any],
    resume: int,
    max_steps: int,
    check: Callable[[Any], dict[str, Any]],
    stop: Callable[[dict[str, Any], float], bool],
    record: dict[str, Any],
    fmt: Callable[[dict[str, Any]], str],
    checked: str = "held-out",
) -> list[dict[str, Any]]:
    """SFT of ``model`` on ``rows`` in :func:`chunks` of ``run["chunk"]`` steps (batch ``run["batch"]``, lr
    ``run["lr"]``) from step ``resume`` to ``max_steps``, each chunk followed by ``check(model)`` (a curve point), a
    printed line and a save (:func:`save_sft` with ``run`` and its steps) into ``OUT/sft``, or with ``resume`` (a
    continuation, whose budget is its steps) ``OUT/sft-continued``, with the curve and ``record`` in
    ``OUT/<label>_curve.json``. A run from 0 stops when ``stop(last point, seconds)`` says so; returns the curve."""
    from agentgym_r1.trainers.sft import sft

    label = "sft-continued" if resume else "sft"
    run = {"steps": resume, **run}
    curve: list[dict[str, Any]] = []  # no check at step 0: a random model's episodes fail (and are the slowest)
    start = time.time()
    for first, steps in chunks(resume, max_steps, run["chunk"]):
        if not resume and curve and stop(curve[-1], time.time() - start):
            break  # a continuation makes its steps: its budget is in updates
        losses = sft(model, tokenizer, rows, steps=steps, batch_size=run["batch"], lr=run["lr"], seed=first)
        run["steps"] = first + steps
        curve.append(
            {"step": run["steps"], "seconds": time.time() - start, "loss": sum(losses) / len(losses), **check(model)}
        )
        print(
            f"{label} step {run['steps']:4d}  loss {curve[-1]['loss']:.3f}  {checked} {fmt(curve[-1])}  "
            f"{curve[-1]['seconds']:.0f}s",
            flush=True,
        )
        save_sft(out / label, model, tokenizer, run)  # after every chunk: the last one is the start if time runs out
        (out / f"{label}_curve.json").write_text(json.dumps({**record, "curve": curve}, indent=1))
    print(f"SFT checkpoint: {out / label}  steps {run['steps']}  {checked} {fmt(curve[-1])}")
    return curve


def model_paths(out: Path, seed: int) -> dict[str, tuple[str, Path]]:
    """What ``eval --models`` can play: each name's result label and checkpoint."""
    return {
        "sft": ("sft", out / "sft"),
        "grpo": (f"grpo-seed{seed}", out / f"grpo-seed{seed}" / "final"),
        "sft-continued": ("sft-continued", out / "sft-continued"),
    }


def print_pairs(out: Path, seed: int, paired: Callable[[dict[str, Any], dict[str, Any]], str]) -> None:
    """The paired comparisons (:data:`PAIRS`: each against the start, GRPO against the continued SFT) of the
    ``final_<label>.json`` results in ``out`` that exist, each said by ``paired``."""
    labels = {name: label for name, (label, _) in model_paths(out, seed).items()}
    for before, after in PAIRS:
        a, b = (out / f"final_{labels[name]}.json" for name in (before, after))
        if a.exists() and b.exists():
            text = paired(json.loads(a.read_text()), json.loads(b.read_text()))
            print(f"{labels[after]} against {labels[before]}: {text}", flush=True)


def budget_problem(protocol: dict[str, Any], a: Any) -> str | None:
    """Why the parsed command ``a`` is not budgeted as the protocol registered, or ``None``: ``grpo --steps`` equal to
    ``config.grpo.updates``, and no ``--sft-minutes`` (a script that has it)."""
    updates = ((protocol.get("config") or {}).get("grpo") or {}).get("updates")
    if a.phase == "grpo" and a.steps != updates:
        return f"grpo needs --steps {updates} (config.grpo.updates), got {a.steps}"
    minutes = getattr(a, "sft_minutes", math.inf)
    if a.phase == "sft" and math.isfinite(minutes):
        return f"a registered SFT is budgeted in steps: drop --sft-minutes {minutes}"
    return None


def flags_problem(a: Any, wanted: dict[str, Any], what: str, where: str) -> str | None:
    """Why ``a``'s flags (``--final-first`` read as ``a.final_first``) are not the protocol's values ``wanted`` (read
    from ``where`` in it), or ``None``."""
    given = {flag: getattr(a, flag.lstrip("-").replace("-", "_")) for flag in wanted}
    if given == wanted:
        return None
    said = " ".join(f"{flag} {value}" for flag, value in wanted.items())
    return f"{what}: {said} ({where}), got {' '.join(f'{flag} {value}' for flag, value in given.items())}"
