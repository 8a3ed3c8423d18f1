"""Shared pieces of the trainer tests: tiny envs with known rewards, a tiny tokenizer, configs, a one-step runner."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import TrainerCallback

from agentgym_r1.adapters.scratch import make_model, train_tokenizer
from agentgym_r1.core.env import Env, EnvMessage, Turn
from agentgym_r1.trainers.configs import AgentGRPOConfig, AgentPPOConfig

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
ROOT = Path(__file__).resolve().parents[2]


class CountEnv(Env):
    """Two turns; the reward is the length of the second action, so samples of one task differ."""

    def _begin(self, options):
        return [EnvMessage("system", "Write digits."), EnvMessage("user", "Go.")]

    def _act(self, action):
        if self.turn == 0:
            return Turn({"kind": "command"}, [EnvMessage("user", "Again, more digits.")])
        return Turn({"kind": "answer"}, outcome=len(action) / 10, terminated=True)


class HalfConstantEnv(CountEnv):
    """CountEnv, except that tasks with an even seed score 0.5 whatever the agent writes: all-equal groups."""

    def reset(self, *, seed=None, options=None):
        self.task_seed = seed
        return super().reset(seed=seed, options=options)

    def _act(self, action):
        turn = super()._act(action)
        if turn.terminated and self.task_seed % 2 == 0:
            turn.outcome = 0.5
        return turn


class ProcessEnv(CountEnv):
    """A constant outcome (1.0) and a process reward on the first turn that grows with its length."""

    def _act(self, action):
        if self.turn == 0:
            return Turn({"kind": "command"}, [EnvMessage("user", "Again.")], process=len(action) / 10)
        return Turn({"kind": "answer"}, outcome=1.0, terminated=True)


def tiny_tokenizer() -> Any:
    texts = [
        "<|im_start|>system\nWrite digits.<|im_end|>\n<|im_start|>user\nGo.<|im_end|>\n<|im_start|>assistant\n"
        "12 ab 345 cd<|im_end|>\n<|im_start|>user\nAgain, more digits.<|im_end|>\n"
    ] * 20
    return train_tokenizer(texts, vocab_size=300, split_digits=True, cross_spaces=True)


def tiny_model(tokenizer: Any, **kw: Any) -> Any:
    return make_model(tokenizer, **{"hidden": 32, "layers": 1, "heads": 2, "mlp_ratio": 4, **kw}).train()


def grpo_args(tmp_path, **kw) -> AgentGRPOConfig:
    base = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        max_steps=1,
        max_completion_length=64,
        max_new_tokens=8,
        max_turns=2,
        learning_rate=1e-2,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        num_tasks=16,
        seed=0,
    )
    return AgentGRPOConfig(**{**base, **kw})


def ppo_args(tmp_path, **kw) -> AgentPPOConfig:
    base = dict(
        output_dir=str(tmp_path),
        rollout_batch_size=8,
        mini_batch_size=4,
        max_steps=1,
        max_completion_length=64,
        max_new_tokens=8,
        max_turns=2,
        learning_rate=1e-2,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        num_tasks=16,
        logging_steps=1,
    )
    return AgentPPOConfig(**{**base, **kw})


def run_one_step(model, args, tokenizer, make_env=CountEnv, **trainer_kw):
    """One GRPO step; keeps the per-token log-probs of the loss (with their gradient), the batch the rollout played
    (``captured["batch"]``, the last) and what the scoring returned (``captured["out"]``)."""
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    captured: dict = {"logps": [], "inputs": []}
    trainer = AgentGRPOTrainer(model, args, tokenizer, make_env=make_env, **trainer_kw)
    score, logps_fn = trainer._generate_and_score_completions, trainer._get_per_token_logps_and_entropies
    loss_fn, play = trainer._compute_loss, trainer._play

    def spy_play(prompts):
        captured["batch"] = batch = play(prompts)
        return batch

    def spy_score(inputs):
        captured["out"] = out = score(inputs)
        return out

    def spy_loss(model, inputs):  # the micro-batch the loss sees (TRL shuffles the generation batch first)
        captured["inputs"].append(inputs)
        return loss_fn(model, inputs)

    def spy_logps(*a, **kw):
        logps, entropies, aux = logps_fn(*a, **kw)
        if logps.requires_grad:
            logps.retain_grad()
            captured["logps"].append(logps)
        return logps, entropies, aux

    trainer._generate_and_score_completions = spy_score
    trainer._get_per_token_logps_and_entropies = spy_logps
    trainer._compute_loss = spy_loss
    trainer._play = spy_play
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    captured["trainer"] = trainer
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    return captured, changed


def flat_parameters(model: torch.nn.Module) -> torch.Tensor:
    """A copy of every parameter of ``model``, flattened into one tensor: what a process writes for a test to compare
    with another process's, or with its own before a step."""
    return torch.cat([p.detach().flatten() for p in model.parameters()])


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Tick(TrainerCallback):
    """Each optimizer step takes ``seconds`` of the test's clock (placed before the budget, so it sees them)."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds

    def on_step_end(self, args, state, control, **kwargs):
        self.clock.now += self.seconds


@contextmanager
def counted_generate(**backends: type) -> Iterator[dict[str, int]]:
    """Count the ``generate`` calls of each backend class (``counted_generate(vllm=VLLMBackend, hf=HFBackend)``)
    while the block runs; the classes get their own ``generate`` back after it."""
    calls = dict.fromkeys(backends, 0)
    originals = {name: cls.generate for name, cls in backends.items()}

    def counting(name: str, fn: Any) -> Any:
        def wrapped(self: Any, *a: Any, **k: Any) -> Any:
            calls[name] += 1
            return fn(self, *a, **k)

        return wrapped

    for name, cls in backends.items():
        cls.generate = counting(name, originals[name])
    try:
        yield calls
    finally:
        for name, cls in backends.items():
            cls.generate = originals[name]


def torchrun(processes: int, module: str, *args: str, timeout: float = 300) -> None:
    """``torchrun --nproc_per_node processes -m module args`` on CPU (the trainers' ``use_cpu=True`` makes accelerate
    take gloo); a run past ``timeout`` (processes waiting on each other) is killed with all its workers and fails.

    Not ``accelerate launch --cpu --num_processes N``: accelerate 1.15's ``launch_command`` sends ``--cpu`` to its
    ``simple_launcher``, which starts one process whatever N is (``accelerate/commands/launch.py``), so such a test
    compares one process with itself."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(processes),
        "-m",
        module,
        *args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TRL_EXPERIMENTAL_SILENCE": "1"}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        import psutil

        # torchrun starts each worker in a session of its own (``ps`` shows them as session leaders), so killing the
        # launcher's group alone leaves the workers behind, waiting on each other forever: kill them by ancestry
        workers = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signal.SIGKILL)
        for worker in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()
        proc.communicate()
        pytest.fail(
            f"{module} under {processes} processes did not finish in {timeout:.0f} s (processes waiting on each other)"
        )
    assert proc.returncode == 0, err[-3000:]
