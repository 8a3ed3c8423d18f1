"""Model policies: a local transformers model (``hf:PATH``) and an OpenAI-compatible chat endpoint
(``openai:URL#MODEL``, e.g. a vLLM server), on the rollout engine's generation backends
(:mod:`agentgym_r1.adapters.backends`: ``HFBackend`` with the engine's ``ChatTokenizer``, and ``OpenAIBackend``).

Both see what a trained agent sees: the episode so far in chat form (``env.unwrapped.transcript.messages()``), greedy,
stopping at the end of a tool call or an answer. For the endpoint, tool results are sent as ``<tool_response>`` user
turns (the Qwen/Hermes convention), since a ``tool`` message without a ``tool_call_id`` is refused by strict servers.

An endpoint that cannot be reached, or a model that cannot be loaded, raises :class:`PolicyError` (the job stops
with that message); a turn past ``timeout`` seconds raises :class:`PolicyTimeout` (the episode ends unsolved).

:func:`make_policy` makes any policy by its spec: a registered name, ``hf:`` or ``openai:``.
"""

from __future__ import annotations

import importlib
import os
import time
from typing import Any

import gymnasium as gym

from agentgym_r1.error import ConfigError, PolicyError, PolicyTimeout, require
from agentgym_r1.leaderboard.policies import POLICY_SPECS, Policy, env_family, find_policy


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
    """Greedy (temperature 0 by default) chat completions from an OpenAI-compatible server, through the ``openai``
    SDK's client: each request is bounded by ``timeout`` and retried ``retries`` times with exponential backoff and
    jitter on connection errors, timeouts, 408/409/429 and 5xx answers (``openai._base_client.SyncAPIClient``:
    ``_should_retry`` and ``_calculate_retry_timeout``). One client (a thread-safe httpx pool) can be shared by the
    policies of concurrent episodes (``client=``)."""

    def __init__(
        self,
        url: str,
        model: str,
        timeout: float = 60.0,
        max_tokens: int = 512,
        temperature: float = 0.0,
        api_key: str | None = None,
        retries: int = 2,
        client: Any = None,
    ) -> None:
        from agentgym_r1.adapters.backends.base import DEFAULT_STOP_STRINGS

        self.name, self.url, self.model, self.timeout = f"openai:{url}#{model}", url.rstrip("/"), model, timeout
        self.max_tokens, self.temperature, self.stop = max_tokens, temperature, list(DEFAULT_STOP_STRINGS)[:4]
        self._owns_client = client is None
        self.client = client if client is not None else make_client(url, timeout, api_key, retries)

    @classmethod
    def from_spec(cls, spec: str, timeout: float = 60.0, client: Any = None) -> OpenAIPolicy:
        url, model, max_tokens = parse_openai_spec(spec)
        return cls(
            url, model, timeout=timeout, max_tokens=max_tokens, api_key=os.environ.get("OPENAI_API_KEY"), client=client
        )

    def act(self, observation: str, info: dict[str, Any]) -> str:
        from agentgym_r1.adapters.backends.openai import restore_stop

        openai, where = require("openai", "board", "the openai: policy"), f"{self.url}/chat/completions"
        try:
            response = self.client.chat.completions.create(
                model=self.model,
                messages=chat_messages(self.env),
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                stop=self.stop,
            )
        except openai.APITimeoutError as e:
            raise PolicyTimeout(f"{self.name} did not answer within {self.timeout:g} s ({type(e).__name__})") from e
        except openai.APIStatusError as e:
            raise PolicyError(f"{where} answered HTTP {e.status_code}: {str(e)[:300]}") from e
        except openai.APIConnectionError as e:
            raise PolicyError(
                f"cannot reach {where} ({type(e).__name__}: {e}); is the server running? Start one "
                f"with e.g. `vllm serve {self.model}`"
            ) from e
        except (openai.OpenAIError, ValueError) as e:  # a body that is not a chat completion (invalid JSON...)
            raise PolicyError(f"{where} gave an unreadable answer ({type(e).__name__}: {str(e)[:300]})") from e
        try:
            choice = response.choices[0]
            text = choice.message.content or ""
        except (AttributeError, IndexError, TypeError) as e:
            raise PolicyError(
                f"{where} gave no choices[0].message.content ({type(e).__name__}: {e}): {str(response)[:200]}"
            ) from e
        if not isinstance(text, str):
            raise PolicyError(f"{where} gave a non-text message content: {str(text)[:200]}")
        return restore_stop(text, self.stop) if choice.finish_reason != "length" else text

    def close(self) -> None:
        if self._owns_client:
            self.client.close()


