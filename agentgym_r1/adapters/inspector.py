"""The mask inspector: one training row drawn token by token, agent tokens (trained) apart from env and prompt tokens.

``agentgym-r1 inspect`` reads a saved batch (:func:`save_batch`, the ``to_trl()`` dict as JSON) or plays a fresh
rollout with a model (a local directory, or ``tiny``: a random tiny model built on the spot) and a chat template (the
model's, one of TRL's by name, or a ``.jinja`` file), then prints the row with ANSI colours and/or writes it as HTML.
Each token is its own cell with alternating shades, so token boundaries show; whitespace is visible (``↵`` for a
newline). The step reward sits after the last agent token of its step, where a trainer puts it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym_r1.adapters.loading import load_model, load_tokenizer
from agentgym_r1.error import ConfigError, require

Row = dict[str, Any]

_ANSI = {
    "prompt": ("\x1b[30;47m", "\x1b[30;107m"),
    "env": ("\x1b[30;46m", "\x1b[30;106m"),
    "agent": ("\x1b[30;42m", "\x1b[30;102m"),
    "step": ("\x1b[1;35m", "\x1b[1;35m"),
}
_RESET = "\x1b[0m"


@dataclass(slots=True)
class Cell:
    """One token (or the few tokens of one character split across tokens), where it came from, its ids."""

    text: str
    ids: list[int]
    source: str
    logprob: float | None = None
    step: tuple[int, float] | None = None
    """On the last agent token of a step: the step's index and reward."""


def token_texts(tokenizer: Any, ids: Sequence[int]) -> list[tuple[str, list[int]]]:
    """The text of each token, decoded incrementally (each token beside a few before it, as streaming
    detokenizers do) so a character split across tokens is one cell, never a replacement character."""
    out: list[tuple[str, list[int]]] = []
    start = 0
    for i in range(len(ids)):
        left = max(0, start - 4)
        before = tokenizer.decode(list(ids[left:start]), skip_special_tokens=False)
        text = tokenizer.decode(list(ids[left : i + 1]), skip_special_tokens=False)[len(before) :]
        if text.endswith("\ufffd") and i + 1 < len(ids) and i - start < 4:
            continue  # an incomplete character: it ends in a following token
        out.append((text, list(ids[start : i + 1])))
        start = i + 1
    return out


def cells(row: Row, tokenizer: Any) -> list[Cell]:
    """The cells of a row: the prompt, then the completion cut where the mask changes; step rewards on step ends."""
    prompt, completion, mask = row["prompt_ids"], row["completion_ids"], row["env_mask"]
    if len(mask) != len(completion):
        raise ConfigError(f"the row has {len(completion)} completion ids but {len(mask)} mask values")
    logprobs = row.get("logprobs") or [None] * len(completion)
    ends = dict(zip(row.get("step_ends") or [], row.get("step_rewards") or [], strict=False))
    step_of = {e: i for i, e in enumerate(row.get("step_ends") or [])}
    out = [Cell(text, ids, "prompt") for text, ids in token_texts(tokenizer, prompt)]
    pos = 0
    while pos < len(completion):  # runs of one source, cut after each step end
        end = pos + 1
        while end < len(completion) and mask[end] == mask[pos] and end - 1 not in ends:
            end += 1
        at = pos
        for text, ids in token_texts(tokenizer, completion[pos:end]):
            out.append(Cell(text, ids, "agent" if mask[pos] else "env", logprobs[at]))
            at += len(ids)
        if end - 1 in ends and mask[end - 1]:
            out[-1].step = (step_of[end - 1], float(ends[end - 1]))
        pos = end
    return out


def _visible(text: str) -> str:
    return text.replace("\t", "→\t").replace("\n", "↵\n")


def to_ansi(row_cells: Sequence[Cell], color: bool = True) -> str:
    """The cells for a terminal: alternating shades per source with colour; without, ``|`` between tokens and
    ``«agent»``/``«env»``/``«prompt»`` where the source changes."""
    parts, last, k = [], None, 0
    for cell in row_cells:
        k = k + 1 if cell.source == last else 0
        if color:
            shade = _ANSI[cell.source][k % 2]
            parts.extend(f"{shade}{line}{_RESET}" if line else "" for line in _lines(_visible(cell.text)))
        else:
            parts.append(("|" if cell.source == last else f"«{cell.source}»") + _visible(cell.text))
        if cell.step is not None:
            marker = f"⟨step {cell.step[0]}: reward {cell.step[1]:+.3g}⟩"
            parts.append(f"{_ANSI['step'][0]}{marker}{_RESET}" if color else marker)
        last = cell.source
    return "".join(parts)


