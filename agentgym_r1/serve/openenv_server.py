"""Any registered env as an OpenEnv environment, served by openenv-core's own server (extra ``serve``).

``agentgym-r1 serve env AgentR1/GSM8K-v0 source=synthetic --port 8000`` runs :func:`make_app` with uvicorn. The app is
openenv-core's ``create_app`` (``openenv/core/env_server/http_server.py``): ``POST /reset``, ``POST /step``,
``GET /state``, ``GET /schema``, ``GET /metadata``, ``GET /health`` and the ``/ws`` session endpoint, plus
``GET /sessions`` (how many envs are live, the cap and the idle timeout). The wire models are in
:mod:`agentgym_r1.envs.openenv_wire`; ``AgentR1/Remote-v0`` (:mod:`agentgym_r1.envs.remote`) plays a served env
through the Gymnasium API.

Sessions. Each ``/ws`` connection is one session with its own env (openenv's ``HTTPEnvServer._create_session`` calls
the factory once per connection and runs every call of that session on one executor thread; envs that are not
thread-safe, :data:`SINGLE_THREAD_ENVS`, share one thread for every session instead). At most
``max_sessions`` are open (openenv's ``max_concurrent_envs``): one more gets openenv's ``CAPACITY_REACHED`` error and
the socket is closed with code 1013 (try again later). A session ends when its client disconnects (openenv destroys
it in the handler's ``finally``) or after ``idle_timeout_s`` without a message: :class:`SessionGuard` then ends the
connection (close code 1001). openenv's own reaper (``ConcurrencyConfig.session_timeout``) is also set, as a backstop
for sessions opened over ``/mcp`` without a socket; alone it would close the env but leave the socket's handler
running (``_reap_idle_sessions`` destroys the session, not the connection).

The HTTP ``/reset`` and ``/step`` endpoints are stateless in openenv-core: each request builds a new env and closes
it (``reset_handler``/``step_handler``), so ``/step`` answers 409 (no episode) and episodes are played over ``/ws``.

Bad input. An action that is not ``{"text": str}`` is refused by openenv's validation (422 / ``VALIDATION_ERROR``).
Bad reset arguments (a ``seed`` that is not an int >= 0, ``options`` that are not an object, options the env refuses)
answer 422 (``EXECUTION_ERROR`` on ``/ws``, the message naming the ``ConfigError``) before the env sees them, and the
session and its live episode go on. A ``/ws`` frame openenv's handler cannot read (binary, not JSON, not an object)
is answered with ``INVALID_JSON`` or ``VALIDATION_ERROR`` and the session goes on (:class:`SessionGuard`). Every
string a reply carries is written as UTF-8 (lone surrogates, from a model's ``"\\ud800"`` JSON escape, become
U+FFFD), so a finished episode's result always reaches the client. An env that raises in ``step`` ends that session's
episode: the observation is ``done`` with ``info["env_error"]`` and the server goes on. Every refusal is logged on the
``agentgym_r1.serve`` logger.
"""

# No ``from __future__ import annotations``: FastAPI reads endpoint annotations at runtime.
import asyncio
import contextlib
import functools
import json
import logging
import reprlib
import threading
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentgym_r1.error import AgentGymError, ConfigError, ResetNeeded, require

require("openenv.core", "serve", "agentgym-r1 serve env")
require("uvicorn", "serve", "agentgym-r1 serve env")
from openenv.core.env_server.http_server import create_app  # noqa: E402
from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.types import (  # noqa: E402
    ConcurrencyConfig,
    EnvironmentMetadata,
    WSErrorCode,
    WSErrorResponse,
)

from agentgym_r1.core.spaces import utf8_safe  # noqa: E402
from agentgym_r1.envs.openenv_wire import (  # noqa: E402
    AgentAction,
    AgentObservation,
    AgentState,
    jsonable,
    task_to_wire,
    transcript_pieces,
)

__all__ = [
    "SINGLE_THREAD_ENVS",
    "GymEnvironment",
    "RequestError",
    "SerialGymEnvironment",
    "ServedEnv",
    "SessionGuard",
    "make_app",
    "parse_env_kwargs",
    "serve",
]

log = logging.getLogger("agentgym_r1.serve")

CLOSE_IDLE, CLOSE_INTERNAL, CLOSE_TRY_LATER = 1001, 1011, 1013


