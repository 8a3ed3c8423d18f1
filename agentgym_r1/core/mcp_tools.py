"""MCP servers' tools as :class:`~agentgym_r1.core.tools.BaseTool`: ``ToolEnv(mcp_servers=[...])``.

Each server is a stdio command (a list of strings, ``["python", "server.py"]``) or a streamable-HTTP URL string.
:class:`McpClients` connects to every server when the env is built, lists their tools (names, descriptions, JSON
schemas) and calls them with a time limit. A tool's error is the agent's observation (``ok=False``), and so is a
server that crashed, hung or dropped the connection: the connection is dropped and the next call makes a new one (a
new process for a stdio server); a server that cannot be reached again answers "unavailable". A server that cannot
start when the env is built raises :class:`~agentgym_r1.error.McpServerError` with its stderr.

**Threads.** The ``mcp`` client is async (anyio) and envs are sync, called from any thread. Each
:class:`McpClients` runs one daemon thread with an asyncio event loop that owns the sessions; a sync call is
submitted to it with ``asyncio.run_coroutine_threadsafe(...).result(timeout)``. Every connection lives in one task
of that loop (:meth:`_Link.run`), since anyio's task groups and cancel scopes (in ``stdio_client``,
``streamable_http_client`` and ``ClientSession.__aenter__``) must be entered and left by the same task; it is stopped
by cancelling its :class:`anyio.CancelScope`, not with ``Task.cancel``: ``mcp/client/stdio.py`` shields its
shutdown (close stdin, wait 2 s, SIGTERM the process group, 2 s, SIGKILL) from anyio cancellation, and notes that a
native ``task.cancel()`` can defeat it and leak the server. :meth:`McpClients.close` stops every connection, then
the loop, then joins the thread: nothing outlives it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import tempfile
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from agentgym_r1.core.tools import BaseTool, ToolResult, truncate
from agentgym_r1.error import ConfigError, McpServerError, require

STDERR_CHARS = 2000  # of a server's stderr shown when it cannot start
STARTUP_TIMEOUT = 120.0  # at least, for a server to start and list its tools (a cold interpreter on a busy machine)
CLOSE_TIMEOUT = 10.0  # stdio_client's own shutdown is bounded by ~6 s (mcp/client/stdio.py: 2 + 2 + 2 s)

Server = str | Sequence[str]


def check_server(server: Any) -> Server:
    """``server`` if it is a stdio command (a non-empty list of strings) or an http(s) URL, else ConfigError."""
    if isinstance(server, str):
        if server.startswith(("http://", "https://")):
            return server
    elif isinstance(server, Sequence) and server and all(isinstance(part, str) for part in server):
        return list(server)
    raise ConfigError(
        f"mcp_servers: each server is a stdio command as a list of strings (['python', 'server.py']) "
        f"or a streamable-HTTP URL ('http://127.0.0.1:8000/mcp'); got {server!r}"
    )


def describe(server: Server) -> str:
    return server if isinstance(server, str) else " ".join(server)


class _Link:
    """One connection to one server, owned by one task of the loop (:meth:`run`)."""

    def __init__(self, server: Server, timeout: float) -> None:
        self.server, self.timeout = server, timeout  # timeout: for the server to start and list its tools
        self.session: Any = None
        self.scope: Any = None  # the anyio CancelScope around the connection; cancelling it closes it
        self.task: asyncio.Task[None] | None = None
        self.ready: asyncio.Future[list[Any]] | None = None
        self.reconnecting = asyncio.Lock()  # two calls that find the connection gone make one new one

    def transport(self, errlog: Any) -> Any:
        if isinstance(self.server, str):
            from mcp.client.streamable_http import streamable_http_client

            return streamable_http_client(self.server)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        # stdio_client passes errlog to anyio.open_process as the child's stderr: a real file, read back on failure
        return stdio_client(StdioServerParameters(command=self.server[0], args=list(self.server[1:])), errlog=errlog)

    async def open(self) -> list[Any]:
        """Start :meth:`run` and wait until the server listed its tools (the caller bounds the wait)."""
        self.ready = asyncio.get_running_loop().create_future()
        self.task = asyncio.ensure_future(self.run())
        try:
            return await asyncio.shield(self.ready)
        except BaseException:
            await self.stop()
            raise

    async def run(self) -> None:
        import anyio
        from mcp.client.session import ClientSession

        assert self.ready is not None
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
            try:
                with anyio.CancelScope() as self.scope:
                    async with self.transport(errlog) as (read, write), ClientSession(read, write) as session:
                        with anyio.fail_after(self.timeout):
                            await session.initialize()
                            tools = await list_all_tools(session)
                        self.session = session
                        self.ready.set_result(tools)
                        await anyio.sleep_forever()
            except Exception as e:  # the server never came up, or its connection failed: say why, with its stderr
                if not self.ready.done():
                    self.ready.set_exception(McpServerError(self.start_failure(e, errlog)))
            finally:
                self.session = None
                if not self.ready.done():
                    self.ready.set_exception(
                        McpServerError(f"MCP server {describe(self.server)!r} was closed before it listed its tools")
                    )

    def start_failure(self, error: BaseException, errlog: Any) -> str:
        errlog.flush()
        errlog.seek(0)
        stderr = errlog.read()[-STDERR_CHARS:].strip()
        error = leaf(error)
        what = (
            f"did not answer within {self.timeout:g} s"
            if isinstance(error, TimeoutError)
            else (f"failed: {type(error).__name__}: {truncate(str(error), 300)}")
        )
        if isinstance(self.server, str):
            return (
                f"MCP server {self.server!r} could not be reached: it {what}. Check the server runs and the URL "
                "is its streamable-HTTP endpoint (often .../mcp)."
            )
        return (
            f"MCP server {describe(self.server)!r} could not start: it {what}. Its stderr:\n{stderr or '(empty)'}"
            "\nCheck the command runs an MCP server over stdio on its own."
        )

    async def stop(self) -> None:
        """Close the connection (a stdio server is stopped by stdio_client's shielded shutdown) and wait for it."""
        self.session = None
        if self.scope is not None:
            self.scope.cancel()
        elif self.task is not None:  # the task has not entered its scope yet: it owns nothing to leak
            self.task.cancel()
        if self.task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(self.task), CLOSE_TIMEOUT)

    @property
    def alive(self) -> bool:
        return self.session is not None and self.task is not None and not self.task.done()


