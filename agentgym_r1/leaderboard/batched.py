"""Model policies playing many episodes at once.

``openai:URL#MODEL`` keeps up to ``concurrency`` requests in flight: one episode per worker thread, each with its own
env and policy and one shared ``openai`` client (timeouts and retries with backoff are the SDK's). An endpoint that
is down, slow or answers garbage fails the episode it was serving, with the reason; the other episodes go on.

``hf:PATH`` and ``vllm:PATH`` play ``concurrency`` episodes per batch through the rollout engine
(:class:`agentgym_r1.adapters.RolloutEngine`), which batches one generation call over every live episode of a round,
on :class:`~agentgym_r1.adapters.backends.hf.HFBackend` or a colocated ``vllm.LLM`` in
:class:`~agentgym_r1.adapters.backends.vllm.VLLMBackend`. Greedy in both cases.

Both yield :class:`EpisodeRecord`\\ s as episodes finish, so the caller stores each at once.
"""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any
from urllib.parse import parse_qsl

import gymnasium as gym

from agentgym_r1.error import ConfigError, PolicyError, require
from agentgym_r1.leaderboard.policies import Policy
from agentgym_r1.leaderboard.runner import run_episode
from agentgym_r1.leaderboard.store import EpisodeRecord

Item = tuple[int, int]  # (episode index in the run, reset seed)


def is_engine_spec(spec: str) -> bool:
    return spec.startswith(("hf:", "vllm:"))


def parse_engine_spec(spec: str) -> tuple[str, str, dict[str, str]]:
    """``hf:PATH[?max_new_tokens=N&device=D]`` or ``vllm:PATH[?max_new_tokens=N]`` -> (kind, path, options); a
    :class:`ConfigError` for unknown options, ``DependencyNotInstalled`` for ``vllm:`` without vLLM."""
    kind, _, rest = spec.partition(":")
    path, _, query = rest.partition("?")
    options = dict(parse_qsl(query))
    allowed = {"max_new_tokens", "device"} if kind == "hf" else {"max_new_tokens"}
    if set(options) - allowed:
        raise ConfigError(
            f"{spec!r}: unknown option(s) {sorted(set(options) - allowed)}; the options are {sorted(allowed)}"
        )
    if not options.get("max_new_tokens", "256").isdigit() or int(options.get("max_new_tokens", "256")) < 1:
        raise ConfigError(f"{spec!r}: max_new_tokens must be a positive integer")
    require("vllm" if kind == "vllm" else "transformers", "vllm" if kind == "vllm" else "train", f"the {kind}: policy")
    return kind, path, options


def model_dir(spec: str) -> tuple[str, str, dict[str, str]]:
    """:func:`parse_engine_spec`, and a :class:`PolicyError` when the model directory does not exist."""
    kind, path, options = parse_engine_spec(spec)
    if not os.path.isdir(path):
        raise PolicyError(
            f"{spec}: no such model directory; give a local directory with config.json, the weights "
            f"and a tokenizer (nothing is downloaded at evaluation time)"
        )
    return kind, path, options


def check_spec(spec: str, env_id: str) -> None:
    """Raise the error a policy spec would raise, before any episode: an unknown name, a malformed endpoint, a bad
    option, a missing extra."""
    from agentgym_r1.leaderboard.models import make_policy, parse_openai_spec

    if is_engine_spec(spec):
        model_dir(spec)
    elif spec.startswith("openai:"):
        parse_openai_spec(spec)
        require("openai", "board", "the openai: policy")
    else:
        make_policy(spec, env_id).close()


def play_concurrent(
    make_env: Callable[[], gym.Env], make_policy: Callable[[], Policy], items: Sequence[Item], concurrency: int
) -> Iterator[EpisodeRecord]:
    """Play ``items`` with up to ``concurrency`` episodes in flight; yields each record as it finishes. Closing the
    generator early cancels what has not started."""
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1, got {concurrency}")
    slots: queue.SimpleQueue[tuple[gym.Env, Policy]] = queue.SimpleQueue()
    made: list[tuple[gym.Env, Policy]] = []
    for _ in range(min(concurrency, len(items))):
        made.append((make_env(), make_policy()))
        slots.put(made[-1])

    def one(item: Item) -> EpisodeRecord:
        env, policy = slots.get()
        t0 = time.perf_counter()
        try:
            rec = run_episode(env, policy, seed=item[1], idx=item[0])
        except PolicyError as e:  # down, refused, garbage: this episode fails with the reason
            rec = EpisodeRecord(item[0], item[1], _task_id(env), False, 0.0, 0, 0, error=str(e))
        except Exception as e:  # a bug in an env: recorded, the run goes on
            rec = EpisodeRecord(item[0], item[1], _task_id(env), False, 0.0, 0, 0, error=f"{type(e).__name__}: {e}")
        finally:
            slots.put((env, policy))
        rec.seconds = time.perf_counter() - t0
        return rec

    pool = ThreadPoolExecutor(max(1, len(made)), thread_name_prefix="episode")
    try:
        pending = {pool.submit(one, item) for item in items}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for env, policy in made:
            policy.close()
            env.close()