class RequestError(AgentGymError):
    """A request the served env refuses (bad reset options, a step with no episode); ``status`` is its HTTP code."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ServedEnv:
    """What a server serves: the env id and kwargs, what a probe instance said about it, and its live envs."""

    env_id: str
    kwargs: dict[str, Any]
    max_action_chars: int
    max_observation_chars: int
    description: str
    max_sessions: int
    idle_timeout_s: float | None
    live: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def opened(self, delta: int) -> None:
        with self.lock:
            self.live += delta


class GymEnvironment(Environment[AgentAction, AgentObservation, AgentState]):
    """One session's env: a Gymnasium env made on the first reset, adapted to openenv's ``Environment``.

    Sessions share nothing mutable (each has its own ``gym.make`` instance), hence ``SUPPORTS_CONCURRENT_SESSIONS``,
    which openenv-core requires for ``max_concurrent_envs > 1`` (``HTTPEnvServer._validate_concurrency_safety``).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, served: ServedEnv) -> None:
        super().__init__()
        self.served = served
        self.env: gym.Env | None = None
        self.episode_id: str | None = None
        self.done = True
        self.closed = False
        self.seen = (0, 0)  # transcript spans and messages already sent
        served.opened(+1)

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> AgentObservation:
        if kwargs:  # openenv passes every key a signature with **kwargs accepts (``_get_valid_kwargs``)
            raise self.refuse(
                ConfigError(f"reset got unknown argument(s) {sorted(kwargs)}; it takes seed, episode_id and options"),
                422,
            )
        if self.closed:
            raise self.refuse(ConfigError("this session was closed (idle timeout or disconnect); reconnect"), 409)
        bad = reset_arguments_error(seed, episode_id, options)
        if bad is not None:  # refused before the env sees them: the live episode goes on
            raise self.refuse(bad, 422)
        try:
            if self.env is None:  # made here, in the session's executor thread, not when the socket opens
                self.env = gym.make(self.served.env_id, **self.served.kwargs)
            obs, info = self.env.reset(seed=seed, options=options)
        except AgentGymError as e:
            raise self.refuse(e, 422) from e
        except Exception as e:  # the env crashed: drop it, the next reset makes a fresh one; the server goes on
            log.exception("%s raised in reset", self.served.env_id)
            self.drop_env()
            raise self.refuse(e, 500, f"the served env {self.served.env_id} raised in reset") from e
        self.episode_id, self.done, self.seen = episode_id, False, (0, 0)
        return self.observation(obs, None, False, False, info)

    def step(self, action: AgentAction, timeout_s: float | None = None, **kwargs: Any) -> AgentObservation:
        if self.env is None or self.done:
            raise self.refuse(
                ResetNeeded(
                    "call reset() before step(), and again after the episode ended (the HTTP /step endpoint is "
                    "stateless in openenv-core: play episodes over the /ws session endpoint)"
                ),
                409,
            )
        try:
            obs, reward, terminated, truncated, info = self.env.step(action.text)
        except AgentGymError as e:
            raise self.refuse(e, 422) from e
        except Exception as e:  # ends this session's episode with the error in the response, never the server
            log.exception("%s raised in step", self.served.env_id)
            self.drop_env()
            message = utf8_safe(f"the served env {self.served.env_id} raised in step: {type(e).__name__}: {e}")
            return AgentObservation(done=True, reward=0.0, info={"env_error": message}, metadata={"env_error": message})
        self.done = bool(terminated or truncated)
        return self.observation(obs, float(reward), bool(terminated), bool(truncated), info)

    def observation(
        self, text: str, reward: float | None, terminated: bool, truncated: bool, info: dict[str, Any]
    ) -> AgentObservation:
        assert self.env is not None
        transcript = self.env.unwrapped.transcript
        pieces = transcript_pieces(transcript, *self.seen)
        self.seen = (len(transcript.spans), len(transcript.message_spans()))
        wire_info = jsonable(info)  # every string that leaves the server is written as UTF-8: jsonable, utf8_safe
        return AgentObservation(
            text=utf8_safe(text),
            reward=reward,
            done=terminated or truncated,
            terminated=terminated,
            truncated=truncated,
            info=wire_info,
            transcript=jsonable(pieces),
            metadata=wire_info,
        )

    @property
    def state(self) -> AgentState:
        env = None if self.env is None else self.env.unwrapped
        grade = getattr(env, "grade", None)
        return AgentState(
            episode_id=self.episode_id,
            step_count=getattr(env, "turn", 0),
            env_id=self.served.env_id,
            max_action_chars=self.served.max_action_chars,
            max_observation_chars=self.served.max_observation_chars,
            turn=getattr(env, "turn", 0),
            done=self.done,
            task=task_to_wire(getattr(env, "task", None)),
            grade=None if grade is None else jsonable(grade),
        )

    def get_metadata(self) -> EnvironmentMetadata:
        from agentgym_r1 import __version__

        return EnvironmentMetadata(
            name=self.served.env_id, description=self.served.description, version=__version__, author="agentgym-r1"
        )

    def drop_env(self) -> None:
        env, self.env, self.done = self.env, None, True
        if env is not None:
            try:
                env.close()
            except Exception:
                log.exception("%s raised in close", self.served.env_id)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.drop_env()
            self.served.opened(-1)

    def refuse(self, error: Exception, status: int, what: str | None = None) -> RequestError:
        message = f"{type(error).__name__}: {error}" if what is None else f"{what}: {type(error).__name__}: {error}"
        message = utf8_safe(message)
        log.warning("refused (%d) on %s: %s", status, self.served.env_id, message)
        return RequestError(message, status)


