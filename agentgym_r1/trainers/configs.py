"""The trainers' configs, from where they live: :mod:`agentgym_r1.trainers.grpo_config`,
:mod:`agentgym_r1.trainers.ppo_config` (beside their trainers, as TRL lays out its own) and the shared env fields of
:mod:`agentgym_r1.trainers.env_config`. Kept so that ``from agentgym_r1.trainers.configs import AgentGRPOConfig``
(scripts, YAML loaders, older callers) goes on working.
"""

from __future__ import annotations

from agentgym_r1.trainers.env_config import LIBRARY_CHOICES, EnvArguments, as_dict, library_refusals
from agentgym_r1.trainers.grpo_config import ROW_MEAN_LOSSES, SKIP_EXACT_LOSSES, AgentGRPOConfig
from agentgym_r1.trainers.ppo_config import AgentPPOConfig

__all__ = [
    "LIBRARY_CHOICES",
    "ROW_MEAN_LOSSES",
    "SKIP_EXACT_LOSSES",
    "AgentGRPOConfig",
    "AgentPPOConfig",
    "EnvArguments",
    "as_dict",
    "library_refusals",
]
