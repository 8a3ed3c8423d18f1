"""GRPO on any agent: rollouts that are an agent function's sessions against the proxy (#40).

``AgentGRPOTrainer(model, args, tokenizer, rollouts=AgentRollouts(args, tokenizer, agent, reward_fn))``: each
``rollout_func`` call starts (once) a :class:`~agentgym_r1.adapters.proxy_server.Proxy` on 127.0.0.1 around the
generation backend of the step (the policy unwrapped for generation, or TRL's vLLM engine), runs
``agent(base_url, session_id, task)`` for every prompt of the batch in threads (``task`` is the prompt's JSON reset,
``{"seed": ...}``; the agent passes ``session_id`` as its API key), closes each session with ``reward_fn(messages,
task)`` unless the agent posted a reward itself, and trains on the sessions' rows
(:func:`agentgym_r1.adapters.proxy.batch_of`: the engine's row type).

Every call samples at the trainer's ``temperature`` and ``top_p`` whatever the agent asks, so the log-probabilities
are those the loss recomputes; a call's default ``max_tokens`` is ``max_new_tokens``, and a session may grow to
``max_completion_length`` tokens past its first prompt (a call past it is a 400, and the session ends as
``context_limit``). With ``layout: concatenated`` a session whose calls stopped extending each other is a failed
row (never re-tokenized; its reason in the row's error), with ``layout: step`` every session gives step rows. An agent
that raises fails its row (counted by ``max_failed_steps``), unless the session ran out of its token budget.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentgym_r1.adapters.proxy import Session, batch_of
from agentgym_r1.adapters.proxy_server import Proxy
from agentgym_r1.adapters.records import RolloutBatch
from agentgym_r1.error import ConfigError
from agentgym_r1.trainers.common import Rollouts

Agent = Callable[[str, str, dict[str, Any]], Any]
Reward = Callable[[list[dict[str, Any]], dict[str, Any]], float]


class AgentRollouts(Rollouts):
    """:class:`Rollouts` played by ``agent`` through the proxy; see the module docstring. ``max_workers`` agents run
    at once (default: every prompt of the batch)."""

    def __init__(
        self,
        args: Any,
        tokenizer: Any,
        agent: Agent,
        reward_fn: Reward | None = None,
        *,
        max_workers: int | None = None,
        request_timeout_s: float = 300.0,
    ) -> None:
        if not callable(agent):
            raise ConfigError(f"agent must be a function (base_url, session_id, task), got {agent!r}")
        if reward_fn is not None and not callable(reward_fn):
            raise ConfigError(f"reward_fn must be a function (messages, task) -> float, got {reward_fn!r}")
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise ConfigError(f"max_workers must be an int >= 1 or None, got {max_workers!r}")
        super().__init__(args, tokenizer)
        self.agent, self.reward_fn, self.max_workers = agent, reward_fn, max_workers
        self.request_timeout_s = request_timeout_s
        self.proxy: Proxy | None = None

    def serving(self, backend: Any) -> Proxy:
        """The proxy, generating with ``backend`` (the step's: the policy's weights change between steps)."""
        if self.proxy is None:
            args = self.args
            self.proxy = Proxy(
                backend,
                self.chat,
                "policy",
                max_context=args.max_prompt_tokens + args.max_completion_length,
                session_tokens=args.max_completion_length,
                default_max_tokens=args.max_new_tokens,
                temperature=args.temperature,
                top_p=getattr(args, "top_p", 1.0),
                request_timeout_s=self.request_timeout_s,
            ).start()
        self.proxy.service.queue.backend = backend
        return self.proxy

    def play(self, backend: Any, resets: Sequence[dict[str, Any]]) -> RolloutBatch:
        """One agent session per reset, in order (the samples of a group are consecutive, as TRL repeats them)."""
        proxy = self.serving(self.fixed_backend or backend)
        ids = [f"agent-{uuid.uuid4().hex[:16]}-{i}" for i in range(len(resets))]
        with ThreadPoolExecutor(max_workers=self.max_workers or max(len(resets), 1)) as pool:
            sessions = list(pool.map(lambda a: self.session(proxy, *a), zip(ids, resets, strict=True)))
        return batch_of(sessions, self.args.layout, list(range(len(sessions))), self.chat.pad_token_id)

    def session(self, proxy: Proxy, session_id: str, task: dict[str, Any]) -> Session:
        """Run the agent on ``task`` as session ``session_id``; the closed session, taken out of the proxy."""
        error = None
        try:
            self.agent(proxy.base_url, session_id, task)
        except Exception as e:  # the agent's failure fails its row, never the step
            error = f"the agent raised {type(e).__name__}: {e}"
        try:
            session = proxy.sessions.get(session_id)
        except Exception:  # it made no call: a failed placeholder row
            return Session(session_id, error=error or "the agent made no call")
        budget = session.end_reason == "context_limit"
        failed = error is not None and not budget
        reward_fn = None if self.reward_fn is None or failed else (lambda messages: self.reward_fn(messages, task))
        try:
            proxy.close(
                session_id,
                reward_fn=reward_fn,
                end_reason="env_error" if failed else None,
                error=error,
            )
        except Exception as e:  # a reward function that raises or returns a non-number fails the row
            proxy.sessions.close(session_id, end_reason="env_error", error=f"the reward function raised: {e}")
        (taken,) = proxy.sessions.take([session_id])
        if taken.reward is None and not failed and taken.end_reason != "env_error":
            taken.end_reason, taken.error = "env_error", "no reward: the agent posted none and reward_fn is not set"
        return taken

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        super().close()
