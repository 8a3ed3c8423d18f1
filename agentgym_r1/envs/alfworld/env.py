"""``AgentR1/ALFWorld-v1`` (and ``-v0``): ALFWorld's household games on the real TextWorld engine."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from agentgym_r1.core.env import Env, EnvMessage, Grade, Turn, finite_option, init_options, reject_unknown
from agentgym_r1.core.native import make_parser
from agentgym_r1.core.parsers import ActionParser, with_call_example
from agentgym_r1.core.tasks import Task
from agentgym_r1.envs.alfworld.commands import ACT_TOOL, ReadAction, explain, read_action
from agentgym_r1.envs.alfworld.compiled import GameStore
from agentgym_r1.envs.alfworld.data import GeneratedGames, difficulty_of, load_source, task_type_of_game
from agentgym_r1.envs.alfworld.engine import check_engine, import_textworld
from agentgym_r1.envs.alfworld.expert import plan_for
from agentgym_r1.envs.alfworld.fast import make_engine

INSTRUCTIONS = (
    "You are in a household. Reach the goal in the task with text commands, one per turn: look, inventory, "
    "go to (receptacle), open/close (receptacle), take (object) from (receptacle), put or move (object) in/on/to "
    "(receptacle), examine (something), use (object), heat/cool/clean (object) with (receptacle). Write the "
    "command as plain text (go to desk 1), or call the tool act as "
    '<tool_call>{"name": "act", "arguments": {"command": "go to desk 1"}}</tool_call>.'
)


# TextWorld is not thread-safe: it parses grammar templates with one module-global tatsu parser
# (``textworld/envs/pddl/textgen/__init__.py``: ``_PARSER``, used by ``parse_textgen`` on every ``derive``), and
# ``PddlEnv.step``/``_gather_infos`` derive text at every step; two envs stepping in two threads corrupt its rule
# stack (``IndexError: pop from empty list``) or mix their texts. Every use of TextWorld by these envs (loading games,
# reset, step, planning) holds this process-wide lock; for parallel envs use processes (``env_backend="process"``).
TEXTWORLD_LOCK = threading.RLock()
_T = TypeVar("_T", bound=Callable[..., Any])


def _serial(method: _T) -> _T:
    """``method`` run under :data:`TEXTWORLD_LOCK`."""

    @functools.wraps(method)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with TEXTWORLD_LOCK:
            return method(*args, **kwargs)

    return cast(_T, locked)


class ALFWorldEnv(Env):
    """ALFWorld's text household tasks, played on TextWorld's PDDL engine (fast-downward underneath).

    **Description.** One game per episode, from one of ALFWorld's six task types: pick and place, look at an object
    in light, clean, heat or cool an object and place it, pick two objects and place them. The agent moves between
    receptacles, opens them, takes, puts, heats, cools, cleans and uses objects with text commands.

    **Observation.** At reset: ``system_prompt`` (default :data:`INSTRUCTIONS`: the commands and the ``act`` tool;
    ``""`` for none), then ALFWorld's intro (the room and "Your task is to: ..."). After a command: the engine's
    feedback ("You arrive at ...", "Nothing happens."), wrapped in ``<tool_response>`` when the command came as a tool
    call. After an invalid action: what was wrong.

    **Action.** One ALFWorld command as plain text (``go to desk 1``; case and spaces are normalised, a leading
    ``>`` or ``Action:`` is dropped), or one Hermes tool call ``<tool_call>{"name": "act", "arguments":
    {"command": "go to desk 1"}}</tool_call>``; ``parser="auto"`` (or an
    :class:`~agentgym_r1.core.parsers.ActionParser`) reads the call in the model family's own format instead (the
    rollout engine picks it from the tokenizer). ``think: ...`` (ReAct) is answered ``OK.``. Empty text, several
    commands, other languages and broken tool calls are invalid (``format`` penalty); a command that does nothing
    ("Nothing happens.": not admissible now, unknown object or verb) is marked ``valid=False`` with the reason.

    **Reward.** ``outcome`` 1 when the game is won. ``process``: ``step_penalty`` on every step (default 0).
    ``format``: ``format_penalty`` for an unreadable action (default -0.1). ``metrics``: ``won``.
    ``info["env"]``: ``admissible_commands``, ``task_type``, ``game_file``, ``task_id``, ``won``, and ``difficulty``
    on generated games.

    **Episode end.** Terminated when won; truncated at the turn limit (50).

    **Data sources.** ``source="generated"`` (default; alias ``"synthetic"``): new games from
    :mod:`~agentgym_r1.envs.alfworld.generator`, seeded by ``seed``, unlimited or the first ``num_games``, each
    solved by the planner and carrying its expert plan; a new game takes about a second to make and is cached as a
    file under ``cache_dir`` (default ``~/.cache/agentgym-r1/alfworld``, or ``$AGENTGYM_R1_CACHE``).
    ``source="alfworld"``: the official data under ``$ALFWORLD_DATA`` (``alfworld-download``), or a path to a directory
    in that layout; ``split`` is one of ``train``, ``valid_seen``, ``valid_unseen``. ``task_types`` filters both (names
    or ALFWorld's ids 1-6). ``difficulty`` (generated games): ``"easy"`` (default, the games above), ``"medium"``,
    ``"hard"`` (rooms of ALFRED's size and beyond, goal objects hidden in closed receptacles, more distractors; solvable
    by construction, made without the planner) or a dict of :class:`~agentgym_r1.envs.alfworld.generator.Knobs`;
    recorded in ``info["env"]["difficulty"]``.

    **Engine.** ``engine="fast"`` (default): :mod:`~agentgym_r1.envs.alfworld.fast`, a state machine compiled per
    game that writes TextWorld's text step for step (tested against it); ``engine="textworld"``: TextWorld's own
    ``PddlEnv`` on fast-downward, for parity runs. A game is compiled on its first reset in a process (0.3-1.3 s,
    fast-downward's translation) and kept on disk for every later process
    (:mod:`~agentgym_r1.envs.alfworld.compiled`): ``compile_cache`` is its directory (default
    ``$AGENTGYM_R1_COMPILE_CACHE``, else ``alfworld/compiled`` under ``$AGENTGYM_R1_CACHE`` or the user's cache
    directory, ``~/.cache/agentgym-r1`` on Linux), or ``False`` for none;
    :func:`~agentgym_r1.envs.alfworld.precompile.precompile` fills it ahead.

    **Version history.** v1: the first observation opens with :data:`INSTRUCTIONS` (``system_prompt`` defaults to
    them). v0: first release; the first observation is the game's intro alone (``system_prompt=""``).
    """

    reset_options = frozenset({"task_id", "index", "game_file"})

    def __init__(
        self,
        source: str = "generated",
        split: str = "valid_unseen",
        *,
        task_types: Any = None,
        seed: int = 0,
        num_games: int | None = None,
        cache_dir: str | None = None,
        difficulty: Any = "easy",
        step_penalty: float = 0.0,
        format_penalty: float = -0.1,
        system_prompt: str | None = None,
        render_mode: str | None = None,
        engine: str = "fast",
        parser: str | ActionParser = "hermes",
        compile_cache: str | os.PathLike[str] | bool | None = None,
        **kwargs: Any,
    ) -> None:
        reject_unknown(type(self).__name__, kwargs, init_options(type(self)))
        self.parser = make_parser(parser, answer_formats=())  # before any work: a bad name raises ConfigError
        self.engine_name = check_engine(engine)
        self.store = GameStore.resolve(compile_cache)
        import_textworld()
        super().__init__(render_mode=render_mode)
        self.difficulty, knobs = difficulty_of(source, difficulty)
        with TEXTWORLD_LOCK:
            self.games = load_source(source, split, task_types, seed, num_games, cache_dir, knobs)
        self.step_penalty = finite_option("step_penalty", step_penalty)
        self.format_penalty = finite_option("format_penalty", format_penalty)
        self.system_prompt = (
            with_call_example(INSTRUCTIONS, self.parser, "act", {"command": "go to desk 1"})
            if system_prompt is None
            else system_prompt
        )
        self._engine: Any = None
        self._state: Any = None
        self._played: list[str] = []  # the commands the engine applied this episode
        self._initial_plan: list[str] | None = None
        self.task: Task | None = None

    # -- episode ----------------------------------------------------------------------------------------------------
    @_serial
    def _begin(self, options: dict[str, Any]) -> list[EnvMessage]:
        if "game_file" in options:
            path = str(options["game_file"])
            self.task = Task(path, "", None, {"game_file": path, "task_type": None})
        else:
            self.task = self.pick(self.games, options)
        engine = self.engine
        game = engine.compile(self.task.meta["game_file"])
        self._state = engine.reset(game)
        self._played, self._initial_plan = [], None
        goal = self._state.feedback.rpartition("Your task is to: ")[2].strip()
        self.task = Task(
            self.task.id,
            goal,
            None,
            {**self.task.meta, "task_type": self.task.meta.get("task_type") or task_type_of_game(game)},
        )
        messages = [EnvMessage("system", self.system_prompt), EnvMessage(None, "\n\n")] if self.system_prompt else []
        return [*messages, EnvMessage("user", self._state.feedback)]

    @_serial
    def _act(self, action: str) -> Turn:
        read = read_action(action, self.parser)
        if read.kind == "invalid":
            return self._reply(
                read,
                read.error or "",
                Turn(
                    read.to_info(), valid=False, error=read.error, process=self.step_penalty, format=self.format_penalty
                ),
            )
        turn = Turn(read.to_info(), process=self.step_penalty)
        if read.kind == "think":
            return self._reply(read, "OK.", turn)
        assert read.command is not None and self.engine.game is not None
        if read.command not in self._state["admissible_commands"]:
            text, turn.error = explain(read.command, self._state["command_templates"], self.engine.game.names)
            turn.valid = False
            return self._reply(read, text, turn)
        self._state = self.engine.step(read.command)
        self._played.append(read.command)
        if self._state["won"]:
            self.grade = Grade(1.0, True, {"won": 1.0})
            turn.outcome, turn.terminated = 1.0, True
        return self._reply(read, self._state.feedback, turn)

    def _reply(self, read: ReadAction, text: str, turn: Turn) -> Turn:
        if read.via_tool:
            turn.messages = [EnvMessage("tool", self.parser.render_result("act", text), text)]
        else:
            turn.messages = [EnvMessage("user", text)]
        return turn

    def no_grade(self) -> Grade:
        return Grade(0.0, False, {"won": 0.0})

    def env_info(self) -> dict[str, Any]:
        state, task = self._state, self.task
        return {
            "admissible_commands": list(state["admissible_commands"]) if state is not None else [],
            "task_type": task.meta.get("task_type") if task is not None else None,
            "game_file": task.meta.get("game_file") if task is not None else None,
            "task_id": task.id if task is not None else None,
            "won": bool(state["won"]) if state is not None else False,
            **({"difficulty": self.difficulty} if isinstance(self.games, GeneratedGames) else {}),
        }

    # -- helpers ----------------------------------------------------------------------------------------------------
    @property
    def engine(self) -> Any:
        """The engine (``engine=``: ``"fast"`` or ``"textworld"``), started on first use (and again after
        :meth:`close`)."""
        if self._engine is None:
            with TEXTWORLD_LOCK:
                self._engine = make_engine(self.engine_name, self.store)
        return self._engine

    @_serial
    def expert_plan(self, planner: bool = False) -> list[str]:
        """Commands from the current state to the goal. While the episode has followed it, the rest of the game's
        walkthrough (generated games) or of the scripted full-knowledge expert's plan
        (:mod:`~agentgym_r1.envs.alfworld.expert`); after a detour, or with ``planner=True``, fast-downward's plan
        from the current state (ALFWorld's planner expert; up to a minute on a large real room)."""
        if self._state is None or self._engine is None or self._engine.game is None:
            return []
        if not planner:
            if self._initial_plan is None:
                task_type = self.task.meta.get("task_type") if self.task else None
                self._initial_plan = plan_for(self._engine.game, task_type) or []
            plan, done = self._initial_plan, len(self._played)
            if done < len(plan) and plan[:done] == self._played:
                return plan[done:]
        return self.engine.replan()

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The ``act`` tool in OpenAI function format, for chat templates that take ``tools=``."""
        return [ACT_TOOL]

    def close(self) -> None:
        if self._engine is not None:
            with TEXTWORLD_LOCK:
                self._engine.close()
            self._engine = None
        self._state = None
        self._needs_reset = True  # the game is gone: step() raises ResetNeeded until the next reset
        super().close()
