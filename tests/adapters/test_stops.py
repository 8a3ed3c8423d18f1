"""The stop rules every backend shares: an end-of-turn id, or the token that completes a stop string."""

from __future__ import annotations

import pytest

from agentgym_r1.adapters.backends.base import StopScanner


@pytest.mark.parametrize(
    "text, stop",
    [
        ('<tool_call>{"name": "f"}</tool_call>\nmore', "</tool_call>"),
        ("x <answer>4</answer> and on", "</answer>"),
        ("done ✓✓ then more", "✓"),  # a character split over byte tokens
        ("a ünïcode stop word", "ünï"),
    ],
)
def test_the_turn_ends_on_the_token_that_completes_the_stop(chat, text, stop):
    decode = chat.tokenizer.decode
    ids = chat.encode(text)
    scanner = StopScanner(decode, frozenset(), ("</search>", stop))
    n, reason = scanner.cut(ids)
    assert reason == "stop" and stop in decode(ids[:n]) and stop not in decode(ids[: n - 1])


def test_end_of_turn_ids_and_no_stop(chat):
    eos = chat.tokenizer.eos_token_id
    ids = [*chat.encode("hello there"), eos, *chat.encode("after")]
    assert StopScanner(chat.tokenizer.decode, frozenset({eos}), ("</answer>",)).cut(ids) == (ids.index(eos) + 1, "eos")
    plain = chat.encode("no stop here")
    assert StopScanner(chat.tokenizer.decode, frozenset({eos}), ("</answer>",)).cut(plain) == (len(plain), None)
