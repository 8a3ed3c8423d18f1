"""A rule-based extractive reader for multi-hop questions: the "answer from the top passages" half of naive RAG.

No model: sentences are ranked by word overlap with the question, and the answer is a span of the best sentences
that the question does not already contain, of the type the question asks for (a year or number for *when* and
*how many*, a name otherwise). Comparison questions (*which is older, A or B?*) compare the numbers found in each
option's passage. *Are A and B from the same ...?* compares what the two passages say; other yes/no questions answer
*yes* (the majority answer in HotpotQA).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "by",
        "with",
        "and",
        "or",
        "but",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "which",
        "who",
        "whom",
        "whose",
        "what",
        "when",
        "where",
        "why",
        "how",
        "many",
        "much",
        "did",
        "does",
        "do",
        "that",
        "this",
        "these",
        "those",
        "it",
        "its",
        "as",
        "than",
        "then",
        "there",
        "their",
        "they",
        "he",
        "she",
        "his",
        "her",
        "him",
        "them",
        "both",
        "same",
        "one",
        "first",
        "also",
        "has",
        "have",
        "had",
        "not",
        "no",
        "yes",
        "into",
        "after",
        "before",
        "about",
    ]
)
_WORD = re.compile(r"[A-Za-z0-9]+")
_SPAN = re.compile(r"\b(?:[A-Z][\w'’.-]*(?:\s+(?:of|the|de|la|von|van|and|&)?\s*[A-Z][\w'’-]*)*|\d[\d,]*(?:\.\d+)?)")
_NUMBER = re.compile(r"\b\d[\d,]*(?:\.\d+)?\b")
_COMPARE = re.compile(r"(?:,|:)?\s+([^,?]+?)\s+or\s+([^,?]+?)\s*\?$", re.I)
_YES_NO = re.compile(r"^(?:is|are|was|were|do|does|did|can|could|has|have|had)\b", re.I)
_SMALLER = ("first", "earlier", "older", "oldest", "earliest", "fewer", "smaller", "shorter", "lower", "less", "least")


@dataclass
class Passage:
    title: str
    text: str


def words(text: str) -> set[str]:
    """Content words, crudely stemmed (a final *s* dropped, cut to 6 letters: *headquartered* ~ *headquarters*)."""
    return {w.lower().removesuffix("s")[:6] for w in _WORD.findall(text) if w.lower() not in STOPWORDS}


def split_passages(text: str) -> list[Passage]:
    """Passages from a search result: ``Doc 1 (Title: X) ...``, ``[1] X: ...``, ``Title: X`` lines, or paragraphs."""
    heading = re.compile(
        r'^\s*(?:Doc\s*\d+\s*)?\(?\s*Title:\s*(?:"([^"\n]+)"\s*\)?|([^)\n]+)\)|(.+)$)'
        r"|^\s*\[?\d+\]?[.):]\s+(.+?)(?::|\n|$)",
        re.M,
    )
    marks = list(heading.finditer(text))
    if not marks:
        return [Passage(p.strip().split("\n", 1)[0][:80], p.strip()) for p in re.split(r"\n\s*\n", text) if p.strip()]
    out = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out.append(Passage(next(g for g in m.groups() if g is not None).strip(), text[m.end() : end].strip()))
    return out


def sentences(passage: Passage) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", passage.text) if s.strip()]


def comparison_options(question: str) -> tuple[str, str] | None:
    m = _COMPARE.search(question.strip())
    if not m:
        return None
    a = re.sub(r"^(?:the|a|an)\s+", "", m[1].split(",")[-1].strip(), flags=re.I)
    b = re.sub(r"^(?:the|a|an)\s+", "", m[2].strip(), flags=re.I)
    return (a, b) if a and b else None


_YEAR_CUES = (
    "year",
    "born",
    "founded",
    "first",
    "earlier",
    "older",
    "oldest",
    "earliest",
    "later",
    "younger",
    "newer",
    "recent",
    "established",
    "released",
    "when",
)


def _numbers(text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in _NUMBER.findall(text)]


def entity_passages(entity: str, passages: list[Passage]) -> list[Passage]:
    """The passages about ``entity``: its own (same title) first, then those that mention it."""
    own = [p for p in passages if p.title.lower() == entity.lower()]
    return own + [p for p in passages if p not in own and words(entity) <= words(p.text)]


def attribute_number(question: str, entity: str, passages: list[Passage]) -> float | None:
    """The number the question compares for ``entity``: a year for *born, founded, older, first, ...*, else the
    largest figure in the entity's own passage (a population, a height, a count)."""
    found = entity_passages(entity, passages)
    if not found:
        return None
    values = _numbers(found[0].text)
    if any(cue in question.lower() for cue in _YEAR_CUES):
        years = [v for v in values if 1 <= v <= 2100 and v.is_integer()]
        return years[0] if years else None
    return max(values) if values else None


