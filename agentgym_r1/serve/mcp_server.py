"""An env's tools as an MCP server: ``agentgym-r1 serve mcp ENV_ID [KEY=VALUE ...]``.

The env is made once (``gym.make(env_id, **kwargs)``) and its tools (``env.unwrapped.tools``, the
:class:`~agentgym_r1.core.tools.BaseTool` of any env built on ``ToolEnv``) are offered with their JSON schemas. A call
goes through :func:`~agentgym_r1.core.tools.call_tool` (arguments validated, the tool's timeout and isolation, output
truncated), one at a time (an env's tools are not thread-safe), on a worker thread so the server's event loop goes on;
a tool's failure is an ``is_error`` result, never a server error. Served with the ``mcp`` SDK's low-level
:class:`mcp.server.lowlevel.Server` (its ``on_list_tools`` / ``on_call_tool`` handlers take the schemas as they are,
where ``MCPServer`` would derive them from a function's signature) over streamable HTTP (``Server.streamable_http_app``,
run by uvicorn, at ``http://HOST:PORT/mcp``) or stdio (``mcp.server.stdio.stdio_server``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from agentgym_r1.core.tools import BaseTool, ToolResult, call_tool
from agentgym_r1.error import AgentGymError, ConfigError, require

log = logging.getLogger(__name__)
TRANSPORTS = ("streamable-http", "stdio")


def env_tools(env_id: str, env_kwargs: dict[str, Any]) -> tuple[Any, dict[str, BaseTool]]:
    """The env made from ``env_id`` and its tools; :class:`ConfigError` for an env that cannot be made or has none."""
    import gymnasium as gym

    import agentgym_r1  # noqa: F401  (registers the AgentR1/ ids)

    try:
        env = gym.make(env_id, **env_kwargs)
    except AgentGymError:
        raise
    except (TypeError, ValueError, gym.error.Error) as e:
        raise ConfigError(f"{env_id} cannot be made with {env_kwargs}: {e}") from e
    tools = getattr(env.unwrapped, "tools", None)
    if not isinstance(tools, dict) or not tools:
        env.close()
        raise ConfigError(
            f"{env_id} has no tools to serve over MCP (env.unwrapped.tools is {tools!r:.80}); serve an "
            "env built on ToolEnv, e.g. AgentR1/HotpotQA-v0"
        )
    return env, tools


def make_server(env_id: str, tools: dict[str, BaseTool]) -> Any:
    """The ``mcp`` low-level server offering ``tools``."""
    require("mcp", "mcp", "agentgym-r1 serve mcp")
    import anyio.to_thread
    import mcp_types as types
    from mcp.server.lowlevel import Server

    lock = threading.Lock()

    def call(tool_: BaseTool, arguments: Any) -> ToolResult:
        with lock:
            return call_tool(tool_, arguments)

    async def on_list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=t.name, description=t.description, input_schema=dict(t.parameters))
                for t in tools.values()
            ]
        )

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        tool_ = tools.get(params.name)
        if tool_ is None:
            result = ToolResult(False, f"Error: unknown tool {params.name!r}; the tools are {sorted(tools)}.")
        else:
            result = await anyio.to_thread.run_sync(call, tool_, params.arguments or {})
        return types.CallToolResult(content=[types.TextContent(type="text", text=result.text)], is_error=not result.ok)

    return Server(f"agentgym-r1 {env_id}", on_list_tools=on_list_tools, on_call_tool=on_call_tool)


def serve(
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    transport: str = "streamable-http",
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
) -> None:
    """Serve ``env_id``'s tools until interrupted (stdio: until the client closes stdin)."""
    if transport not in TRANSPORTS:
        raise ConfigError(f"transport must be one of {list(TRANSPORTS)}, got {transport!r}")
    require("mcp", "mcp", "agentgym-r1 serve mcp")
    env, tools = env_tools(env_id, dict(env_kwargs or {}))
    try:
        server = make_server(env_id, tools)
        if transport == "stdio":
            import anyio
            from mcp.server.stdio import stdio_server

            async def run() -> None:
                async with stdio_server() as (read, write):
                    await server.run(read, write, server.create_initialization_options())

            anyio.run(run)
        else:
            import uvicorn

            log.info("serving the tools of %s over MCP on http://%s:%d/mcp", env_id, host, port)
            uvicorn.run(server.streamable_http_app(host=host), host=host, port=port, log_level=log_level)
    finally:
        env.close()
