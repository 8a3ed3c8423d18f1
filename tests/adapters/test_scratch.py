"""The tiny-model kit's tokenizer: ``words`` keeps a name the same tokens wherever it stands."""

from __future__ import annotations

import pytest

from agentgym_r1.adapters.scratch import train_tokenizer

pytest.importorskip("tokenizers", reason="the train extra (tokenizers, transformers) is not installed")
pytest.importorskip("transformers", reason="the train extra (tokenizers, transformers) is not installed")

NAMES = ["Goudround Press", "The Glass Destei", "Krevohaven"]
CORPUS = [
    f'Which was founded earlier, {a} or {b}? In the painting "{a}" of {b}. <answer>{a}</answer> '
    f"<search>{b}</search> founded in 1712, population 1,207,508."
    for a in NAMES
    for b in NAMES
    if a != b
] * 20


def contexts(name: str) -> list[str]:
    return [
        f"Which was founded earlier, {name} or X?",
        f'the painting "{name}" was',
        f"<answer>{name}</answer>",
        f"<search>{name}</search>",
    ]


def contains(haystack: list[int], needle: list[int]) -> bool:
    return any(haystack[i : i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


@pytest.mark.parametrize("name", NAMES)
def test_words_tokenizes_a_name_the_same_in_every_context(name: str) -> None:
    tok = train_tokenizer(CORPUS, vocab_size=400, words=True)
    alone = tok(name)["input_ids"]
    for text in contexts(name):
        ids = tok(text)["input_ids"]
        assert contains(ids, alone), (text, tok.convert_ids_to_tokens(ids), tok.convert_ids_to_tokens(alone))
        assert tok.decode(ids) == text
    assert all(len(tok.convert_ids_to_tokens([i])[0]) == 1 for i in tok("1712 1,207")["input_ids"])  # digits split


def test_cross_spaces_merges_a_name_with_its_neighbours() -> None:
    """The hazard ``words`` removes: with merges across spaces, some context turns a name into other tokens."""
    tok = train_tokenizer(CORPUS, vocab_size=400, split_digits=True, cross_spaces=True)
    differs = [
        text
        for name in NAMES
        for text in contexts(name)
        if not contains(tok(text)["input_ids"], tok(name)["input_ids"])
    ]
    assert differs


def test_words_decodes_any_text() -> None:
    tok = train_tokenizer(CORPUS, vocab_size=300, words=True)
    text = "Ünïcode ✓ naïve café — <tag> 3.5%\n\ttabs"
    assert tok.decode(tok(text)["input_ids"]) == text
