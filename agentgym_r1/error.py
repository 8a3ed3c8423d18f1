"""The exception hierarchy.

Bad input from a *model* is never an exception: it becomes an error observation and a penalty. These errors are for
bad input from a *programmer*: a wrong config, missing data, a missing extra. Each message says what was given and
how to fix it.
"""

from __future__ import annotations

from gymnasium import error as gym_error


class AgentGymError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(AgentGymError, ValueError):
    """An option, argument or config value that is not valid."""


class TemplateUnsupportedError(ConfigError):
    """A chat template the rollout engine cannot serve (it names the family and what is missing)."""


class UnknownOptionError(ConfigError, TypeError):
    """An env constructor or ``reset`` was given an option it does not know."""


class InvalidToolSchemaError(ConfigError):
    """A tool's ``parameters`` is not a valid JSON schema (or not an object schema)."""


class RewardFunctionError(ConfigError, TypeError):
    """An env's ``reward_fn`` that is not callable, or that returned something other than a number or a ``Grade``
    (the message names the function and what it returned)."""


class ModelFilesError(ConfigError):
    """A model, tokenizer or checkpoint directory whose files are missing, empty, truncated or unreadable (the
    message names the file and what is wrong)."""


class DependencyNotInstalled(AgentGymError, ImportError):
    """An optional extra is needed and missing; the message has the ``pip install`` command."""


class DataSourceError(AgentGymError):
    """A data source that cannot be used."""


class DataNotFoundError(DataSourceError, FileNotFoundError):
    """A file or directory given as a source does not exist."""


class DataSourceUnavailableError(DataSourceError):
    """A remote source (Hugging Face) that is neither reachable nor cached."""


class DataFormatError(DataSourceError, ValueError):
    """A file in a shape the loader does not know."""


class RetrievalError(AgentGymError, RuntimeError):
    """A search that could not be answered (backend down, timeout). Envs show it to the agent; ``step`` never raises
    it."""


class IndexMismatchError(ConfigError):
    """An index on disk was built with another backend, embedding model or corpus than the one asked for."""


class IndexNotFoundError(DataNotFoundError):
    """A retrieval index directory that does not exist or has no manifest."""


class EmbeddingModelNotFoundError(DataNotFoundError):
    """A dense retriever was given an embedding model path that does not exist or holds no model."""


class ResetNeeded(AgentGymError, gym_error.ResetNeeded):
    """``step`` was called before ``reset`` or after the episode ended."""


class ResultsFileError(AgentGymError, OSError):
    """A leaderboard results file that cannot be written or read."""


class StudyError(ConfigError):
    """A study run (a proof or benchmark script) refused before any work: its results could not be trusted."""


class ProtocolError(StudyError):
    """A confirmatory protocol that cannot pin a run: no protocol block, a missing field, a draft, or a run whose seed
    or held-out set the protocol does not list."""


class ProtocolNotCommittedError(ProtocolError):
    """A protocol file that is not in git at ``HEAD`` (or differs from it): it must be committed before the runs."""


class ProtocolCommitError(ProtocolError):
    """A protocol whose ``commit`` is not a commit of the repository or not an ancestor of the code that runs."""


class DirtyTreeError(StudyError):
    """A confirmatory run from a working tree with changes git has not committed: its code is not the protocol's."""


class HeldOutOverlapError(StudyError):
    """A held-out set that shares questions (or, for an entity-disjoint set, entities) with the training tasks."""


class PolicyError(AgentGymError, RuntimeError):
    """A policy that cannot act: a model endpoint that is down, a model path that does not load."""


class PolicyTimeout(PolicyError, TimeoutError):
    """A model that did not answer within its time limit (the episode is recorded as failed and the run goes on)."""


def require(module: str, extra: str, feature: str):
    """Import ``module`` or raise :class:`DependencyNotInstalled` naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise DependencyNotInstalled(
            f"{feature} needs the Python package {module!r}, which is not installed. "
            f'Install it with: pip install "agentgym-r1[{extra}]"'
        ) from e


class RemoteEnvError(AgentGymError, RuntimeError):
    """A served env (``AgentR1/Remote-v0``) that cannot go on: the server is unreachable or did not answer in time,
    closed the session (idle timeout), or its env raised. The message has the server's reason."""


class SessionLimitError(RemoteEnvError):
    """The env server is at its session cap (``agentgym-r1 serve env --max-sessions``)."""


class EnvBackendError(AgentGymError, ConnectionError):
    """An env backend that cannot start: a Ray cluster address that cannot be reached."""


class WorkerTimeout(AgentGymError, TimeoutError):
    """A call to a worker (a tool's or an env's) that did not answer within its time limit; the worker was killed,
    or, for a thread, abandoned."""


class WorkerDied(AgentGymError, RuntimeError):
    """A worker process that exited (killed, out of memory, crashed) before it answered."""


class ToolNotPicklableError(ConfigError):
    """A tool given ``isolation="process"`` that cannot be pickled to its worker process (the message names the tool
    and the fix)."""


class ToolNameClashError(InvalidToolSchemaError):
    """Two tools of one env with the same name: an MCP server's and a Python tool, or two servers' (the message names
    both)."""


class McpServerError(AgentGymError, RuntimeError):
    """An MCP server (``ToolEnv(mcp_servers=...)``) that could not start or be reached when the env was built; the
    message has the command or URL and the server's stderr."""


class SandboxUnavailableError(AgentGymError, RuntimeError):
    """The ``python`` tool's sandbox (bubblewrap) is missing or cannot create its namespaces here; the message says
    why, and how to opt into a plain subprocess with rlimits (which is not isolation)."""
