"""``AgentR1/WebShop-v0``: shopping on a text web site, after WebShop (Yao et al., 2022)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentgym_r1.core.env import Env, EnvMessage, Grade, Turn, finite_option, init_options, reject_unknown
from agentgym_r1.core.native import make_parser
from agentgym_r1.core.parsers import (
    ActionParser,
    CommandParser,
    CompositeParser,
    with_call_example,
)
from agentgym_r1.core.tasks import Task
from agentgym_r1.envs.webshop.catalogue import SEARCH_RETURN_N, Catalogue
from agentgym_r1.envs.webshop.data import difficulty_of, load_catalogue
from agentgym_r1.envs.webshop.pages import (
    BACK_TO_SEARCH,
    BUY_NOW,
    NEXT_PAGE,
    PREV_PAGE,
    SUB_PAGES,
    Session,
    available_actions,
    render,
    render_done,
)
from agentgym_r1.envs.webshop.reward import METRIC_KEYS, get_reward
from agentgym_r1.error import RetrievalError

MAX_QUERY_CHARS = 500
ACTION_HINT = (
    'Write one command such as search[query] or click[button], or call one tool as <tool_call>{"name": '
    '"click", "arguments": {"button": "..."}}</tool_call>.'
)
TOOLS = (
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the shop (only on the search page).",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "click",
            "description": "Click a button, product or option on the current page.",
            "parameters": {"type": "object", "properties": {"button": {"type": "string"}}, "required": ["button"]},
        },
    },
)
SYSTEM_PROMPT = (
    "You are shopping on a web site for the product the instruction describes. Each message shows the page, its "
    "parts separated by [SEP], and the actions available on it. Act with one action per message: search[query] on "
    "the search page, or click[button] with a button, product id or option shown on the page; or call the tool "
    'as <tool_call>{"name": "click", "arguments": {"button": "buy now"}}</tool_call>. Choose the product and its '
    "options, then click[buy now]."
)


class WebShopEnv(Env):
    """Find, configure and buy the product an instruction describes, on a text shopping site.

    **Description.** WebShop's site in text mode: a search page; results, 10 a page (50 at most) with ``Next >`` and
    ``< Prev``; an item page with option buttons, ``Description``, ``Features`` and ``Reviews`` sub-pages, ``Back to
    Search`` and ``Buy Now``. Search is BM25 over titles, attributes, descriptions and option values. The catalogue
    is loaded once per process and shared read-only by every instance.

    **Observation.** At reset: the system prompt, a blank line and the search page. Each page is WebShop's
    ``[SEP]``-separated text (``WebShop [SEP] Instruction: [SEP] ... [SEP] Search``), then a line
    ``Available actions: search[<your query>], click[...], ...``. The clickables are also in
    ``info["env"]["available_actions"]`` (``has_search_bar``, ``clickables``). After an invalid action: the error
    message, then the current page again. An action given as a Hermes tool call is answered with a ``tool`` message,
    the page inside ``<tool_response>...</tool_response>``.

    **Action.** ``search[query]`` or ``click[button]`` (buttons match case-insensitively), or one Hermes tool call
    ``search(query)`` / ``click(button)``; ``parser="auto"`` (or an :class:`~agentgym_r1.core.parsers.ActionParser`)
    reads the calls in the model family's own format instead (the rollout engine picks it from the tokenizer). Invalid:
    malformed text, a search off the search page, a button, product or option not on the page, ``buy now`` with no
    product open.

    **Reward.** ``outcome`` at ``Buy Now``: WebShop's score in [0, 1] (attributes, options with colour normalisation,
    price, times the type factor; see :mod:`agentgym_r1.envs.webshop.reward`). ``format``: ``format_penalty`` per
    invalid action. ``success`` when the score is 1. ``metrics``: ``score`` and every part (``r_type``, ``r_att``,
    ``r_option``, ``r_price``, ``query_match``, ``category_match``, ``title_score``, weights ``w_*``); at the
    purchase ``info["env"]`` also has ``purchased`` (ASIN, options, price) and the ``goal``.

    **Episode end.** Terminated at ``Buy Now``; truncated at the turn limit (15).

    **Data sources.** ``source="generated"`` (default, offline): a seeded procedural catalogue of ``num_products``
    (default 1000, up to 1,000,000) with unlimited synthetic goals; ``difficulty`` ``"easy"`` (default), ``"medium"``,
    ``"hard"`` (more attributes, goals written as a person would, tight price limits) or a dict of
    :class:`~agentgym_r1.envs.webshop.generator.Knobs`, recorded in ``info["env"]["difficulty"]``. Or a path to the
    official files (a product file: ``items_shuffle*.json`` or ``{id, contents, product}`` JSONL; or their directory,
    with ``items_ins_v2*.json`` and ``items_human_ins*.json`` found beside it); ``goals="human"``, ``"synthetic"`` or
    ``"auto"`` (human when there are human instructions); ``num_products`` keeps the first products of the file. Goals
    are drawn with ``self.np_random`` in proportion to WebShop's goal weights (synthetic goals with rare attributes come
    up more often; human goals uniformly), or chosen with ``options={"index": i}`` / ``{"task_id": ...}``.

    **Version history.** v0: first release.
    """

    reset_options = frozenset({"task_id", "index"})

    def __init__(
        self,
        source: str | Path = "generated",
        *,
        goals: str = "auto",
        num_products: int | None = None,
        seed: int = 0,
        difficulty: Any = "easy",
        format_penalty: float = -0.1,
        system_prompt: str | None = None,
        parser: str | ActionParser = "hermes",
        render_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        reject_unknown(type(self).__name__, kwargs, init_options(type(self)))
        self.tool_parser = make_parser(parser, answer_formats=())  # before any work: a bad name raises ConfigError
        super().__init__(render_mode=render_mode)
        self.difficulty, knobs = difficulty_of(source, difficulty)
        self.generated = str(source) == "generated"
        self.catalogue: Catalogue = load_catalogue(
            source, goals=goals, seed=seed, num_products=num_products, knobs=knobs
        )
        self.format_penalty = finite_option("format_penalty", format_penalty)
        self.system_prompt = (
            with_call_example(SYSTEM_PROMPT, self.tool_parser, "click", {"button": "buy now"})
            if system_prompt is None
            else system_prompt
        )
        hint = with_call_example(ACTION_HINT, self.tool_parser, "click", {"button": "..."})
        self.parser = CompositeParser([self.tool_parser, CommandParser(answer_formats=(), answer_verb=None)], hint)
        self.task: Task | None = None
        self.session = Session()
        self._clickables: list[str] = []

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [dict(t) for t in TOOLS]

    def no_grade(self) -> Grade:
        return Grade(0.0, False, dict.fromkeys(METRIC_KEYS, 0.0))

    @property
    def instruction(self) -> str:
        assert self.task is not None
        return self.task.prompt

    def env_info(self) -> dict[str, Any]:
        s = self.session
        return {
            "page": s.page,
            "task_id": self.task.id if self.task else None,
            "query": s.query,
            "page_no": s.page_no,
            "asin": s.asin,
            "options": dict(s.options),
            "available_actions": {"has_search_bar": s.page == "search", "clickables": list(self._clickables)},
            **({"difficulty": self.difficulty} if self.generated else {}),
        }

    # -- episode ----------------------------------------------------------------------------------------------------
    def _begin(self, options: dict[str, Any]) -> list[EnvMessage]:
        goals = self.catalogue.goals
        self.task = self.pick(goals, options) if options else goals[self.catalogue.draw_goal(self.np_random)]
        self.session = Session()
        return [EnvMessage("system", self.system_prompt), EnvMessage(None, "\n\n"), EnvMessage("user", self._page())]

    def _page(self) -> str:
        text, self._clickables = render(self.session, self.catalogue, self.instruction)
        return f"{text}\n{available_actions(self.session, self._clickables)}"

    def _act(self, action: str) -> Turn:
        verb, arg, info = self._parse(action)
        if verb is None:
            return self._invalid(info, str(arg))
        error = self._search(arg) if verb == "search" else self._click(arg)
        if isinstance(error, Turn):
            turn, turn.action = error, info
        elif error is not None:
            turn = self._invalid(info, error)
        else:
            turn = Turn(info, [EnvMessage("user", self._page())])
        if info["kind"] == "tool_call":  # a tool call is answered with a tool message
            turn.messages = [
                EnvMessage("tool", self.tool_parser.render_result(verb, m.text), m.text) for m in turn.messages
            ]
        return turn

    def _parse(self, action: str) -> tuple[str | None, str, dict[str, Any]]:
        """``(verb, argument, info["action"])``; ``verb`` None means invalid, with the message as argument."""
        parsed = self.parser.parse(action, {})  # the tool parser when the text holds its call, else a command
        if parsed.kind == "invalid":
            return None, parsed.error or "Invalid action.", parsed.to_info()
        if parsed.kind == "answer":  # a custom tool parser's answer: WebShop ends only at Buy Now
            return None, "Invalid action: there is no answer to give; click[buy now] to finish.", parsed.to_info()
        if parsed.kind == "tool_call":
            if len(parsed.calls) != 1:
                return None, "Invalid action: one tool call per turn.", parsed.to_info()
            call = parsed.calls[0]
            key = {"search": "query", "click": "button"}.get(call.name)
            value = call.arguments.get(key) if key else None
            if not isinstance(value, str):
                return (
                    None,
                    f"Invalid action: the tools are search(query: string) and click(button: string); "
                    f"got {call.name!r} with arguments {json.dumps(call.arguments)[:200]}.",
                    parsed.to_info(),
                )
            return call.name, value.strip(), parsed.to_info()
        if parsed.verb not in ("search", "click"):
            return (
                None,
                f"Invalid action: unknown command {parsed.verb!r}; write search[query] or click[button].",
                parsed.to_info(),
            )
        return parsed.verb, parsed.arg or "", parsed.to_info()

    def _invalid(self, info: dict[str, Any], message: str) -> Turn:
        if not message.startswith("Invalid action"):
            message = f"Invalid action: {message}"
        return Turn(
            info,
            [EnvMessage("user", f"{message}\n\n{self._page()}")],
            format=self.format_penalty,
            valid=False,
            error=message,
        )

    def _search(self, query: str) -> str | None:
        s = self.session
        if s.page != "search":
            return (
                f"search is only possible on the search page (this is the {s.page} page); "
                f"click[{BACK_TO_SEARCH.lower()}] first."
            )
        if not query:
            return "the search query is empty; write search[keywords]."
        try:
            results = self.catalogue.search(query.lower()[:MAX_QUERY_CHARS], SEARCH_RETURN_N)
        except RetrievalError as e:
            return f"the search failed ({e}); try again."
        self.session = Session("results", query.lower(), results, 1)
        return None

    def _click(self, button: str) -> str | Turn | None:
        s, b = self.session, button.strip().lower()
        if b not in self._clickables:
            if b == BUY_NOW.lower():
                return "there is no item to buy here: open a product from the search results first."
            shown = ", ".join(self._clickables) or "none (use search[query])"
            return f"{button[:100]!r} is not a button on this page; the clickables are: {shown}."
        if b == BACK_TO_SEARCH.lower():
            self.session = Session()
        elif s.page == "results":
            if b in (NEXT_PAGE.lower(), PREV_PAGE.lower()):
                s.page_no += 1 if b == NEXT_PAGE.lower() else -1
            else:
                s.page, s.asin, s.options = "item", b.upper(), {}
        elif s.page == "item":
            return self._click_item(b)
        elif b == PREV_PAGE.lower():  # a sub-page: back to the item
            s.page = "item"
        return None

    def _click_item(self, b: str) -> str | Turn | None:
        s = self.session
        product = self.catalogue.by_asin(s.asin or "")
        assert product is not None
        if b == PREV_PAGE.lower():
            s.page, s.asin, s.options = "results", None, {}
        elif b in (x.lower() for x in SUB_PAGES):
            s.page = b
        elif b == BUY_NOW.lower():
            return self._buy()
        else:
            name = next(n for n, values in product.options if b in values)
            s.options[name] = b
        return None

    def _buy(self) -> Turn:
        assert self.task is not None
        s = self.session
        product = self.catalogue.by_asin(s.asin or "")
        assert product is not None
        parts = get_reward(product, self.task.meta["goal"], s.options)
        score = parts["score"]
        self.grade = Grade(score, score >= 1.0 - 1e-9, parts)
        s.page = "done"
        self._clickables = []
        text = render_done(product.asin, s.options, score)
        extra = {
            **self.env_info(),
            "purchased": {"asin": product.asin, "options": dict(s.options), "price": product.price},
            "goal": self.task.meta["goal"].to_dict(),
        }
        return Turn({}, [EnvMessage("user", text)], outcome=score, terminated=True, extra=extra)
