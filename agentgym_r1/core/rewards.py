"""Reward functions: pure functions of a prediction and the gold answer.

QA metrics follow the official evaluation scripts: answer normalisation, exact match and token F1 as in SQuAD v1.1's
``evaluate-v1.1.py`` and HotpotQA's ``hotpot_evaluate_v1.py`` (whose F1 scores ``yes``/``no``/``noanswer`` as all or
nothing), and substring exact match as in Search-R1 (the normalised gold answer occurs in the normalised prediction).
Math answers compare by numeric value.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import string
from collections import Counter
from collections.abc import Iterable
from fractions import Fraction

_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_YES_NO = ("yes", "no", "noanswer")


def normalize_answer(s: str) -> str:
    """Lower-case, drop punctuation, drop articles (a, an, the), collapse whitespace: SQuAD's normalisation."""
    return " ".join(_ARTICLES.sub(" ", s.lower().translate(_PUNCT)).split())


def _golds(gold: str | Iterable[str]) -> list[str]:
    return [gold] if isinstance(gold, str) else list(gold)


def exact_match(prediction: str, gold: str | Iterable[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer."""
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(g) for g in _golds(gold)))


def substring_exact_match(prediction: str, gold: str | Iterable[str]) -> float:
    """1.0 when a normalised gold answer occurs in the normalised prediction (Search-R1's ``subem``)."""
    p = normalize_answer(prediction)
    return float(any(normalize_answer(g) in p for g in _golds(gold)))


def f1_precision_recall(prediction: str, gold: str) -> tuple[float, float, float]:
    """Token F1, precision and recall as HotpotQA computes them (``yes``/``no``/``noanswer`` all or nothing)."""
    p, g = normalize_answer(prediction), normalize_answer(gold)
    if (p in _YES_NO or g in _YES_NO) and p != g:
        return 0.0, 0.0, 0.0
    return _overlap_f1(Counter(p.split()), Counter(g.split()))


def _overlap_f1(pred: Counter, ref: Counter) -> tuple[float, float, float]:
    """F1, precision and recall of the multiset overlap of a prediction's units (tokens, bigrams) with the gold's."""
    same = sum((pred & ref).values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision, recall = same / pred.total(), same / ref.total()
    return 2 * precision * recall / (precision + recall), precision, recall


def f1_score(prediction: str, gold: str | Iterable[str]) -> float:
    """Best token F1 over the gold answers."""
    return max((f1_precision_recall(prediction, g)[0] for g in _golds(gold)), default=0.0)


def char_f1(prediction: str, gold: str | Iterable[str]) -> float:
    """Best character-bigram F1 over the gold answers: chrF (Popovic, 2015) with n = 2 and beta = 1, on normalised
    text with its spaces. Partial credit for an answer a few characters off (a misspelt or half-copied name), where
    token F1 gives a one-word answer all or nothing. ``yes``/``no``/``noanswer`` are all or nothing, as in HotpotQA's
    F1. One pass over each string (a Counter of bigrams), so a long prediction costs linear time."""
    p = normalize_answer(prediction)
    return max((_char_f1(p, normalize_answer(g)) for g in _golds(gold)), default=0.0)


def _char_f1(p: str, g: str) -> float:
    if p == g:
        return 1.0
    if p in _YES_NO or g in _YES_NO or len(p) < 2 or len(g) < 2:
        return 0.0
    return _overlap_f1(Counter(itertools.pairwise(p)), Counter(itertools.pairwise(g)))[0]


def qa_scores(prediction: str, gold: str | Iterable[str]) -> dict[str, float]:
    """``em``, ``f1`` and ``subem`` in one dict."""
    return {
        "em": exact_match(prediction, gold),
        "f1": f1_score(prediction, gold),
        "subem": substring_exact_match(prediction, gold),
    }


# -- numbers -----------------------------------------------------------------------------------------------------------
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:\s*/\s*\d+)?|-?\.\d+")


CACHED_CHARS = 64  # texts up to this long are cached: gold answers and short predictions, read again and again


def parse_number(text: str) -> float | None:
    """The last number written in ``text`` (``$1,234.50``, ``-3``, ``3/4``, ``12%`` -> 12), or ``None``.

    Only texts of at most :data:`CACHED_CHARS` characters are cached (8,192 of them: a few MB at most), so the cache
    never keeps a model's long answers (up to the action limit each)."""
    return _cached_number(text) if len(text) <= CACHED_CHARS else _number(text)


@functools.lru_cache(maxsize=8192)
def _cached_number(text: str) -> float | None:
    return _number(text)


def _number(text: str) -> float | None:
    try:  # the common case: a plain number
        value = float(text)
        return value if math.isfinite(value) else None
    except ValueError:
        pass
    found = _NUMBER.findall(text.replace("\u2212", "-"))
    if not found:
        return None
    token = found[-1].replace(",", "").replace(" ", "")
    try:
        value = float(Fraction(token)) if "/" in token else float(token)
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def numeric_equal(prediction: str, gold: str | float, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """Whether the prediction's number equals the gold number, within a relative tolerance."""
    p = parse_number(prediction)
    g = gold if isinstance(gold, float | int) else parse_number(gold)
    if p is None or g is None:
        return False
    return math.isclose(p, float(g), rel_tol=rel_tol, abs_tol=abs_tol)
