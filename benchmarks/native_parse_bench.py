"""``parser="auto"`` on the worst shapes: each family's own tool-call reader against model text up to 100,000 chars.

For every text-only chat template TRL ships (their ``_training`` twins parse alike and are left out), the env parser
``parser="auto"`` builds (:func:`agentgym_r1.adapters.native.native_parser`, over a tiny tokenizer carrying the
family's special tokens) parses: runs of every family's openers and markers alone and after each family's call
opener, the same runs cut at the marker caps (``MAX_STRING_DELIMITERS`` and ``MAX_MARKERS`` of
:mod:`agentgym_r1.adapters.tokenize`: the most markers that still reach transformers' parser), and the fuzz corpus
(:func:`agentgym_r1.core.fuzz.adversarial_actions`). It prints the worst parse per family and the shape that took it.
With ``--stock-chars N`` it also times transformers' own ``parse_response`` with TRL's template unchanged (what the env
parsed with before) on the same shapes cut to N characters, for the families given with ``--stock``.

    PYTHONPATH=. python benchmarks/native_parse_bench.py
    PYTHONPATH=. python benchmarks/native_parse_bench.py --chars 100000 --stock-chars 20000 \\
        --stock nemotron_3_nano lfm2_2_5 gemma4 gptoss glm4moe

Target: every parse <= 50 ms at 100,000 characters, as for the envs' own parsers (fuzz campaign).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from collections.abc import Callable

from agentgym_r1.adapters import ChatTokenizer
from agentgym_r1.adapters.families import trl_text_templates
from agentgym_r1.adapters.native import native_parser
from agentgym_r1.adapters.scratch import family_tokenizer, train_tokenizer
from agentgym_r1.adapters.tokenize import MAX_MARKERS, MAX_STRING_DELIMITERS, stock_response_template
from agentgym_r1.core.fuzz import adversarial_actions
from agentgym_r1.testing import gsm8k_corpus

UNITS = (
    "<arg_key>",
    "<arg_key>k</arg_key>\n<arg_value>",
    "<arg_value>",
    ", then",
    "to=functions.",
    "<tool_call>",
    "</tool_call>",
    "<|tool_call>",
    "<|tool_call_start|>",
    "<function=",
    "<parameter=",
    "<parameter=x>\n",
    "<|channel|>",
    "<|message|>",
    "<|call|>",
    '{"name":',
    "call:",
    "[",
    "(",
    "{",
    "<think>",
    "</think>",
    '<|"|>',
    "\n",
    "a='",
    "a=",
    "a=[",
    ",f(",
    "<|start|>assistant",
)
HEADS = (
    "",
    "<tool_call>\n<function=f>\n",
    "<tool_call>f\n",
    "<|tool_call_start|>[f(",
    "<|tool_call>call:f{",
    "to=functions.f<|channel|>commentary json<|message|>",
    "</think>",
)


def _run(unit: str, head: str, chars: int) -> str:
    return (head + unit * ((chars - len(head)) // len(unit) + 1))[:chars]


def shapes(chars: int) -> list[tuple[str, str]]:
    """(label, text): opener runs after each head, the same runs cut at the marker cap, and the fuzz corpus."""
    out = [(f"{head!r}+{unit!r}*", _run(unit, head, chars)) for head in HEADS for unit in UNITS]
    out += [
        (f"{head!r}+{unit!r}*{cap} + filler", (head + unit * cap + "a" * chars)[:chars])
        for head in HEADS
        for unit in UNITS
        for cap in (MAX_STRING_DELIMITERS, MAX_MARKERS)
    ]
    out += [(repr(a[:24]), a) for a in adversarial_actions(count=20, max_chars=chars)]
    return out


def worst(parse: Callable[[str], object], texts: list[tuple[str, str]]) -> tuple[float, str]:
    result = (0.0, "")
    for label, text in texts:
        start = time.perf_counter()
        parse(text)
        result = max(result, (time.perf_counter() - start, label))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chars", type=int, default=100_000)
    parser.add_argument("--families", nargs="*", default=None, help="TRL template names (default: all text-only)")
    parser.add_argument("--stock", nargs="*", default=(), help="families to time with transformers' parse_response")
    parser.add_argument("--stock-chars", type=int, default=20_000)
    a = parser.parse_args()
    from transformers.utils.chat_parsing import parse_response

    templates = trl_text_templates()
    names = a.families or sorted(n for n in templates if not n.endswith("_training"))
    with tempfile.TemporaryDirectory() as tmp:
        base = train_tokenizer(gsm8k_corpus(30), tmp, vocab_size=400)
        texts = shapes(a.chars)
        overall = (0.0, "", "")
        print(f"{len(texts)} shapes of {a.chars:,} characters (marker caps {MAX_STRING_DELIMITERS} and {MAX_MARKERS})")
        for name in names:
            chat = ChatTokenizer(family_tokenizer(base, templates[name]))
            env_parser = native_parser(chat)
            seconds, label = worst(lambda t, p=env_parser: p.parse(t, {"_echo": None}), texts)
            overall = max(overall, (seconds, name, label))
            line = f"{name:26s} worst {seconds * 1000:8.1f} ms  {label}"
            if name in a.stock and chat.response_template is not None:
                stock = stock_response_template(chat.tokenizer, templates[name])
                prefix = chat.shape.generation_prompt

                def stock_parse(t: str, s=stock, p=prefix) -> None:
                    with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError, RecursionError):
                        parse_response(t, s, prefix=p)

                cut = [(label_, text[: a.stock_chars]) for label_, text in shapes(a.stock_chars)]
                s_sec, s_label = worst(stock_parse, cut)
                ours, _ = worst(lambda t, p=env_parser: p.parse(t, {"_echo": None}), cut)
                line += (
                    f"\n{'':26s} at {a.stock_chars:,} chars: stock parse_response {s_sec * 1000:.1f} ms "
                    f"({s_label}), ours {ours * 1000:.1f} ms"
                )
            print(line, flush=True)
        print(f"worst of all: {overall[0] * 1000:.1f} ms ({overall[1]}, {overall[2]})")


if __name__ == "__main__":
    main()