def _task_id(env: gym.Env) -> str | None:
    return getattr(getattr(env.unwrapped, "task", None), "id", None)


class EnginePlayer:
    """A local model (``hf:PATH[?max_new_tokens=N&device=D]`` or ``vllm:PATH[?max_new_tokens=N]``) on the rollout
    engine, its envs on ``env_backend`` (:mod:`agentgym_r1.adapters.env_backends`). Raises :class:`PolicyError` for a
    model that cannot be loaded, :class:`ConfigError` for a bad spec and ``DependencyNotInstalled`` (naming the
    extra) when vLLM or transformers is missing, before any episode."""

    def __init__(
        self,
        spec: str,
        timeout: float = 60.0,
        max_context_tokens: int = 4096,
        env_backend: str = "thread",
        env_workers: int = 0,
        ray_address: str | None = None,
    ) -> None:
        kind, path, options = model_dir(spec)
        backend, chat = _hf_backend(path, options.get("device", "cpu")) if kind == "hf" else _vllm_backend(path)
        self._start(
            spec,
            backend,
            chat,
            int(options.get("max_new_tokens", 256)),
            {"max_time": timeout} if kind == "hf" else {},
            max_context_tokens=max_context_tokens,
            env_backend=env_backend,
            env_workers=env_workers,
            ray_address=ray_address,
        )

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, max_new_tokens: int = 256, timeout: float = 60.0) -> EnginePlayer:
        """A transformers model in memory, played exactly as ``hf:PATH?max_new_tokens=N`` plays its saved copy (the
        same backend, greedy sampling and engine settings): the trained agent's learning curve is read this way."""
        from agentgym_r1.adapters.backends.hf import HFBackend
        from agentgym_r1.adapters.tokenize import ChatTokenizer

        player = cls.__new__(cls)
        chat = ChatTokenizer(tokenizer)
        player._start(
            f"hf:<in memory>?max_new_tokens={max_new_tokens}",
            HFBackend(model, chat),
            chat,
            max_new_tokens,
            {"max_time": timeout},
        )
        return player

    def _start(
        self,
        name: str,
        backend: Any,
        chat: Any,
        max_new_tokens: int,
        extra: dict[str, Any],
        max_context_tokens: int = 4096,
        **config: Any,
    ) -> None:
        from agentgym_r1.adapters.backends.base import SamplingParams
        from agentgym_r1.adapters.rollout import RolloutConfig, RolloutEngine

        self.name = name
        sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, extra=extra)
        self.engine = RolloutEngine(
            backend, chat, RolloutConfig(max_context_tokens=max_context_tokens, sampling=sampling, seed=None, **config)
        )

    def play(
        self, env_id: str, env_kwargs: dict[str, Any], items: Sequence[Item], batch: int
    ) -> Iterator[EpisodeRecord]:
        """Play ``items`` ``batch`` at a time; yields each batch's records when the batch ends."""
        from agentgym_r1.adapters.rollout import Prompt

        for start in range(0, len(items), batch):
            chunk = items[start : start + batch]
            t0 = time.perf_counter()
            played = self.engine.rollout([Prompt(env_id, env_kwargs, seed) for _, seed in chunk], 1)
            seconds = (time.perf_counter() - t0) / len(chunk)
            for (idx, seed), ep in zip(chunk, played.episodes, strict=True):
                yield _record(idx, seed, ep, seconds)

    def close(self) -> None:
        self.engine.close()


def _record(idx: int, seed: int, ep: Any, seconds: float) -> EpisodeRecord:
    turns = [] if ep.placeholder else ep.turns
    return EpisodeRecord(
        idx,
        seed,
        ep.task_id,
        bool(ep.success),
        float(sum(t.reward for t in turns)),
        len(turns),
        sum(not t.valid for t in turns),
        ep.truncated,
        dict(ep.metrics),
        ep.error if ep.failed else None,
        seconds,
    )


def _hf_backend(path: str, device: str) -> tuple[Any, Any]:
    from agentgym_r1.adapters.backends.hf import HFBackend
    from agentgym_r1.adapters.loading import load_model, load_tokenizer
    from agentgym_r1.adapters.tokenize import ChatTokenizer

    require("transformers", "train", "the hf: policy")
    try:
        chat = ChatTokenizer(load_tokenizer(path, "model"))
        model = load_model(path, "model", device=device)
    except (OSError, ValueError) as e:  # ConfigError (no chat template, no eos) is a ValueError
        raise PolicyError(f"hf:{path} cannot be loaded: {e}") from e
    return HFBackend(model, chat), chat


def _vllm_backend(path: str) -> tuple[Any, Any]:
    from agentgym_r1.adapters.backends.vllm import VLLMBackend
    from agentgym_r1.adapters.loading import load_tokenizer
    from agentgym_r1.adapters.tokenize import ChatTokenizer

    vllm = require("vllm", "vllm", "the vllm: policy")
    try:
        chat = ChatTokenizer(load_tokenizer(path, "model"))
        llm = vllm.LLM(model=path)
    except (OSError, ValueError, RuntimeError) as e:
        raise PolicyError(f"vllm:{path} cannot be loaded: {e}") from e
    return VLLMBackend(chat, llm=llm), chat
