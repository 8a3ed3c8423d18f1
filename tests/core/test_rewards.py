"""The reward functions against the official SQuAD v1.1 / HotpotQA evaluation semantics."""

import pytest

from agentgym_r1.core.rewards import (
    char_f1,
    exact_match,
    f1_precision_recall,
    f1_score,
    normalize_answer,
    numeric_equal,
    parse_number,
    qa_scores,
    substring_exact_match,
)


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an  apple a day ", "apple day"),
        ("Theatre", "theatre"),  # 'the' only as a whole word
        ("U.S.A.", "usa"),
        ("Anne's   book", "annes book"),
        ("A", ""),
    ],
)
def test_normalize_answer_is_squads(raw, normalized):
    assert normalize_answer(raw) == normalized


@pytest.mark.parametrize(
    ("pred", "gold", "em", "f1"),
    [
        ("the Eiffel Tower", "Eiffel Tower", 1.0, 1.0),
        ("Eiffel", "Eiffel Tower", 0.0, 2 * 1 * 0.5 / 1.5),
        ("Tower Eiffel", "Eiffel Tower", 0.0, 1.0),  # bag of tokens
        ("yes", "no", 0.0, 0.0),
        ("yes it is", "yes", 0.0, 0.0),  # HotpotQA: yes/no are all or nothing
        ("no", "no", 1.0, 1.0),
        ("Paris France", "Paris", 0.0, 2 * 0.5 * 1 / 1.5),
        ("", "Paris", 0.0, 0.0),
        ("1,000", "1000", 1.0, 1.0),  # punctuation removed
    ],
)
def test_em_and_f1_table(pred, gold, em, f1):
    assert exact_match(pred, gold) == em
    assert f1_score(pred, gold) == pytest.approx(f1)


def test_f1_precision_recall_and_multiple_golds():
    f1, p, r = f1_precision_recall("a b c d", "c d e")
    assert (p, r) == (pytest.approx(2 / 3), pytest.approx(2 / 3))  # 'a' is an article and is removed
    assert f1 == pytest.approx(2 / 3)
    assert f1_score("Barack Obama", ["Obama", "Barack Obama"]) == 1.0
    assert exact_match("obama", ["Barack Obama", "Obama"]) == 1.0


def test_substring_exact_match_is_search_r1s():
    assert substring_exact_match("It was the Eiffel Tower in Paris.", "Eiffel Tower") == 1.0
    assert substring_exact_match("Eiffel", "Eiffel Tower") == 0.0
    assert substring_exact_match("paris", ["London", "Paris"]) == 1.0
    assert qa_scores("Paris, France", "Paris") == {"em": 0.0, "f1": pytest.approx(2 / 3), "subem": 1.0}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("18", 18.0),
        ("$1,234.50", 1234.5),
        ("-3", -3.0),
        ("3/4", 0.75),
        ("12%", 12.0),
        ("the answer is 7 apples", 7.0),
        ("5 then 6", 6.0),
        ("none", None),
        ("1/0", None),
        ("\u22125", -5.0),
        (".5", 0.5),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


def test_numeric_equal():
    assert numeric_equal("18.0", "18")
    assert numeric_equal("$18", "18")
    assert numeric_equal("1,000", "1000")
    assert not numeric_equal("17", "18")
    assert not numeric_equal("eighteen", "18")
    assert numeric_equal("0.3333333", "1/3", rel_tol=1e-6)


@pytest.mark.parametrize(
    ("pred", "gold", "score"),
    [
        ("Kesstad", "Kesstad", 1.0),
        ("the Kesstad!", "kesstad", 1.0),  # normalised as SQuAD does
        # a blend of two names: bigrams ke es ss sm me er re against ke es ss st ta ad, 3 shared
        ("Kessmere", "Kesstad", 2 * (3 / 7) * (3 / 6) / (3 / 7 + 3 / 6)),
        ("Stuthmere", "Kesstad", 2 * (1 / 8) * (1 / 6) / (1 / 8 + 1 / 6)),  # the other name: 'st' alone
        ("Pulox Univ", "Pulox University", 2 * 1.0 * (9 / 15) / (1.0 + 9 / 15)),  # the space is a character
        ("yes", "no", 0.0),
        ("yess", "yes", 0.0),  # yes/no/noanswer: all or nothing, as HotpotQA's F1
        ("", "Kesstad", 0.0),
        ("K", "Kesstad", 0.0),  # no bigram
        ("Obama", ["Barack Obama", "Obama"], 1.0),  # the best gold
    ],
)
def test_char_f1_is_character_bigram_f1(pred, gold, score):
    assert char_f1(pred, gold) == pytest.approx(score)


def test_char_f1_orders_near_misses_between_wrong_and_right():
    gold = "Broudreivale"
    assert char_f1("Grunhaven", gold) < char_f1("Broudrhaven", gold) < char_f1("Broudreivale", gold) == 1.0
    assert char_f1("x" * 100_000, gold) == 0.0  # long text: one linear pass, no credit


def test_parse_number_keeps_no_long_answers():
    """Long answers are read without being cached (the cache kept up to 65,536 of them, 100k characters each)."""
    import gc
    import tracemalloc

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(200):  # distinct 50k-character answers, each dropped after it is read: 10 MB if kept
            assert parse_number(f"{i} " + "x" * 50_000 + " so the answer is 42") == 42.0
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 1_000_000, f"{kept:,} bytes kept after reading 10 MB of answers"
    assert parse_number("$1,234.50") == 1234.5 and parse_number("-3") == -3.0  # short texts are still read (and cached)
