"""The contract every env shares: the base class, spaces, transcript, tools, parsers, tasks and rewards."""

from agentgym_r1.core.env import INFO_KEYS, Env, EnvMessage, Grade, Turn
from agentgym_r1.core.parsers import CommandParser, HermesParser, ParsedAction, TagParser, ToolCall
from agentgym_r1.core.spaces import UnicodeText
from agentgym_r1.core.tasks import GeneratedSource, ListSource, Task, TaskSource
from agentgym_r1.core.tools import BaseTool, FunctionTool, ToolResult, call_tool, tool
from agentgym_r1.core.transcript import Message, Span, Transcript

__all__ = [
    "INFO_KEYS",
    "BaseTool",
    "CommandParser",
    "Env",
    "EnvMessage",
    "FunctionTool",
    "GeneratedSource",
    "Grade",
    "HermesParser",
    "ListSource",
    "Message",
    "ParsedAction",
    "Span",
    "TagParser",
    "Task",
    "TaskSource",
    "ToolCall",
    "ToolResult",
    "Transcript",
    "Turn",
    "UnicodeText",
    "call_tool",
    "tool",
]
