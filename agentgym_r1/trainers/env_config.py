"""The env fields both trainers' configs share (:class:`EnvArguments`), and the helpers their ``__post_init__`` use.

:mod:`agentgym_r1.trainers.grpo_config` and :mod:`agentgym_r1.trainers.ppo_config` hold the configs themselves,
beside their trainers, as TRL lays out its own (``trl/trainer/grpo_config.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from transformers import SchedulerType
from transformers.training_args import OptimizerNames

from agentgym_r1.adapters.env_backends import check_env_backend
from agentgym_r1.error import ConfigError
from agentgym_r1.trainers.limits import check_fields

# transformers' own names (its __post_init__ refuses others with a message that does not name the field)
LIBRARY_CHOICES = {
    "lr_scheduler_type": tuple(s.value for s in SchedulerType),
    "optim": tuple(o.value for o in OptimizerNames),
}


def as_dict(name: str, value: Any) -> dict[str, Any]:
    """A mapping field given as a mapping, a JSON object string (the command line) or ``None`` (empty)."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{name} must be a mapping or a JSON object string, got {value!r} ({e.msg})") from e
    if not isinstance(value, dict):
        raise ConfigError(
            f"{name}={value!r} is a {type(value).__name__}, not a mapping: give keyword arguments, "
            'e.g. {source: synthetic} in YAML or \'{"source": "synthetic"}\' on the command line'
        )
    return value


@contextmanager
def library_refusals(config: str) -> Iterator[None]:
    """TRL's and transformers' own ``__post_init__`` refusals (``ValueError``s: an unknown ``lr_scheduler_type``, a
    generation batch not divisible by ``num_generations``) as :class:`ConfigError`, with theirs as the cause."""
    try:
        yield
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(f"{config}: {e}") from e


@dataclass
class EnvArguments:
    r"""
    Which env to train on and how its episodes are played: the fields :class:`AgentGRPOConfig` and
    :class:`AgentPPOConfig` share.

    Parameters:
        > Parameters that control the env

        env_id (`str`, *optional*, defaults to `"AgentR1/GSM8K-v0"`):
            A registered env id (`agentgym_r1.env_ids()`).
        env_kwargs (`dict` or `str`, *optional*):
            Keyword arguments for `gym.make` (a mapping, or a JSON object string on the command line).
        eval_env_kwargs (`dict` or `str`, *optional*):
            Keyword arguments for the held-out eval env. Defaults to `env_kwargs` with seed + 1.
        num_tasks (`int`, *optional*, defaults to `4096`):
            Training rows (reset seeds) in the task dataset.
        eval_episodes (`int`, *optional*, defaults to `64`):
            Held-out episodes for `env/<id>/success` at evaluation.
        env_backend (`str`, *optional*, defaults to `"thread"`):
            Where envs run: `"thread"`, `"process"` or `"ray"`.
        env_workers (`int`, *optional*, defaults to `0`):
            Threads, worker processes or Ray actors for the envs.
        ray_address (`str`, *optional*):
            The Ray cluster for `env_backend="ray"`. Defaults to the connected one, or a local instance.

        > Parameters that control the episodes

        max_turns (`int`, *optional*, defaults to `4`):
            Agent turns per episode.
        max_new_tokens (`int`, *optional*, defaults to `64`):
            Tokens the model may write per turn.
        max_prompt_tokens (`int`, *optional*, defaults to `1024`):
            Tokens the first prompt may hold; a longer one is a failed row, counted in `rollout/failed_rows` and left
            out of the loss.
        max_failed_steps (`int`, *optional*, defaults to `3`):
            Stop training when every rollout row failed (generation or env errors) in this many steps in a row.
        model_init (`str`, *optional*):
            A local model directory (tokenizer files beside the weights).

        > Parameters that control the masks

        loss_mask (`bool`, *optional*, defaults to `True`):
            The loss (and its token count) over agent tokens only; `False`: over every completion token, env tokens
            too.
        advantage_mask (`bool`, *optional*, defaults to `True`):
            Advantages (PPO: GAE credit) on agent tokens only; `False`: on every completion token.
    """

    env_id: str = field(default="AgentR1/GSM8K-v0", metadata={"help": "a registered env id"})
    env_kwargs: dict | str | None = field(default=None, metadata={"help": "keyword arguments for gym.make (JSON)"})
    eval_env_kwargs: dict | str | None = field(
        default=None, metadata={"help": "kwargs for the held-out eval env (default: env_kwargs with seed+1)"}
    )
    max_turns: int = field(default=4, metadata={"help": "turns per episode"})
    max_new_tokens: int = field(default=64, metadata={"help": "tokens the model may write per turn"})
    max_prompt_tokens: int = field(
        default=1024,
        metadata={
            "help": "tokens the first prompt may hold; a longer one is a failed row, counted in "
            "rollout/failed_rows and left out of the loss"
        },
    )
    max_failed_steps: int = field(
        default=3,
        metadata={"help": "stop when every rollout row failed (generation or env errors) in this many steps in a row"},
    )
    num_tasks: int = field(default=4096, metadata={"help": "training rows (reset seeds) in the task dataset"})
    env_backend: str = field(default="thread", metadata={"help": "where envs run: thread, process or ray"})
    env_workers: int = field(default=0, metadata={"help": "threads, worker processes or Ray actors for the envs"})
    ray_address: str | None = field(
        default=None,
        metadata={"help": "Ray cluster for env_backend: ray (default: the connected one, or a local instance)"},
    )
    eval_episodes: int = field(default=64, metadata={"help": "held-out episodes for env/<id>/success at eval"})
    model_init: str | None = field(
        default=None, metadata={"help": "a local model directory (tokenizer files beside the weights)"}
    )
    loss_mask: bool = field(
        default=True,
        metadata={
            "help": "the loss (and its token count) over agent tokens only; "
            "false: over every completion token, env tokens too"
        },
    )
    advantage_mask: bool = field(
        default=True,
        metadata={
            "help": "advantages (PPO: GAE credit) on agent tokens only; false: on every "
            "completion token. Same meaning in GRPO and PPO"
        },
    )

    def _check_env(self, choices: dict[str, tuple[Any, ...]] | None = None) -> None:
        """Every field's type and range first (:func:`check_fields`), then the env's: before anything reads them."""
        check_fields(self, {**LIBRARY_CHOICES, **(choices or {})})
        if not isinstance(self.env_id, str) or not self.env_id:
            import agentgym_r1

            raise ConfigError(
                f"env_id={self.env_id!r} is not an env id: give a registered one ({', '.join(agentgym_r1.env_ids())})."
            )
        self.env_kwargs = as_dict("env_kwargs", self.env_kwargs)
        self.eval_env_kwargs = as_dict("eval_env_kwargs", self.eval_env_kwargs)
        check_env_backend(self.env_backend, self.env_workers, self.ray_address)
        if self.max_completion_length < self.max_new_tokens:  # type: ignore[attr-defined]
            raise ConfigError(
                f"max_completion_length={self.max_completion_length} < max_new_tokens={self.max_new_tokens}: the "  # type: ignore[attr-defined]
                "completion budget could not hold one turn, so every episode would end at its first turn cut "
                "short. Raise max_completion_length (the budget of the whole episode after the first prompt) or "
                "lower max_new_tokens."
            )
