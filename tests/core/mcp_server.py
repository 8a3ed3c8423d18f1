"""A small MCP server for the tests, written with the ``mcp`` SDK's MCPServer (FastMCP's successor in mcp 2.x).

``python mcp_server.py`` serves over stdio; ``python mcp_server.py http PORT`` over streamable HTTP on 127.0.0.1;
``python mcp_server.py clash`` also offers a tool named ``lookup`` (the Python tool the tests give beside it);
``python mcp_server.py broken`` writes to stderr and exits before it serves.
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("agentgym-test")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def fail(message: str) -> str:
    """Raise an error with ``message``."""
    raise ValueError(message)


@server.tool()
def crash() -> str:
    """Exit the server process at once."""
    os._exit(3)


@server.tool()
def hang(seconds: float) -> str:
    """Sleep ``seconds``."""
    time.sleep(seconds)
    return "woke"


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "broken":
        print("mcp_server: cannot open the database /nonexistent/db", file=sys.stderr)
        sys.exit(2)
    if mode == "clash":
        server.add_tool(lambda key: key, name="lookup", description="Look up a key.")
    if mode == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
