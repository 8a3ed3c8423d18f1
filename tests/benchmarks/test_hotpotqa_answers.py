"""``benchmarks/hotpotqa_answers.py``'s table: each answer lands under its gold answer, and anything but yes / no
(an unanswered episode included) counts as other."""

from __future__ import annotations

from hotpotqa_answers import answer_table


def test_answers_are_counted_under_their_gold_answer():
    table = answer_table(["Yes", "yes", "no", "no", "yes"], ["no", " YES", "no", None, "Zeikro Works"])
    assert table == {"yes": {"yes": 1, "no": 1, "other": 1}, "no": {"yes": 0, "no": 1, "other": 1}}
