"""agentgym-r1: text Gymnasium environments, rollouts and TRL adapters for training LLM agents with RL.

``import agentgym_r1`` registers the ``AgentR1/*`` env ids and loads neither torch nor transformers.
"""

from agentgym_r1 import error
from agentgym_r1.core import BaseTool, Env, FunctionTool, Grade, Span, Task, ToolResult, Transcript, tool
from agentgym_r1.envs import env_ids, register_envs

__version__ = "0.1.0"

register_envs()

__all__ = [
    "BaseTool",
    "Env",
    "FunctionTool",
    "Grade",
    "Span",
    "Task",
    "ToolResult",
    "Transcript",
    "__version__",
    "env_ids",
    "error",
    "tool",
]