def _lines(text: str) -> list[str]:
    """``text`` cut after each newline, so a background colour never runs to the terminal's edge."""
    pieces = text.split("\n")
    return [p + "\n" for p in pieces[:-1]] + [pieces[-1]]


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{{ title }}</title><style>
body { font-family: ui-monospace, monospace; font-size: 13px; margin: 2em; }
.row { white-space: pre-wrap; word-break: break-all; line-height: 1.7; }
.t { border-radius: 2px; padding: 1px 0; }
.prompt.s0 { background: #e4e4e4; } .prompt.s1 { background: #cfcfcf; }
.env.s0 { background: #bfe3f7; } .env.s1 { background: #93cdee; }
.agent.s0 { background: #bdeeb9; } .agent.s1 { background: #8fdc89; }
.step { color: #a0168c; font-weight: bold; } .legend span { padding: 2px 6px; margin-right: 1em; }
</style></head><body>
<h3>{{ title }}</h3>
<p class="legend"><span class="t agent s0">agent: trained (env_mask 1)</span><span class="t env s0">env and template:
masked (0)</span><span class="t prompt s0">prompt</span> {{ summary }}</p>
<div class="row">{% for c in cells %}<span class="t {{ c.source }} s{{ c.shade }}" title="{{ c.title }}">\
{{ c.text }}</span>
{%- if c.step %}<span class="step">{{ c.step }}</span>{% endif %}{% endfor %}</div>
</body></html>
"""


def to_html(row_cells: Sequence[Cell], title: str = "agentgym-r1 row") -> str:
    """The cells as one HTML page (a jinja2 template): a span per token, its ids, source and logprob on hover."""
    jinja2 = require("jinja2", "board", "the HTML mask view")
    items, last, k = [], None, 0
    for cell in row_cells:
        k = k + 1 if cell.source == last else 0
        last = cell.source
        lp = "" if cell.logprob is None else f" · logprob {cell.logprob:.3f}"
        items.append(
            {
                "source": cell.source,
                "shade": k % 2,
                "text": _visible(cell.text),
                "title": f"{cell.source} · ids {cell.ids}{lp}",
                "step": f"⟨step {cell.step[0]}: reward {cell.step[1]:+.3g}⟩" if cell.step else "",
            }
        )
    env = jinja2.Environment(autoescape=True)
    return env.from_string(_PAGE).render(title=title, cells=items, summary=summary(row_cells))


def summary(row_cells: Sequence[Cell]) -> str:
    counts = {s: sum(len(c.ids) for c in row_cells if c.source == s) for s in ("prompt", "agent", "env")}
    steps = sum(1 for c in row_cells if c.step is not None)
    return (
        f"{counts['prompt']} prompt tokens, {counts['agent']} agent tokens (trained), {counts['env']} env tokens "
        f"(masked), {steps} steps"
    )


# -- saved batches ---------------------------------------------------------------------------------------------------
def save_batch(batch: Any, path: str | Path) -> None:
    """Write ``batch.to_trl()`` (the rows, their masks and rewards) as JSON, for ``agentgym-r1 inspect``."""
    Path(path).write_text(json.dumps(batch.to_trl()), encoding="utf-8")


def load_rows(path: str | Path) -> list[Row]:
    """The rows of a saved batch: a ``to_trl()`` dict of columns, or a list of row dicts."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the batch {path}: {e}") from e
    if isinstance(data, dict) and isinstance(data.get("completion_ids"), list):
        return [dict(zip(data, values, strict=True)) for values in zip(*data.values(), strict=True)]
    if isinstance(data, list) and all(isinstance(r, dict) and "completion_ids" in r for r in data):
        return data
    raise ConfigError(
        f"{path} is not a saved batch: expected RolloutBatch.to_trl() as JSON (prompt_ids, "
        "completion_ids, env_mask columns) or a list of such rows"
    )


# -- the command -----------------------------------------------------------------------------------------------------
def add_inspect_parser(sub: Any, tiny_expert: Callable[[Any], list[str]] | None = None) -> None:
    """The ``inspect`` command on ``sub``. ``tiny_expert``: GSM8K's expert actions, whose episodes are the corpus of
    ``--model tiny``'s tokenizer (given by the caller: this layer imports no env)."""
    p = sub.add_parser(
        "inspect",
        help="show which tokens of a rollout row train (terminal colours and HTML)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "batch",
        nargs="?",
        help="a saved batch (save_batch: RolloutBatch.to_trl() as JSON); else a fresh rollout with --model",
    )
    p.add_argument("--row", type=int, default=0, help="which row to show (default 0)")
    p.add_argument(
        "--model", default=None, help="a local model directory, or 'tiny' (a random tiny model built on the spot)"
    )
    p.add_argument("--tokenizer", default=None, help="the tokenizer directory (default: --model's)")
    p.add_argument(
        "--template",
        default=None,
        help="a chat template: one of TRL's by name (qwen3, gemma3, gptoss...) or a .jinja file",
    )
    p.add_argument("--env", default="AgentR1/GSM8K-v0", help="the env of a fresh rollout")
    p.add_argument("--env-kwargs", default=None, help="the env's options as a JSON object")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-turns", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--html", default=None, help="also write the row as an HTML page to this file")
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    p.set_defaults(func=run_inspect, tiny_expert=tiny_expert)


def run_inspect(args: argparse.Namespace) -> int:
    tokenizer, row = _load(args) if args.batch else _fresh(args)
    row_cells = cells(row, tokenizer)
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    print(to_ansi(row_cells, color))
    print(("\n" if not row_cells or not row_cells[-1].text.endswith("\n") else "") + summary(row_cells))
    if args.html:
        Path(args.html).write_text(to_html(row_cells, f"row {args.row} · {args.batch or args.env}"), encoding="utf-8")
        print(f"HTML written to {args.html}")
    return 0


def _template_text(spec: str) -> str:
    from agentgym_r1.adapters.families import trl_template

    if (text := trl_template(spec)) is not None:
        return text
    path = Path(spec)
    if path.is_file():
        return path.read_text(encoding="utf-8")
    raise ConfigError(
        f"--template {spec!r} is neither one of TRL's chat templates (trl/chat_templates/*.jinja, by name) nor a file"
    )


def _tokenizer(path: str | None, template: str | None) -> Any:
    if path is None:
        raise ConfigError("give --tokenizer (or --model) to decode the row's ids")
    if not Path(path).is_dir():
        raise ConfigError(f"the tokenizer directory {path} does not exist")
    tokenizer = load_tokenizer(path, "--tokenizer")
    if template:
        tokenizer.chat_template = _template_text(template)
    return tokenizer


def _pick(rows: list[Row], index: int, where: str) -> Row:
    if not -len(rows) <= index < len(rows):
        raise ConfigError(f"--row {index} is out of range: {where} has {len(rows)} rows")
    return rows[index]


def _load(args: argparse.Namespace) -> tuple[Any, Row]:
    rows = load_rows(args.batch)
    return _tokenizer(args.tokenizer or args.model, args.template), _pick(rows, args.row, args.batch)


def _fresh(args: argparse.Namespace) -> tuple[Any, Row]:
    """Play one episode with the model and return its concatenated row."""
    from agentgym_r1.adapters import ChatTokenizer, Prompt, RolloutConfig, RolloutEngine, SamplingParams
    from agentgym_r1.adapters.backends.hf import HFBackend

    if args.model is None:
        raise ConfigError("give a saved batch, or --model (a directory, or 'tiny') for a fresh rollout")
    try:
        given = json.loads(args.env_kwargs) if args.env_kwargs else {}
    except ValueError as e:
        raise ConfigError(f'--env-kwargs must be a JSON object such as \'{{"parser": "auto"}}\': {e}') from e
    if not isinstance(given, dict):
        raise ConfigError(f'--env-kwargs must be a JSON object such as \'{{"parser": "auto"}}\', got {given!r}')
    env_kwargs = {**_default_kwargs(args.env), **given}
    tokenizer, model = _tiny(args.template, args.tiny_expert) if args.model == "tiny" else _local(args)
    chat = ChatTokenizer(tokenizer)
    engine = RolloutEngine(
        HFBackend(model, chat),
        chat,
        RolloutConfig(
            max_turns=args.max_turns, seed=args.seed, sampling=SamplingParams(max_new_tokens=args.max_new_tokens)
        ),
    )
    batch = engine.rollout([Prompt(args.env, env_kwargs, seed=args.seed)])
    engine.close()
    return tokenizer, _pick([_row_of(s) for s in batch.samples], args.row, "the rollout")


def _row_of(sample: Any) -> Row:
    return {
        k: getattr(sample, k)
        for k in ("prompt_ids", "completion_ids", "env_mask", "logprobs", "step_ends", "step_rewards")
    }


def _default_kwargs(env_id: str) -> dict[str, Any]:
    return {"source": "synthetic"} if env_id in ("AgentR1/GSM8K-v0", "AgentR1/HotpotQA-v0") else {}


def _tiny(template: str | None, expert: Callable[[Any], list[str]] | None) -> tuple[Any, Any]:
    from agentgym_r1.adapters.scratch import expert_corpus, family_tokenizer, make_model, train_tokenizer

    if expert is None:
        raise ConfigError(
            "--model tiny needs an expert for its tokenizer's corpus: give add_inspect_parser "
            "tiny_expert=agentgym_r1.envs.gsm8k.expert.expert_actions (agentgym-r1's CLI does)"
        )
    tokenizer = train_tokenizer(expert_corpus("AgentR1/GSM8K-v0", {"source": "synthetic"}, expert, 20), vocab_size=400)
    if template:
        tokenizer = family_tokenizer(tokenizer, _template_text(template))
    return tokenizer, make_model(tokenizer)


def _local(args: argparse.Namespace) -> tuple[Any, Any]:
    require("transformers", "train", "agentgym-r1 inspect --model")
    if not Path(args.model).is_dir():
        raise ConfigError(f"the model directory {args.model} does not exist")
    tokenizer = _tokenizer(args.tokenizer or args.model, args.template)
    return tokenizer, load_model(args.model, "--model", device="cpu")
