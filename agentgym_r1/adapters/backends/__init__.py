"""Generation backends: transformers ``generate`` (:mod:`.hf`), vLLM (:mod:`.vllm`, optional) and an
OpenAI-compatible HTTP endpoint (:mod:`.openai`). Each module imports its heavy dependency only when used."""

from agentgym_r1.adapters.backends.base import (
    DEFAULT_STOP_STRINGS,
    ChatBackend,
    ChatReply,
    Generation,
    SamplingParams,
    StopScanner,
    TokenBackend,
)

__all__ = [
    "DEFAULT_STOP_STRINGS",
    "ChatBackend",
    "ChatReply",
    "Generation",
    "SamplingParams",
    "StopScanner",
    "TokenBackend",
]
