"""The ``search`` tool: top-k titled passages from any :class:`~agentgym_r1.retrieval.base.Retriever`."""

from __future__ import annotations

from typing import Any

from agentgym_r1.core.tools import BaseTool, ToolResult
from agentgym_r1.retrieval.base import Hit, RetrievalError, Retriever

MAX_QUERY_CHARS = 1000


def render_hits(hits: list[Hit]) -> str:
    """Passages as Search-R1 shows them: ``Doc 1 (Title: ...) text``, one per line."""
    return "\n".join(f"Doc {i + 1} (Title: {h.doc.title}) {h.doc.text}" for i, h in enumerate(hits))


class SearchTool(BaseTool):
    """``search(query)``: the ``top_k`` best passages for ``query``, each with its title.

    Model input never raises here: an empty or over-long query, a search with no hits and a backend that fails
    (:class:`RetrievalError`, say a retriever server that is down) each give a result whose text says so. The
    titles of every passage shown are collected in ``seen_titles`` (the env clears it at each reset).
    """

    name = "search"
    description = (
        "Search a collection of encyclopedia passages. Returns the most relevant passages, each with its "
        "title. Search for one entity or fact at a time."
    )
    timeout = None  # the retriever bounds its own work (in-process index, or an HTTP client with timeouts)

    def __init__(
        self, retriever: Retriever, top_k: int = 5, max_query_chars: int = MAX_QUERY_CHARS, max_output_chars: int = 8000
    ) -> None:
        self.retriever = retriever
        self.top_k = int(top_k)
        self.max_query_chars = int(max_query_chars)
        self.max_output_chars = int(max_output_chars)
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "what to search for, e.g. an entity's name"}},
            "required": ["query"],
            "additionalProperties": False,
        }
        self.seen_titles: dict[str, None] = {}  # an ordered set
        self.searches = 0

    def __call__(self, query: str) -> ToolResult:  # type: ignore[override]
        query = query.strip()
        if not query:
            return ToolResult(False, "Error: the search query is empty. Search for an entity or a fact, e.g. a name.")
        if len(query) > self.max_query_chars:
            return ToolResult(
                False,
                f"Error: the search query is {len(query)} characters long; the limit is "
                f"{self.max_query_chars}. Search with a few keywords.",
            )
        self.searches += 1
        try:
            hits = self.retriever.search(query, self.top_k)
        except RetrievalError as e:
            return ToolResult(False, f"Error: the search failed ({e}). Try again, or answer with what you know.")
        if not hits:
            return ToolResult(True, f"No passages found for {query!r}. Try other keywords.")
        self.seen_titles.update(dict.fromkeys(h.doc.title for h in hits))
        return ToolResult(True, render_hits(hits))
