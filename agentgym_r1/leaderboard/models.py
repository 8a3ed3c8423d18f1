"""Model policies: a local transformers model (``hf:PATH``) and an OpenAI-compatible chat endpoint
(``openai:URL#MODEL``, e.g. a vLLM server), on the rollout engine's generation backends
(:mod:`agentgym_r1.adapters.backends`: ``HFBackend`` with the engine's ``ChatTokenizer``, and ``OpenAIBackend``).

Both see what a trained agent sees: the episode so far in chat form (``env.unwrapped.transcript.messages()``), greedy,
stopping at the end of a tool call or an answer. For the endpoint, tool results are sent as ``<tool_response>`` user
turns (the Qwen/Hermes convention), since a ``tool`` message without a ``tool_call_id`` is refused by strict servers.

An endpoint that cannot be reached, or a model that cannot be loaded, raises :class:`PolicyError` (the job stops
with that message); a turn past ``timeout`` seconds raises :class:`PolicyTimeout` (the episode ends unsolved).
"""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym

from agentgym_r1.error import ConfigError, PolicyError, PolicyTimeout, require
from agentgym_r1.leaderboard.policies import Policy


def chat_messages(env: gym.Env) -> list[dict[str, str]]:
    """The episode as chat messages for an endpoint: tool results become user turns, same-role turns are merged."""
    out: list[dict[str, str]] = []
    for m in env.unwrapped.transcript.messages():
        role, content = m["role"], m["content"]
        if role == "tool":
            role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
        if out and out[-1]["role"] == role:
            out[-1]["content"] += "\n" + content
        else:
            out.append({"role": role, "content": content})
    return out


class OpenAIPolicy(Policy):
    """Greedy (temperature 0 by default) chat completions from an OpenAI-compatible server."""

    def __init__(self, url: str, model: str, timeout: float = 60.0, max_tokens: int = 512,
                 temperature: float = 0.0, api_key: str | None = None) -> None:
        from agentgym_r1.adapters.backends.base import SamplingParams
        from agentgym_r1.adapters.backends.openai import OpenAIBackend

        self._httpx = require("httpx", "serve", "the openai: policy")
        self.name, self.url, self.timeout = f"openai:{url}#{model}", url.rstrip("/"), timeout
        self.backend = OpenAIBackend(url, model, api_key=api_key, max_concurrency=1, timeout=timeout)
        self.params = SamplingParams(max_new_tokens=max_tokens, temperature=temperature)

    @classmethod
    def from_spec(cls, spec: str, timeout: float = 60.0) -> OpenAIPolicy:
        url, sep, model = spec.removeprefix("openai:").partition("#")
        if not sep or not url.startswith(("http://", "https://")) or not model:
            raise ConfigError(f"an endpoint policy looks like 'openai:http://HOST:PORT/v1#MODEL', got {spec!r}")
        return cls(url, model, timeout=timeout, api_key=os.environ.get("OPENAI_API_KEY"))

    def act(self, observation: str, info: dict[str, Any]) -> str:
        httpx, where = self._httpx, f"{self.url}/chat/completions"
        try:
            (reply,) = self.backend.chat([chat_messages(self.env)], self.params)
        except httpx.TimeoutException as e:
            raise PolicyTimeout(f"{self.name} did not answer within {self.timeout:g} s ({type(e).__name__})") from e
        except httpx.HTTPStatusError as e:
            raise PolicyError(f"{where} answered HTTP {e.response.status_code}: {e.response.text[:300]}") from e
        except httpx.HTTPError as e:
            raise PolicyError(f"cannot reach {where} ({type(e).__name__}: {e}); is the server running? Start one "
                              f"with e.g. `vllm serve {self.backend.model}`") from e
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise PolicyError(f"{where} gave no choices[0].message.content ({type(e).__name__}: {e})") from e
        return reply.text

    def close(self) -> None:
        self.backend.close()


def load_tokenizer(path: str) -> Any:
    """The tokenizer of a local model directory: its ``tokenizer.json`` as is when there is one (``AutoTokenizer``
    beside a qwen2 ``config.json`` would rebuild a custom tokenizer as a Qwen2 one and change its ids)."""
    transformers = require("transformers", "train", "the hf: policy")
    if os.path.exists(os.path.join(path, "tokenizer.json")):
        return transformers.PreTrainedTokenizerFast.from_pretrained(path)
    return transformers.AutoTokenizer.from_pretrained(path)


class HFPolicy(Policy):
    """A local transformers causal LM with a chat template, greedy, on CPU (or ``device``)."""

    def __init__(self, path: str, timeout: float = 60.0, max_new_tokens: int = 256, device: str = "cpu") -> None:
        if not os.path.isdir(path):
            raise PolicyError(f"hf:{path}: no such model directory; give a local directory with config.json, the "
                              f"weights and a tokenizer (nothing is downloaded at evaluation time)")
        transformers = require("transformers", "train", "the hf: policy")
        require("torch", "train", "the hf: policy")
        from agentgym_r1.adapters.backends.base import SamplingParams
        from agentgym_r1.adapters.backends.hf import HFBackend
        from agentgym_r1.adapters.tokenize import ChatTokenizer

        self.name, self.timeout, self.max_new_tokens = f"hf:{path}", timeout, max_new_tokens
        try:
            tokenizer = load_tokenizer(path)
            model = transformers.AutoModelForCausalLM.from_pretrained(path).to(device).eval()
            self.chat = ChatTokenizer(tokenizer)
        except (OSError, ValueError) as e:  # ConfigError (no chat template, no eos) is a ValueError
            raise PolicyError(f"hf:{path} cannot be loaded: {e}") from e
        self.backend = HFBackend(model, self.chat)
        self.params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, extra={"max_time": timeout})

    @classmethod
    def from_spec(cls, spec: str, timeout: float = 60.0) -> HFPolicy:
        """``hf:PATH`` or ``hf:PATH?max_new_tokens=N&device=D``."""
        from urllib.parse import parse_qsl

        path, _, query = spec.removeprefix("hf:").partition("?")
        options = dict(parse_qsl(query))
        unknown = set(options) - {"max_new_tokens", "device"}
        if unknown:
            raise ConfigError(f"{spec!r}: unknown option(s) {sorted(unknown)}; the options are max_new_tokens, device")
        try:
            max_new = int(options.get("max_new_tokens", 256))
        except ValueError as e:
            raise ConfigError(f"{spec!r}: max_new_tokens must be an integer") from e
        return cls(path, timeout=timeout, max_new_tokens=max_new, device=options.get("device", "cpu"))

    def act(self, observation: str, info: dict[str, Any]) -> str:
        ids = self.chat.prompt_ids(self.env.unwrapped.transcript.messages())
        t0 = time.monotonic()
        (generation,) = self.backend.generate([ids], [self.max_new_tokens], self.params)
        if time.monotonic() - t0 >= self.timeout:
            raise PolicyTimeout(f"{self.name} did not finish a turn within {self.timeout:g} s")
        return self.chat.decode_action(generation.ids)