def parse_openai_spec(spec: str) -> tuple[str, str, int]:
    """``openai:URL#MODEL[?max_tokens=N]`` -> ``(URL, MODEL, N)`` (N defaults to 512); a :class:`ConfigError` for
    anything else."""
    from urllib.parse import parse_qsl

    url, sep, rest = spec.removeprefix("openai:").partition("#")
    model, _, query = rest.partition("?")
    if not sep or not url.startswith(("http://", "https://")) or not model:
        raise ConfigError(f"an endpoint policy looks like 'openai:http://HOST:PORT/v1#MODEL', got {spec!r}")
    options = dict(parse_qsl(query))
    if set(options) - {"max_tokens"} or not options.get("max_tokens", "512").isdigit():
        raise ConfigError(f"{spec!r}: the only option is max_tokens=N (a positive integer), got {query!r}")
    return url, model, max(1, int(options.get("max_tokens", "512")))


def make_client(url: str, timeout: float, api_key: str | None = None, retries: int = 2) -> Any:
    """The ``openai`` SDK's client for ``url``, with its own timeout and retry-with-backoff policy."""
    openai = require("openai", "board", "the openai: policy")
    return openai.OpenAI(
        base_url=url,
        api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
        timeout=timeout,
        max_retries=retries,
    )


class HFPolicy(Policy):
    """A local transformers causal LM with a chat template, greedy, on CPU (or ``device``)."""

    def __init__(self, path: str, timeout: float = 60.0, max_new_tokens: int = 256, device: str = "cpu") -> None:
        if not os.path.isdir(path):
            raise PolicyError(
                f"hf:{path}: no such model directory; give a local directory with config.json, the "
                f"weights and a tokenizer (nothing is downloaded at evaluation time)"
            )
        require("transformers", "train", "the hf: policy")
        require("torch", "train", "the hf: policy")
        from agentgym_r1.adapters.backends.base import SamplingParams
        from agentgym_r1.adapters.backends.hf import HFBackend
        from agentgym_r1.adapters.loading import load_model, load_tokenizer
        from agentgym_r1.adapters.tokenize import ChatTokenizer

        self.name, self.timeout, self.max_new_tokens = f"hf:{path}", timeout, max_new_tokens
        try:
            tokenizer = load_tokenizer(path, "model")
            model = load_model(path, "model", device=device)
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


def make_policy(
    spec: str, env_id: str | None = None, seed: int = 0, timeout: float = 60.0, client: Any = None
) -> Policy:
    """The policy named ``spec`` for ``env_id`` (GSM8K when no env is named).

    ``spec`` is a registered name (see :data:`POLICY_SPECS`), ``hf:PATH[?max_new_tokens=N&device=D]`` (a local
    transformers model) or
    ``openai:URL#MODEL`` (an OpenAI-compatible chat endpoint, e.g. a vLLM server; ``client`` an ``openai`` client to
    share). ``timeout`` bounds one model turn. (``vllm:PATH`` plays only in batches: see
    :mod:`agentgym_r1.leaderboard.batched`.) It lives here, above :mod:`agentgym_r1.leaderboard.policies` (which this
    module imports), so that the registry need not import the model policies back.
    """
    if spec.startswith("hf:"):
        return HFPolicy.from_spec(spec, timeout=timeout)
    if spec.startswith("vllm:"):
        raise ConfigError(
            f"{spec!r} plays episodes in batches on the rollout engine, not one at a time: run it with "
            f"`agentgym-r1 eval` / `leaderboard run` (agentgym_r1.leaderboard.batched.EnginePlayer)"
        )
    if spec.startswith("openai:"):
        return OpenAIPolicy.from_spec(spec, timeout=timeout, client=client)
    found = find_policy(spec, env_id)
    if found is None:
        family = env_family(env_id) if env_id else "GSM8K"
        names = sorted(p.name for p in POLICY_SPECS if p.family == family)
        raise ConfigError(
            f"unknown policy {spec!r} for {env_id or 'GSM8K'}; choose one of {names}, "
            f"'hf:PATH' (a local transformers model) or 'openai:URL#MODEL' (an OpenAI-compatible endpoint)"
        )
    module, _, attr = found.entry_point.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    return cls(seed=seed) if found.kind == "random" else cls()