def compare(question: str, options: tuple[str, str], passages: list[Passage]) -> str:
    """The option whose number (a year, a count) is the smaller or larger one, as the question's wording asks."""
    a, b = (attribute_number(question, option, passages) for option in options)
    if a is None or b is None or a == b:
        return options[0]
    smaller = any(w in re.findall(r"[a-z]+", question.lower()) for w in _SMALLER)
    return options[0] if (a < b) == smaller else options[1]


def yes_no(question: str, passages: list[Passage]) -> str:
    """*Are A and B from the same ...?*: compare what the two passages say; other yes/no questions: yes."""
    m = re.search(
        r"\b(?:are|were|is|was|do|does|did)\s+(.+?)\s+and\s+(.+?)\s+(?:both|from|made|of|in|the|born|"
        r"located|founded|released|written|directed)\b",
        question,
        re.I,
    )
    if not m or "same" not in question.lower():
        return "yes"
    found = [entity_passages(e.strip(' "'), passages) for e in (m[1], m[2])]
    if not all(found):
        return "yes"
    first = [sentences(f[0])[0] if sentences(f[0]) else f[0].text for f in found]
    if "year" in question.lower():
        years = [[v for v in _numbers(t) if 1000 <= v <= 2100] for t in first]
        return "yes" if years[0][:1] == years[1][:1] and years[0] else "no"
    names = [
        {c.lower() for c in candidates(question, t) if not _NUMBER.fullmatch(c)} - {e.strip(' "').lower()}
        for t, e in zip(first, (m[1], m[2]), strict=True)
    ]
    return "yes" if names[0] & names[1] else "no"


def best_sentences(question: str, passages: list[Passage], k: int = 3) -> list[str]:
    q = words(question)
    scored = [(len(q & (words(s) | words(p.title))), -i, s) for i, p in enumerate(passages) for s in sentences(p)]
    return [s for _, _, s in sorted(scored, reverse=True)[:k]]


def candidates(question: str, sentence: str) -> list[str]:
    q = words(question)
    spans = [s.strip(" ,.") for s in _SPAN.findall(sentence)]
    return [s for s in spans if s and not words(s) <= q]


def read(question: str, passages: list[Passage], exclude: tuple[str, ...] = ()) -> str:
    """The answer this reader gives to ``question`` from ``passages`` (never one of ``exclude``)."""
    if not passages:
        return "unknown"
    if _YES_NO.match(question.strip()):
        return yes_no(question, passages)
    if options := comparison_options(question):
        return compare(question, options, passages)
    wants_number = bool(re.match(r"^\s*(?:when|what year|in what year|how many|how much|how old)", question, re.I))
    titles = {p.title.lower() for p in passages}
    for sentence in best_sentences(question, passages):
        found = [c for c in candidates(question, sentence) if c.lower() not in {e.lower() for e in exclude}]
        found.sort(key=lambda c: c.lower() in titles)  # a passage's own subject is rarely the answer about it
        numbers = [c for c in found if _NUMBER.fullmatch(c)]
        names = [c for c in found if not _NUMBER.fullmatch(c)]
        pick = (numbers or names) if wants_number else (names or numbers)
        if pick:
            return pick[0]
    return passages[0].title
