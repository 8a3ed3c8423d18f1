"""From text episodes to training tensors: episode tokenization, the rollout engine and its generation backends.

Nothing here imports torch or transformers at import time; the backends load them when built.
"""

from agentgym_r1.adapters.backends.base import ChatReply, Generation, SamplingParams
from agentgym_r1.adapters.context import ContextPolicy, last_k_turns, make_context
from agentgym_r1.adapters.records import Episode, RolloutBatch, Sample, TurnRecord
from agentgym_r1.adapters.rollout import Prompt, RolloutConfig, RolloutEngine
from agentgym_r1.adapters.tokenize import ChatTokenizer, default_stop_ids

__all__ = ["ChatReply", "ChatTokenizer", "ContextPolicy", "Episode", "Generation", "Prompt", "RolloutBatch",
           "RolloutConfig", "RolloutEngine", "Sample", "SamplingParams", "TurnRecord", "default_stop_ids",
           "last_k_turns", "make_context"]