def leaf(error: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups, which anyio's task groups raise."""
    while getattr(error, "exceptions", None):
        error = error.exceptions[0]  # type: ignore[attr-defined]
    return error


async def list_all_tools(session: Any) -> list[Any]:
    """Every page of ``tools/list`` (``ListToolsResult.next_cursor`` pages it)."""
    import mcp_types

    result = await session.list_tools()
    tools = list(result.tools)
    while result.next_cursor is not None:
        result = await session.list_tools(params=mcp_types.PaginatedRequestParams(cursor=result.next_cursor))
        tools.extend(result.tools)
    return tools


def result_text(result: Any) -> str:
    """A ``CallToolResult``'s content as text: text parts as they are, other parts (images, resources) as JSON."""
    parts = [
        part.text if getattr(part, "type", None) == "text" else part.model_dump_json(exclude_none=True)
        for part in result.content
    ]
    if not parts and result.structured_content is not None:
        import json

        parts = [json.dumps(result.structured_content, ensure_ascii=False, default=str)]
    return "\n".join(parts)


class McpTool(BaseTool):
    """A tool of an MCP server. Its time limit is the :class:`McpClients`' own (the call is cancelled there, not
    abandoned), so ``timeout`` is None for :func:`~agentgym_r1.core.tools.run_tool`, which calls it inline."""

    timeout = None

    def __init__(
        self, clients: McpClients, link: int, name: str, description: str, parameters: dict[str, Any], server: str
    ) -> None:
        self.clients, self.link, self.name, self.description = clients, link, name, description
        self.parameters, self.server = parameters, server

    def __call__(self, **arguments: Any) -> ToolResult:
        return self.clients.call(self.link, self.name, arguments)


class McpClients:
    """Connections to ``servers`` on a loop thread of their own; ``tools`` are theirs, in order. Raises
    :class:`McpServerError` (after closing what it opened) when a server cannot start."""

    def __init__(self, servers: Sequence[Any], timeout: float = 30.0) -> None:
        if isinstance(servers, str) or not isinstance(servers, Sequence):
            raise ConfigError(
                f"mcp_servers must be a list of servers, got {servers!r}; e.g. "
                "[['python', 'server.py'], 'http://127.0.0.1:8000/mcp']"
            )
        checked = [check_server(s) for s in servers]
        require("mcp", "mcp", "ToolEnv(mcp_servers=...)")
        self.timeout, self.startup = timeout, max(timeout, STARTUP_TIMEOUT)
        self.links = [_Link(s, self.startup) for s in checked]
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agentgym-mcp", daemon=True)
        self.thread.start()
        self.finalizer = weakref.finalize(self, close_loop, self.loop, self.thread, self.links)
        self.tools: list[McpTool] = []
        try:
            for i, link in enumerate(self.links):
                try:
                    listed = self.submit(link.open(), self.startup + CLOSE_TIMEOUT)
                except TimeoutError:
                    raise McpServerError(
                        f"MCP server {describe(link.server)!r} did not list its tools within "
                        f"{self.startup + CLOSE_TIMEOUT:g} s"
                    ) from None
                for t in listed:
                    self.tools.append(
                        McpTool(self, i, t.name, t.description or t.name, dict(t.input_schema), describe(link.server))
                    )
        except BaseException:
            self.close()
            raise

    def submit(self, coro: Any, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()  # the task is cancelled on the loop; a connection it opened is stopped by _Link.open
            raise TimeoutError from None

    def call(self, index: int, name: str, arguments: dict[str, Any]) -> ToolResult:
        """The tool's result; an error result when the call fails, times out or the server is gone."""
        link = self.links[index]
        try:  # a server to restart first has its own bound: the call's is for the call
            self.submit(self.reconnect(link), self.startup + CLOSE_TIMEOUT)
        except TimeoutError:
            self.drop(link)
            return ToolResult(
                False,
                f"Error: {name} is unavailable: its MCP server {describe(link.server)!r} did "
                f"not restart within {self.startup + CLOSE_TIMEOUT:g} s.",
            )
        except McpServerError as e:
            return ToolResult(False, f"Error: {name} is unavailable: {truncate(str(e), 500)}")
        try:
            return self.submit(self.call_async(link, name, arguments), self.timeout)
        except TimeoutError:
            self.drop(link)  # a hung server: the next call reconnects (restarts it)
            return ToolResult(
                False,
                f"Error: {name} did not answer within {self.timeout:g} s; its MCP server was "
                "stopped and is restarted on the next call.",
            )
        except Exception as e:  # the connection broke (the server crashed): reconnect on the next call
            self.drop(link)
            return ToolResult(
                False,
                f"Error: {name} failed: its MCP server {describe(link.server)!r} stopped "
                f"answering ({type(e).__name__}: {truncate(str(e), 300)}); it is restarted on "
                "the next call.",
            )

    def drop(self, link: _Link) -> None:
        """Close ``link`` (bounded: :meth:`_Link.stop` gives up after CLOSE_TIMEOUT); the next call reconnects."""
        with contextlib.suppress(TimeoutError):
            self.submit(link.stop(), CLOSE_TIMEOUT + 1)

    async def reconnect(self, link: _Link) -> None:
        """A new connection (a new process for a stdio server) when the last one was dropped or broke."""
        async with link.reconnecting:  # two calls that find it gone make one
            if not link.alive:
                await link.stop()
                await link.open()

    async def call_async(self, link: _Link, name: str, arguments: dict[str, Any]) -> ToolResult:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        if link.session is None:  # dropped by another thread's call between the reconnect and this
            raise McpServerError(f"MCP server {describe(link.server)!r} was restarted during the call")
        try:
            result = await link.session.call_tool(name, arguments)
        except MCPError as e:
            if e.code == CONNECTION_CLOSED:
                raise
            return ToolResult(False, f"Error: {name} failed: {truncate(e.error.message, 300)}")
        return ToolResult(not result.is_error, result_text(result))

    def close(self) -> None:
        """Stop every connection (and stdio server), then the loop and its thread. Also run when the clients are
        collected or the interpreter exits without it."""
        self.finalizer()


def close_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread, links: list[_Link]) -> None:
    """:meth:`McpClients.close`, on what it holds (a ``weakref.finalize`` must not hold the clients)."""
    if loop.is_closed():
        return
    if thread.is_alive():

        async def stop_all() -> None:
            await asyncio.gather(*(link.stop() for link in links))

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop_all(), loop).result(CLOSE_TIMEOUT + 1)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_TIMEOUT)
    if not thread.is_alive():
        loop.close()
