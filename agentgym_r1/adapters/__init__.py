"""From text episodes to training tensors: episode tokenization, the rollout engine and its generation backends.

Nothing here imports torch or transformers at import time; the backends load them when built.

Example::

    from agentgym_r1.adapters import ChatTokenizer, Prompt, RolloutConfig, RolloutEngine, SamplingParams
    from agentgym_r1.adapters.backends.hf import HFBackend

    chat = ChatTokenizer(tokenizer)                      # the model's chat template renders the env text
    engine = RolloutEngine(HFBackend(model, chat), chat,
                           RolloutConfig(samples_per_prompt=4, sampling=SamplingParams(max_new_tokens=256)))
    batch = engine.rollout([Prompt("AgentR1/GSM8K-v0", {"source": "synthetic"}, seed=i) for i in range(8)])
    batch.to_trl()        # prompt_ids, completion_ids, logprobs, env_mask (+ rewards) for a TRL rollout_func
    batch.to_tensors(chat.pad_token_id)                  # padded tensors for a custom trainer
"""

from agentgym_r1.adapters.backends.base import ChatReply, Generation, SamplingParams
from agentgym_r1.adapters.context import ContextPolicy, last_k_turns, make_context
from agentgym_r1.adapters.records import Episode, RolloutBatch, Sample, TurnRecord
from agentgym_r1.adapters.rollout import Prompt, RolloutConfig, RolloutEngine
from agentgym_r1.adapters.tokenize import ChatTokenizer, default_stop_ids

__all__ = [
    "ChatReply",
    "ChatTokenizer",
    "ContextPolicy",
    "Episode",
    "Generation",
    "Prompt",
    "RolloutBatch",
    "RolloutConfig",
    "RolloutEngine",
    "Sample",
    "SamplingParams",
    "TurnRecord",
    "default_stop_ids",
    "last_k_turns",
    "make_context",
]
