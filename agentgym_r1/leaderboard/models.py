"""Model policies: a local transformers model (``hf:PATH``) and an OpenAI-compatible chat endpoint
(``openai:URL#MODEL``, e.g. a vLLM server).

Both see what a trained agent sees: the episode so far in chat form (``env.unwrapped.transcript.messages()``), tool
results as ``<tool_response>`` user turns (the Qwen/Hermes convention), and stop at the end of a tool call or an
answer. This is a minimal implementation for evaluation (lazy ``transformers``; ``httpx`` for HTTP); the rollout
engine of :mod:`agentgym_r1.adapters` is the one to train with.

An endpoint that cannot be reached, or a model that cannot be loaded, raises :class:`PolicyError` (the job stops
with that message); a turn past ``timeout`` seconds raises :class:`PolicyTimeout` (the episode ends unsolved).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym

from agentgym_r1.error import ConfigError, PolicyError, PolicyTimeout, require
from agentgym_r1.leaderboard.policies import Policy

STOP = ("</tool_call>", "</answer>")


def chat_messages(env: gym.Env) -> list[dict[str, str]]:
    """The episode as chat messages for a model: tool results become user turns, same-role turns are merged."""
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


def close_stop(text: str) -> str:
    """Put back a closing tag that the server's stop sequence removed."""
    for stop in STOP:
        opener = stop.replace("/", "", 1)
        if text.rfind(opener) > text.rfind(stop):
            return text + stop
    return text


class OpenAIPolicy(Policy):
    """Greedy (temperature 0 by default) chat completions from an OpenAI-compatible server."""

    def __init__(self, url: str, model: str, timeout: float = 60.0, max_tokens: int = 512,
                 temperature: float = 0.0, api_key: str | None = None) -> None:
        httpx = require("httpx", "serve", "the openai: policy")
        self.name, self.url, self.model = f"openai:{url}#{model}", url.rstrip("/"), model
        self.timeout, self.max_tokens, self.temperature = timeout, max_tokens, temperature
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)), headers=headers)
        self._httpx = httpx

    @classmethod
    def from_spec(cls, spec: str, timeout: float = 60.0) -> OpenAIPolicy:
        import os

        url, sep, model = spec.removeprefix("openai:").partition("#")
        if not sep or not url.startswith(("http://", "https://")) or not model:
            raise ConfigError(f"an endpoint policy looks like 'openai:http://HOST:PORT/v1#MODEL', got {spec!r}")
        return cls(url, model, timeout=timeout, api_key=os.environ.get("OPENAI_API_KEY"))

    def act(self, observation: str, info: dict[str, Any]) -> str:
        body = {"model": self.model, "messages": chat_messages(self.env), "max_tokens": self.max_tokens,
                "temperature": self.temperature, "stop": list(STOP)}
        httpx = self._httpx
        try:
            response = self.client.post(f"{self.url}/chat/completions", json=body)
        except httpx.TimeoutException as e:
            raise PolicyTimeout(f"{self.name} did not answer within {self.timeout:g} s ({type(e).__name__})") from e
        except httpx.HTTPError as e:
            raise PolicyError(f"cannot reach {self.url}/chat/completions ({type(e).__name__}: {e}); is the server "
                              f"running? Start one with e.g. `vllm serve {self.model}`") from e
        if response.status_code >= 400:
            raise PolicyError(f"{self.url}/chat/completions answered HTTP {response.status_code}: {response.text[:300]}")
        try:
            text = response.json()["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise PolicyError(f"{self.url}/chat/completions gave no choices[0].message.content: "
                              f"{response.text[:300]}") from e
        return close_stop(text)

    def close(self) -> None:
        self.client.close()


class HFPolicy(Policy):
    """A local transformers causal LM with a chat template, greedy, on CPU (or ``device``)."""

    def __init__(self, path: str, timeout: float = 60.0, max_new_tokens: int = 256, device: str = "cpu") -> None:
        import os

        if not os.path.isdir(path):
            raise PolicyError(f"hf:{path}: no such model directory; give a local directory with config.json, the "
                              f"weights and a tokenizer (nothing is downloaded at evaluation time)")
        transformers = require("transformers", "train", "the hf: policy")
        require("torch", "train", "the hf: policy")
        self.name, self.timeout, self.max_new_tokens = f"hf:{path}", timeout, max_new_tokens
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(path)
            self.model = transformers.AutoModelForCausalLM.from_pretrained(path).to(device).eval()
        except (OSError, ValueError) as e:
            raise PolicyError(f"hf:{path} cannot be loaded: {e}") from e
        if not getattr(self.tokenizer, "chat_template", None):
            raise PolicyError(f"hf:{path}: the tokenizer has no chat template; add one to tokenizer_config.json")
        self.device = device

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
        import torch

        ids = self.tokenizer.apply_chat_template(chat_messages(self.env), add_generation_prompt=True,
                                                 return_tensors="pt", return_dict=True)
        input_ids = ids["input_ids"].to(self.device)
        t0 = time.monotonic()
        with torch.no_grad():
            out = self.model.generate(input_ids, attention_mask=ids["attention_mask"].to(self.device),
                                      max_new_tokens=self.max_new_tokens, do_sample=False, max_time=self.timeout,
                                      stop_strings=list(STOP), tokenizer=self.tokenizer,
                                      pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id)
        if time.monotonic() - t0 >= self.timeout:
            raise PolicyTimeout(f"{self.name} did not finish a turn within {self.timeout:g} s")
        return self.tokenizer.decode(out[0, input_ids.shape[1]:], skip_special_tokens=True)