def reset_arguments_error(seed: Any, episode_id: Any, options: Any) -> ConfigError | None:
    """Why a reset's arguments cannot be used (JSON gives any type), or ``None``. Gymnasium takes a seed that is an
    ``int`` >= 0 (``gymnasium.utils.seeding.np_random``) and ``options`` as a dict."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        return ConfigError(f"seed must be an integer >= 0 or null, got {reprlib.repr(seed)}")
    if options is not None and not isinstance(options, dict):
        return ConfigError(
            f"options must be a JSON object or null, got {type(options).__name__} {reprlib.repr(options)}"
        )
    if episode_id is not None and not (isinstance(episode_id, str) and len(episode_id) <= 255):
        return ConfigError(
            f"episode_id must be a string of at most 255 characters or null, got {reprlib.repr(episode_id)}"
        )
    return None


class SerialGymEnvironment(GymEnvironment):
    """For envs that are not thread-safe: every session's calls run on one shared thread (openenv-core's
    ``REQUIRES_SINGLE_THREAD_EXECUTOR``, read by ``HTTPEnvServer._detect_single_thread_requirement``)."""

    REQUIRES_SINGLE_THREAD_EXECUTOR = True


# Envs whose instances share state across threads. ALFWorld: TextWorld parses command templates with one
# module-global tatsu parser (``textworld/envs/pddl/textgen/__init__.py``, ``_PARSER``); two sessions resetting at
# once in two threads corrupt its rule stack (``IndexError: pop from empty list``).
SINGLE_THREAD_ENVS = frozenset({"AgentR1/ALFWorld-v0", "AgentR1/ALFWorld-v1"})


class SessionGuard:
    """ASGI middleware on the ``/ws`` endpoint: ends a session idle for ``idle_timeout_s``, logs every error the
    session answers, and closes refused sockets with a status code (1013 at the session cap, 1011 when the env could
    not be made) where openenv-core closes them all with 1000."""

    def __init__(self, app: Any, idle_timeout_s: float | None = None, max_sessions: int = 0) -> None:
        self.app, self.idle_timeout_s, self.max_sessions = app, idle_timeout_s, max_sessions

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket" or scope.get("path") != "/ws":
            return await self.app(scope, receive, send)
        close: dict[str, Any] = {}

        async def timed_receive() -> dict[str, Any]:
            if self.idle_timeout_s is None:
                return await receive()
            try:
                return await asyncio.wait_for(receive(), self.idle_timeout_s)
            except TimeoutError:
                log.info("closing a /ws session idle for %.0f s", self.idle_timeout_s)
                close.update(code=CLOSE_IDLE, reason=f"session idle for more than {self.idle_timeout_s:g} s")
                return {"type": "websocket.disconnect", "code": CLOSE_IDLE}

        async def guarded_receive() -> dict[str, Any]:
            # openenv's handler reads frames with ``receive_text`` (a binary frame raises KeyError) and parses them
            # outside its try for bad messages (a JSON array raises AttributeError on ``.get``; 5,000 digits or deep
            # nesting raise ValueError or RecursionError, not JSONDecodeError): each ends the session. Such a frame
            # is answered here with an error and the session goes on.
            while True:
                message = await timed_receive()
                refusal = refusal_of_frame(message)
                if refusal is None:
                    return message
                await logging_send({"type": "websocket.send", "text": refusal})

        async def logging_send(message: dict[str, Any]) -> None:
            if message["type"] == "websocket.send" and message.get("text", "").startswith('{"type":"error"'):
                data = json.loads(message["text"]).get("data", {})
                code = data.get("code")
                log.warning("/ws session answered %s: %s", code, data.get("message"))
                if code == WSErrorCode.CAPACITY_REACHED:
                    close.update(code=CLOSE_TRY_LATER, reason=f"server at its session cap ({self.max_sessions})")
                elif code == WSErrorCode.FACTORY_ERROR:
                    close.update(code=CLOSE_INTERNAL, reason="the env could not be made")
            elif message["type"] == "websocket.close":
                # openenv's handler closes in its ``finally`` and catches only RuntimeError; a client that already
                # left makes uvicorn raise ClientDisconnected (an OSError): the close is then a no-op, not an error.
                with contextlib.suppress(OSError):
                    await send({**message, **close})
                return
            await send(message)

        await self.app(scope, guarded_receive, logging_send)


def refusal_of_frame(message: dict[str, Any]) -> str | None:
    """The error to answer for a ``/ws`` frame openenv's handler cannot read (binary, not JSON, not an object),
    else ``None``."""
    if message["type"] != "websocket.receive":
        return None
    text = message.get("text")
    if text is None:
        error = {
            "message": "binary frames are not read: send each message as a JSON text frame",
            "code": WSErrorCode.INVALID_JSON,
        }
    else:
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError) as e:
            error = {"message": f"Invalid JSON: {type(e).__name__}: {str(e)[:200]}", "code": WSErrorCode.INVALID_JSON}
        else:
            if isinstance(parsed, dict):
                return None
            error = {
                "message": f'a message is a JSON object ({{"type": ..., "data": ...}}), got a {type(parsed).__name__}',
                "code": WSErrorCode.VALIDATION_ERROR,
            }
    return WSErrorResponse(data=error).model_dump_json()


def probe(env_id: str, kwargs: dict[str, Any]) -> tuple[int, int, str]:
    """Make one env to check the id and kwargs before serving; its length bounds and card's first line."""
    import agentgym_r1

    if env_id not in gym.registry or env_id == agentgym_r1.envs.REMOTE_ENV_ID:
        raise ConfigError(f"unknown env id {env_id!r}; the ids that can be served are {agentgym_r1.env_ids()}")
    try:
        env = gym.make(env_id, **kwargs)
    except AgentGymError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{env_id} cannot be made with {kwargs}: {e}") from e
    try:
        doc = (type(env.unwrapped).__doc__ or env_id).strip().splitlines()[0]
        return env.action_space.max_length, env.observation_space.max_length, doc
    finally:
        env.close()


