"""``AgentR1/Remote-v0``: a served env (``agentgym-r1 serve env``) played through the Gymnasium API (extra ``serve``).

``gym.make("AgentR1/Remote-v0", url="http://127.0.0.1:8000")`` opens one session on the server (one ``/ws``
connection, through openenv-core's own ``EnvClient``) and plays it like the local env: the same observations,
rewards and ``info`` (spans as :class:`~agentgym_r1.core.transcript.Span`), and ``env.unwrapped.transcript``,
``task`` and ``grade`` rebuilt on this side, so the rollout engine and the leaderboard need no change.
What stays on the server: methods of the env itself (ALFWorld's ``expert_plan``, say) and the env's parser.

Errors are named: :class:`~agentgym_r1.error.SessionLimitError` when the server is at its cap,
:class:`~agentgym_r1.error.RemoteEnvError` when it cannot be reached, answers nothing within ``message_timeout_s``,
closed the session, or its env raised (the engine records that episode as ``env_error``);
``ResetNeeded``/``ConfigError``/``UnknownOptionError`` as the local env raises them. A session the server closed
(idle timeout) is reopened by the next ``reset``; the server's random generator then starts afresh, so pass seeds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from agentgym_r1 import error
from agentgym_r1.core.env import Grade
from agentgym_r1.core.spaces import UnicodeText
from agentgym_r1.core.tasks import Task
from agentgym_r1.core.transcript import Transcript

error.require("openenv.core", "serve", "AgentR1/Remote-v0 (playing a served env)")
from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.env_client import EnvClient  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

from agentgym_r1.envs.openenv_wire import (  # noqa: E402
    AgentAction,
    AgentObservation,
    AgentState,
    info_from_wire,
    task_from_wire,
)

__all__ = ["AgentEnvClient", "RemoteEnv"]

# Errors the server names in its message ("ResetNeeded: ...") that the client raises as the local env would.
_LOCAL_ERRORS: dict[str, type[error.AgentGymError]] = {
    "ResetNeeded": error.ResetNeeded,
    "UnknownOptionError": error.UnknownOptionError,
    "ConfigError": error.ConfigError,
}


class AgentEnvClient(EnvClient[AgentAction, AgentObservation, AgentState]):
    """openenv-core's async ``EnvClient`` for a served agentgym-r1 env (``.sync()`` for a blocking one)."""

    def _step_payload(self, action: AgentAction | str) -> dict[str, Any]:
        return {"text": action.text if isinstance(action, AgentAction) else action}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[AgentObservation]:
        obs = AgentObservation(
            **payload.get("observation", {}), reward=payload.get("reward"), done=payload.get("done", False)
        )
        return StepResult(observation=obs, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> AgentState:
        return AgentState(**payload)


class RemoteEnv(gym.Env[str, str]):
    """A served env behind the Gymnasium API. ``url``: the server (``http://host:port`` or ``ws://host:port``).

    **Description.** One session on an ``agentgym-r1 serve env`` server; whatever env the server serves.

    **Observation / Action / Reward.** The served env's, unchanged: strings, with the same length bounds (read from
    the server), the same rewards and ``info`` (spans back as :class:`~agentgym_r1.core.transcript.Span`).

    **Episode end.** The served env's: its turn limit and ``EpisodeEnd`` apply on the server.

    **Data sources.** The server's (its env kwargs).

    **Version history.** v0: first release (openenv-core 0.3 wire format).
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}  # noqa: RUF012  (Gymnasium's API)

    def __init__(
        self,
        url: str,
        *,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 60.0,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise error.ConfigError(
                f"render_mode {render_mode!r} is not supported; use one of {self.metadata['render_modes']}"
            )
        if not isinstance(url, str) or not url.startswith(("http://", "https://", "ws://", "wss://")):
            raise error.ConfigError(f"url must be the env server's address, e.g. 'http://127.0.0.1:8000'; got {url!r}")
        self.url, self.render_mode = url, render_mode
        self.timeouts = (connect_timeout_s, message_timeout_s)
        self.transcript = Transcript()
        self.turn = 0
        self.client: Any = None
        self.lost = False
        self.cached: dict[str, Any] = {}
        state = self.connect()
        self.env_id = state.env_id
        self.action_space = UnicodeText(state.max_action_chars)
        self.observation_space = UnicodeText(state.max_observation_chars)

    # -- the session ------------------------------------------------------------------------------------------------
    def connect(self) -> AgentState:
        """Open a session (one ``/ws`` connection); a server at its cap raises :class:`SessionLimitError`."""
        self.disconnect()
        self.lost = False
        self.client = AgentEnvClient(
            self.url, connect_timeout_s=self.timeouts[0], message_timeout_s=self.timeouts[1]
        ).sync()
        try:
            return self.call(self.client.state)
        except BaseException:
            self.disconnect()
            raise

    def disconnect(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.close()

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn`` on the session, with the server's and the transport's failures as named errors."""
        if self.client is None:
            raise error.RemoteEnvError(f"the session with {self.url} is closed")
        try:
            return fn(*args, **kwargs)
        except ConnectionClosed as e:
            self.lost = True
            reason = e.rcvd.reason if e.rcvd is not None and e.rcvd.reason else "the connection was closed"
            if e.rcvd is not None and e.rcvd.code == 1013:  # the server's SessionGuard: at its session cap
                raise error.SessionLimitError(
                    f"{self.url}: {reason}. Close other sessions or start the server with a larger --max-sessions"
                ) from e
            raise error.RemoteEnvError(f"{self.url} closed the session: {reason}") from e
        except ConnectionError as e:
            raise error.RemoteEnvError(f"cannot reach the env server at {self.url}: {e}") from e
        except TimeoutError as e:
            raise error.RemoteEnvError(
                f"the env server at {self.url} did not answer within {self.timeouts[1]:g} s (message_timeout_s)"
            ) from e
        except RuntimeError as e:  # openenv's client: "Server error: {message} (code: {code})"
            raise server_error(self.url, str(e)) from e

    # -- Gymnasium API ----------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        try:
            result = self.call(self.client.reset, seed=seed, options=options)
        except error.RemoteEnvError:
            if not self.lost:
                raise
            self.connect()  # the server closed an idle session between episodes: open a new one
            result = self.call(self.client.reset, seed=seed, options=options)
        obs: AgentObservation = result.observation
        self.transcript, self.turn, self.cached = Transcript(), 0, {}
        self.append(obs)
        return obs.text, info_from_wire(obs.info)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not isinstance(action, str):
            raise TypeError(f"actions are strings; got {type(action).__name__}. Decode the model output first.")
        result = self.call(self.client.step, AgentAction(text=action))
        obs: AgentObservation = result.observation
        self.cached = {}
        if "env_error" in obs.info:
            raise error.RemoteEnvError(obs.info["env_error"])
        self.append(obs)
        self.turn += 1
        return obs.text, float(result.reward or 0.0), obs.terminated, obs.truncated, info_from_wire(obs.info)

    def render(self) -> str | None:
        return self.transcript.text if self.render_mode == "ansi" else None

    def close(self) -> None:
        self.disconnect()
        super().close()

    # -- what the engine and the leaderboard read from env.unwrapped --------------------------------------------------
    @property
    def task(self) -> Task | None:
        return task_from_wire(self.state().task)

    @property
    def grade(self) -> Grade:
        g = self.state().grade or {"score": 0.0, "success": False, "metrics": {}}
        return Grade(float(g["score"]), bool(g["success"]), dict(g["metrics"]))

    def state(self) -> AgentState:
        """The session's state (``GET``-free: asked over the session), cached until the next reset or step."""
        if "state" not in self.cached:
            self.cached["state"] = self.call(self.client.state)
        return self.cached["state"]

    def append(self, obs: AgentObservation) -> None:
        for piece in obs.transcript:
            self.transcript.append(piece["source"], piece["text"], role=piece["role"], content=piece["content"])


def server_error(url: str, text: str) -> error.AgentGymError:
    """The named error for openenv's ``RuntimeError("Server error: {message} (code: {code})")``."""
    body, _, code = text.removeprefix("Server error: ").rpartition(" (code: ")
    code = code.removesuffix(")")
    if code == "CAPACITY_REACHED":
        return error.SessionLimitError(
            f"{url}: {body.rstrip('.')}. Close other sessions or start the server with a larger --max-sessions"
        )
    name, sep, rest = body.partition(": ")
    if sep and name in _LOCAL_ERRORS:
        return _LOCAL_ERRORS[name](rest)
    return error.RemoteEnvError(f"{url} answered {code or 'an error'}: {body or text}")
