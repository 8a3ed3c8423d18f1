"""``AgentR1/HotpotQA-v0``: multi-hop question answering with a search tool over a real retrieval index."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from agentgym_r1.core.env import EnvMessage, Grade, init_options, reject_unknown
from agentgym_r1.core.parsers import ActionParser
from agentgym_r1.core.rewards import char_f1, qa_scores
from agentgym_r1.core.tasks import Task
from agentgym_r1.envs.hotpotqa.data import HotpotData, difficulty_of, load_source
from agentgym_r1.envs.hotpotqa.tools import SearchTool
from agentgym_r1.envs.tool_env import RewardFn, ToolEnv
from agentgym_r1.error import ConfigError
from agentgym_r1.retrieval.base import Retriever

REWARD_METRICS = ("em", "f1", "subem", "char_f1")
SYSTEM_PROMPT = (
    "Answer the question. Search for the facts you need: each search returns passages with their titles. Many "
    "questions need two searches: find the first entity, then the one its passage leads to, or look up both entities "
    "being compared. Give the final answer as a short span (a name, a date, a number, yes or no), without explanation."
)


def qa_reward(metric: str = "em") -> RewardFn:
    """Outcome reward: ``metric`` (``em``, ``f1``, ``subem`` or ``char_f1``) of the answer against the gold
    answer(s); all four are reported in the metrics. Solved when the chosen metric is 1 (for ``char_f1``, on an exact
    match: two different strings can share their bigrams)."""
    if metric not in REWARD_METRICS:
        raise ConfigError(f"reward_metric must be one of {REWARD_METRICS}, got {metric!r}")

    def reward(prediction: str, task: Task) -> Grade:
        scores = {**qa_scores(prediction, task.answer), "char_f1": char_f1(prediction, task.answer)}
        solved = scores["em" if metric == "char_f1" else metric] == 1.0
        return Grade(scores[metric], solved, scores)

    return reward


_HTTP_CLIENTS: dict[str, Retriever] = {}


def http_retriever(corpus: object, index_dir: object, options: Mapping[str, Any]) -> Retriever:
    """A client of a retriever server (``agentgym-r1 serve retriever``), one pooled client per process and options."""
    from agentgym_r1.retrieval.http import HttpRetriever

    if corpus is not None or index_dir is not None:
        raise ConfigError(
            "retriever='http' searches the index the server was started with; corpus= and index_dir= "
            "belong to `agentgym-r1 serve retriever --index DIR`, not to the env"
        )
    if "url" not in options:
        raise ConfigError(
            "retriever='http' needs retriever_options={'url': 'http://host:port'} (timeout=, retries= optional)"
        )
    key = repr(sorted(options.items()))
    if key not in _HTTP_CLIENTS:
        _HTTP_CLIENTS[key] = HttpRetriever(**dict(options))
    return _HTTP_CLIENTS[key]


def make_retriever(
    data: HotpotData,
    corpus: str | os.PathLike[str] | None,
    backend: str,
    index_dir: str | os.PathLike[str] | None,
    options: Mapping[str, Any],
) -> Retriever:
    """The retriever over ``corpus`` (a JSONL path) or the source's context paragraphs. The factory keeps one per
    process for each corpus, backend and options, so env instances share it."""
    from agentgym_r1.retrieval.factory import build_retriever

    if backend == "http":
        return http_retriever(corpus, index_dir, options)
    if corpus is None and data.documents is None:
        raise ConfigError(
            "this HotpotQA source has no context paragraphs to search (a questions-only file); give "
            "corpus='path/to/corpus.jsonl' (the full-wiki setting) or a source with contexts"
        )
    docs = os.fspath(corpus) if corpus is not None else data.documents
    return build_retriever(backend, docs, index_dir, **dict(options))


class HotpotQAEnv(ToolEnv):
    """Multi-hop question answering (HotpotQA) with a ``search`` tool over a real BM25 (or Lucene, dense, hybrid,
    HTTP) index.

    **Description.** One question per episode. The agent searches a passage collection (argument ``query``; the
    ``top_k`` best passages come back, each with its title) as often as it needs within the turn limit, then answers.
    Bridge questions need a search for the entity named in the question and then for the entity its passage leads
    to; comparison questions need a search for each of two entities.

    **Observation.** At reset: the system prompt (tool schema and answer format), a blank line and the question.
    After a search: the passages, ``Doc 1 (Title: ...) text`` one per line, inside ``<tool_response>`` (Hermes) or
    ``<information>`` (tags). After a bad action: a message saying what was wrong and what is expected.

    **Action.** ``parser="hermes"`` (default): ``<tool_call>{"name": "search", "arguments": {"query": "..."}}
    </tool_call>``; ``parser="tag"`` (Search-R1): ``<search>query</search>``. The answer as
    ``<answer>...</answer>``. ``<think>`` blocks are ignored. Up to ``max_searches_per_turn`` searches in one action;
    the others are skipped with a message.

    **Reward.** ``outcome``: ``reward_metric`` of the answer, ``"em"`` (default), ``"f1"`` or ``"subem"``, as in the
    official HotpotQA / SQuAD evaluation (Search-R1's substring EM), or ``"char_f1"`` (character-bigram F1: partial
    credit for a name a few letters off, a denser RL signal than EM when answers are single rare words); ``metrics``
    holds all four. ``process``:
    ``valid_search_reward`` per search that ran, ``failed_call_penalty`` per failed call (empty or over-long query,
    unknown tool, bad arguments, a retriever error). ``format``: ``format_penalty`` for an action that does not parse.

    **Episode end.** Terminated on an answer (a search written after the answer in the same action is not run);
    truncated at the turn limit (6). ``info["env"]`` has ``searches`` and ``support_recall``: the share of the gold
    supporting titles among the passages shown so far.

    **Data sources.** ``source="synthetic"`` (default): a generated KB of fictional people, places, organisations and
    works, seeded by ``seed`` with about ``kb_size`` entities; unlimited bridge and comparison questions; the corpus
    is the KB's passages; ``difficulty`` ``"easy"`` (default), ``"medium"``, ``"hard"`` (three-hop bridges,
    comparisons of entities named through a bridge) or a dict of
    :class:`~agentgym_r1.envs.hotpotqa.synthetic.Knobs`, recorded in ``info["env"]["difficulty"]``. A path to the
    official JSON (``hotpot_dev_distractor_v1.json``) or to JSON lines in the Hugging Face layout; ``"hf"``:
    ``hotpotqa/hotpot_qa`` (``config`` distractor or fullwiki, ``split``). The corpus is the loaded questions' context
    paragraphs (deduplicated by title: the distractor setting) unless ``corpus=`` names a JSONL corpus (``{"id",
    "contents"}`` or ``{"title", "text"}``: the full-wiki setting). ``retriever``: a backend name for
    :func:`agentgym_r1.retrieval.factory.build_retriever` (``"bm25"`` default, ``"lucene"``, ``"dense"``, ``"hybrid"``)
    with ``retriever_options`` and an optional ``index_dir`` cache; ``"http"`` with ``retriever_options={"url": ...}``
    for a retriever server (``agentgym-r1 serve retriever --index DIR``); or any
    :class:`~agentgym_r1.retrieval.base.Retriever` instance. One index per corpus and backend is built per process and
    shared by every env instance; a server that is down or slow gives the agent an error observation.

    **MCP tools.** ``mcp_servers`` (and ``mcp_timeout``) add MCP servers' tools beside the env's own, as in
    :class:`~agentgym_r1.envs.tool_env.ToolEnv`.

    **Version history.** v0: first release; ``reward_metric="char_f1"`` and the ``char_f1`` metric added later
    (the default reward is unchanged).
    """

    def __init__(
        self,
        source: str | os.PathLike[str] = "synthetic",
        split: str = "validation",
        *,
        config: str = "distractor",
        seed: int = 0,
        kb_size: int = 1000,
        difficulty: Any = "easy",
        corpus: str | os.PathLike[str] | None = None,
        retriever: str | Retriever = "bm25",
        retriever_options: Mapping[str, Any] | None = None,
        index_dir: str | os.PathLike[str] | None = None,
        top_k: int = 5,
        reward_metric: str = "em",
        parser: str | ActionParser = "hermes",
        system_prompt: str | None = None,
        valid_search_reward: float = 0.0,
        failed_call_penalty: float = 0.0,
        format_penalty: float = -0.1,
        max_searches_per_turn: int = 3,
        mcp_servers: Sequence[str | Sequence[str]] = (),
        mcp_timeout: float = 30.0,
        render_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        reject_unknown(type(self).__name__, kwargs, init_options(type(self)))
        for name, value in (("top_k", top_k), ("max_searches_per_turn", max_searches_per_turn)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive int, got {value!r}")
        reward_fn = qa_reward(reward_metric)
        self.source, self.reward_metric = source, reward_metric
        self.difficulty, knobs = difficulty_of(source, difficulty)
        self.data = load_source(source, split, config, seed, kb_size, knobs)
        if not isinstance(retriever, Retriever):
            retriever = make_retriever(self.data, corpus, retriever, index_dir, retriever_options or {})
        elif corpus is not None or index_dir is not None or retriever_options:
            raise ConfigError(
                "corpus=, index_dir= and retriever_options= build a retriever; they cannot be used with "
                f"a ready {type(retriever).__name__} instance. Pass a backend name, or only the instance."
            )
        self.retriever = retriever
        self.search_tool = SearchTool(retriever, top_k)
        super().__init__(
            [self.search_tool],
            self.data.tasks,
            reward_fn,
            parser=parser,
            system_prompt=SYSTEM_PROMPT if system_prompt is None else system_prompt,
            valid_call_reward=valid_search_reward,
            failed_call_penalty=failed_call_penalty,
            format_penalty=format_penalty,
            max_calls_per_turn=max_searches_per_turn,
            render_mode=render_mode,
            mcp_servers=mcp_servers,
            mcp_timeout=mcp_timeout,
        )

    def no_grade(self) -> Grade:
        return Grade(0.0, False, dict.fromkeys(REWARD_METRICS, 0.0))

    def _begin(self, options: dict[str, Any]) -> list[EnvMessage]:
        self.search_tool.seen_titles.clear()
        self.search_tool.searches = 0
        return super()._begin(options)

    def env_info(self) -> dict[str, Any]:
        gold = list(self.task.meta.get("supporting_titles", [])) if self.task is not None else []
        seen = self.search_tool.seen_titles
        recall = sum(t in seen for t in gold) / len(gold) if gold else 0.0
        return {
            "searches": self.search_tool.searches,
            "support_recall": recall,
            **({"difficulty": self.difficulty} if self.source == "synthetic" else {}),
        }