def make_app(
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    max_sessions: int = 16,
    idle_timeout_s: float | None = 300.0,
    single_thread: bool | None = None,
) -> Any:
    """openenv-core's app serving ``env_id`` (made with ``env_kwargs``) to at most ``max_sessions`` sessions.

    ``single_thread`` runs every session's env calls on one thread (default: for :data:`SINGLE_THREAD_ENVS`).

    Raises :class:`~agentgym_r1.error.ConfigError` before serving for an unknown id, kwargs the env refuses, a cap
    below 1 or a timeout that is not positive."""
    if max_sessions < 1:
        raise ConfigError(f"max_sessions must be >= 1, got {max_sessions}")
    if idle_timeout_s is not None and not idle_timeout_s > 0:
        raise ConfigError(f"idle_timeout_s must be > 0 or None, got {idle_timeout_s}")
    kwargs = dict(env_kwargs or {})
    max_action, max_obs, doc = probe(env_id, kwargs)
    served = ServedEnv(env_id, kwargs, max_action, max_obs, doc, max_sessions, idle_timeout_s)
    if single_thread is None:
        single_thread = env_id in SINGLE_THREAD_ENVS
    cls = SerialGymEnvironment if single_thread else GymEnvironment
    app = create_app(
        functools.partial(cls, served),
        AgentAction,
        AgentObservation,
        env_name=env_id,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout_s),
    )
    add_routes(app, served)
    app.add_middleware(SessionGuard, idle_timeout_s=idle_timeout_s, max_sessions=max_sessions)
    app.state.served = served
    return app


def add_routes(app: Any, served: ServedEnv) -> None:
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    from agentgym_r1.core.http import invalid_without_input

    async def refused(request: Any, exc: RequestError) -> Any:
        return JSONResponse(status_code=exc.status, content={"detail": str(exc)})

    app.add_exception_handler(RequestError, refused)
    app.add_exception_handler(RequestValidationError, invalid_without_input)

    @app.get("/sessions", tags=["Health"], summary="Live envs, the session cap and the idle timeout")
    def sessions() -> dict[str, Any]:
        return {
            "env_id": served.env_id,
            "live_envs": served.live,
            "max_sessions": served.max_sessions,
            "idle_timeout_s": served.idle_timeout_s,
        }


def parse_env_kwargs(items: list[str]) -> dict[str, Any]:
    """``["source=synthetic", "num_games=3"]`` -> ``{"source": "synthetic", "num_games": 3}`` (values read as JSON
    where they parse, else kept as strings)."""
    kwargs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ConfigError(f"env kwargs are key=value pairs (e.g. source=synthetic); got {item!r}")
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    return kwargs


def serve(
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_sessions: int = 16,
    idle_timeout_s: float | None = 300.0,
    single_thread: bool | None = None,
    log_level: str = "warning",
) -> None:
    """Serve ``env_id`` until interrupted."""
    import uvicorn

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        app = make_app(
            env_id, env_kwargs, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s, single_thread=single_thread
        )
    except AgentGymError as e:
        log.error("not serving %s: %s", env_id, e)
        raise
    log.info("serving %s on %s:%d (max %d sessions)", env_id, host, port, max_sessions)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
