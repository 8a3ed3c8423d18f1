"""A generated multi-hop knowledge base of fictional entities, and bridge and comparison questions over it.

The knowledge base (KB) is a pure function of ``(seed, size)``: countries, cities, people, organisations and works
with attributes and links (a work has a creator, a person a birthplace and an employer, an organisation a founder
and a headquarters city). Every entity has one passage, titled by its name; the passages are the search corpus, so
one index per KB serves every question.

Question ``index`` is a pure function of ``(seed, size, index)``: any index gives a question (the source is
unlimited). Each question needs two passages:

* **bridge**: the question names one entity; its passage names a second entity whose passage holds the answer
  ("In which city was the author of the novel "The Amber Velorin" born?").
* **comparison**: the question names two entities of a kind; the answer compares an attribute found in each
  passage ("Who was born first, A or B?", "Are A and B from the same country?").

Names are built from syllables, so they are unknown to any pretrained model: the answer has to be searched.

Difficulty (:class:`Knobs`, levels in :data:`LEVELS`): **three-hop** bridges (the answer is two links away from the
named entity: "On which river lies the birthplace of the author of ...?") and **bridged comparisons** (the two things
compared are each named through a bridge: "Which was founded earlier, the city where A was born or the city where B
was born?", four passages, the numbers in the last two). ``easy`` is the original generator, draw for draw. Every
question is made from the KB's own links, so its supporting passages hold the answer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from agentgym_r1.core.difficulty import check_rate

_ONSETS = (
    "b",
    "d",
    "f",
    "g",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "dr",
    "gr",
    "kr",
    "st",
    "th",
    "tr",
    "vel",
    "mor",
    "cal",
    "sh",
)
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ai", "ou", "ei")
_CODAS = ("", "", "n", "r", "l", "s", "th", "m", "nd", "rk", "sk", "x")
_COUNTRY_ENDS = ("ia", "land", "mark", "stan", "ora", "avia")
_CITY_ENDS = ("ford", "vale", "port", "burg", "mere", "holm", "wick", "stad", "gate", "haven")
_ADJECTIVES = (
    "Amber",
    "Silent",
    "Crimson",
    "Hollow",
    "Distant",
    "Golden",
    "Broken",
    "Winter",
    "Glass",
    "Iron",
    "Quiet",
    "Burning",
    "Salt",
    "Paper",
    "Velvet",
    "Hidden",
    "Last",
    "Northern",
    "Bright",
    "Falling",
)
_OCCUPATIONS = (
    "architect",
    "chemist",
    "novelist",
    "painter",
    "composer",
    "engineer",
    "historian",
    "astronomer",
    "diplomat",
    "cartographer",
    "botanist",
    "sculptor",
    "economist",
    "physician",
    "linguist",
    "pilot",
)
_ORG_KINDS = (
    ("company", "shipbuilding"),
    ("company", "software"),
    ("company", "textile"),
    ("university", "public"),
    ("orchestra", "symphony"),
    ("museum", "art"),
    ("bank", "savings"),
    ("institute", "research"),
    ("brewery", "craft"),
    ("publisher", "book"),
)
_ORG_WORDS = {
    "company": "Works",
    "university": "University",
    "orchestra": "Philharmonic",
    "museum": "Museum",
    "bank": "Bank",
    "institute": "Institute",
    "brewery": "Brewery",
    "publisher": "Press",
}
_WORK_KINDS = (
    ("novel", "written by", "author"),
    ("film", "directed by", "director"),
    ("album", "recorded by", "artist"),
    ("play", "written by", "playwright"),
    ("painting", "painted by", "painter"),
)
_GENRES = {
    "novel": ("mystery", "historical", "science fiction", "comic"),
    "film": ("drama", "thriller", "documentary"),
    "album": ("jazz", "folk", "rock", "electronic"),
    "play": ("tragic", "comic"),
    "painting": ("landscape", "portrait", "abstract"),
}
_RIVERS_PER_COUNTRY = 3


@dataclass(frozen=True, slots=True)
class City:
    name: str
    country: str
    river: str
    founded: int
    population: int


@dataclass(slots=True)
class Person:
    name: str
    she: bool
    born: int
    city: City
    occupation: str
    employer: str = ""


@dataclass(frozen=True, slots=True)
class Org:
    name: str
    kind: str
    industry: str
    founded: int
    founder: Person
    city: City


@dataclass(frozen=True, slots=True)
class Work:
    title: str
    kind: str
    verb: str
    role: str
    genre: str
    year: int
    creator: Person


@dataclass
class KnowledgeBase:
    """The entities of one seed, and one passage per entity (``passages``: title -> text)."""

    seed: int
    cities: list[City] = field(default_factory=list)
    people: list[Person] = field(default_factory=list)
    orgs: list[Org] = field(default_factory=list)
    works: list[Work] = field(default_factory=list)
    passages: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Question:
    """A generated question: the gold answer, the supporting titles (in the order to search them), the type."""

    question: str
    answer: str
    supporting: tuple[str, ...]
    type: str
    template: str


class _Names:
    """Unique generated words: no name is handed out twice in one KB."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng, self.used = rng, set()

    def word(self, syllables: int) -> str:
        parts = [_pick(self.rng, _ONSETS) + _pick(self.rng, _VOWELS) for _ in range(syllables)]
        return ("".join(parts) + _pick(self.rng, _CODAS)).capitalize()

    def unique(self, make: Callable[[], str]) -> str:
        for _ in range(1000):
            name = make()
            if name.lower() not in self.used:
                self.used.add(name.lower())
                return name
        raise RuntimeError("could not make a unique name")  # pragma: no cover (the name space is large)


def _int(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def _pick(rng: np.random.Generator, items: list | tuple):
    return items[int(rng.integers(len(items)))]


def _make_places(rng: np.random.Generator, names: _Names, n_cities: int) -> list[City]:
    countries = [names.unique(lambda: names.word(2) + _pick(rng, _COUNTRY_ENDS)) for _ in range(12)]
    rivers = {c: [names.unique(lambda: names.word(2)) for _ in range(_RIVERS_PER_COUNTRY)] for c in countries}
    cities = []
    for _ in range(n_cities):
        country = _pick(rng, countries)
        name = names.unique(lambda: names.word(int(rng.integers(1, 3))) + _pick(rng, _CITY_ENDS))
        cities.append(
            City(
                name,
                country,
                _pick(rng, rivers[country]),
                _int(rng, 800, 1900),
                _int(rng, 8, 3000) * 1000 + _int(rng, 0, 999),
            )
        )
    return cities


def _make_people(rng: np.random.Generator, names: _Names, n: int, cities: list[City]) -> list[Person]:
    people = []
    for _ in range(n):
        name = names.unique(lambda: f"{names.word(2)} {names.word(int(rng.integers(2, 4)))}")
        people.append(
            Person(name, bool(rng.integers(2)), _int(rng, 1850, 1995), _pick(rng, cities), _pick(rng, _OCCUPATIONS))
        )
    return people


def _make_orgs(rng: np.random.Generator, names: _Names, n: int, people: list[Person], cities: list[City]) -> list[Org]:
    orgs = []
    for _ in range(n):
        kind, industry = _pick(rng, _ORG_KINDS)
        name = names.unique(lambda k=kind: f"{names.word(2)} {_ORG_WORDS[k]}")
        founder = _pick(rng, people)
        orgs.append(
            Org(name, kind, industry, _int(rng, max(founder.born + 20, 1870), 2015), founder, _pick(rng, cities))
        )
    for p in people:
        p.employer = _pick(rng, orgs).name
    return orgs


def _make_works(rng: np.random.Generator, names: _Names, n: int, people: list[Person]) -> list[Work]:
    works = []
    for _ in range(n):
        kind, verb, role = _pick(rng, _WORK_KINDS)
        title = names.unique(lambda: f"The {_pick(rng, _ADJECTIVES)} {names.word(int(rng.integers(2, 4)))}")
        creator = _pick(rng, people)
        year = _int(rng, creator.born + 18, min(creator.born + 70, 2024))
        works.append(Work(title, kind, verb, role, _pick(rng, _GENRES[kind]), year, creator))
    return works


def city_passage(c: City) -> str:
    return (
        f"{c.name} is a city in {c.country}, on the {c.river} river. It was founded in {c.founded} and has a "
        f"population of {c.population:,}."
    )


def person_passage(p: Person) -> str:
    pron = "She" if p.she else "He"
    article = "an" if p.occupation[0] in "aeiou" else "a"
    return (
        f"{p.name} (born {p.born} in {p.city.name}, {p.city.country}) is {article} {p.occupation} from "
        f"{p.city.country}. {pron} works at {p.employer}."
    )


def org_passage(o: Org) -> str:
    return (
        f"{o.name} is a {o.industry} {o.kind} founded in {o.founded} by {o.founder.name}. Its headquarters "
        f"are in {o.city.name}, {o.city.country}."
    )


def work_passage(w: Work) -> str:
    return f"{w.title} is a {w.year} {w.genre} {w.kind} {w.verb} {w.creator.name}."


@functools.lru_cache(maxsize=8)
def build_kb(seed: int = 0, size: int = 1000) -> KnowledgeBase:
    """The KB of ``seed`` with about ``size`` entities (15% cities, 40% people, 15% organisations, 30% works)."""
    rng = np.random.default_rng([seed, 0x4B42])
    names = _Names(rng)
    size = max(size, 40)
    kb = KnowledgeBase(seed)
    kb.cities = _make_places(rng, names, max(4, size * 15 // 100))
    kb.people = _make_people(rng, names, max(8, size * 40 // 100), kb.cities)
    kb.orgs = _make_orgs(rng, names, max(4, size * 15 // 100), kb.people, kb.cities)
    kb.works = _make_works(rng, names, max(8, size * 30 // 100), kb.people)
    for c in kb.cities:
        kb.passages[c.name] = city_passage(c)
    for p in kb.people:
        kb.passages[p.name] = person_passage(p)
    for o in kb.orgs:
        kb.passages[o.name] = org_passage(o)
    for w in kb.works:
        kb.passages[w.title] = work_passage(w)
    return kb


# -- questions --------------------------------------------------------------------------------------------------------
def _bridge_work_city(rng, kb):
    w = _pick(rng, kb.works)
    return (
        f'In which city was the {w.role} of the {w.kind} "{w.title}" born?',
        w.creator.city.name,
        (w.title, w.creator.name),
    )


def _bridge_work_year(rng, kb):
    w = _pick(rng, kb.works)
    return (
        f'In what year was the {w.role} of the {w.kind} "{w.title}" born?',
        str(w.creator.born),
        (w.title, w.creator.name),
    )


def _bridge_work_employer(rng, kb):
    w = _pick(rng, kb.works)
    return (f'Where does the {w.role} of the {w.kind} "{w.title}" work?', w.creator.employer, (w.title, w.creator.name))


def _bridge_person_hq(rng, kb):
    p = _pick(rng, kb.people)
    org = next(o for o in kb.orgs if o.name == p.employer)
    return (f"In which city is the {org.kind} that {p.name} works at headquartered?", org.city.name, (p.name, org.name))


def _bridge_org_founder(rng, kb):
    o = _pick(rng, kb.orgs)
    return f"What is the occupation of the founder of {o.name}?", o.founder.occupation, (o.name, o.founder.name)


def _bridge_org_river(rng, kb):
    o = _pick(rng, kb.orgs)
    return (f"On which river lies the city where {o.name} has its headquarters?", o.city.river, (o.name, o.city.name))


def _two(rng, items, key):
    """Two items whose ``key`` differs (for a comparison with one right answer)."""
    for _ in range(100):
        a, b = _pick(rng, items), _pick(rng, items)
        if a is not b and key(a) != key(b):
            return a, b
    raise RuntimeError("the KB is too small for a comparison question")  # pragma: no cover


def _compare_born(rng, kb):
    a, b = _two(rng, kb.people, lambda p: p.born)
    return f"Who was born first, {a.name} or {b.name}?", (a if a.born < b.born else b).name, (a.name, b.name)


def _compare_founded(rng, kb):
    a, b = _two(rng, kb.orgs, lambda o: o.founded)
    return (
        f"Which was founded earlier, {a.name} or {b.name}?",
        (a if a.founded < b.founded else b).name,
        (a.name, b.name),
    )


def _compare_population(rng, kb):
    a, b = _two(rng, kb.cities, lambda c: c.population)
    return (
        f"Which city has more inhabitants, {a.name} or {b.name}?",
        (a if a.population > b.population else b).name,
        (a.name, b.name),
    )


def _compare_country(rng, kb):
    same = bool(rng.integers(2))
    a = _pick(rng, kb.people)
    pool = [p for p in kb.people if p is not a and (p.city.country == a.city.country) == same] or [
        p for p in kb.people if p is not a
    ]
    b = _pick(rng, pool)
    answer = "yes" if a.city.country == b.city.country else "no"
    return f"Are {a.name} and {b.name} from the same country?", answer, (a.name, b.name)


def _compare_year(rng, kb):
    same = bool(rng.integers(2))
    a = _pick(rng, kb.works)
    pool = [w for w in kb.works if w is not a and (w.year == a.year) == same] or [w for w in kb.works if w is not a]
    b = _pick(rng, pool)
    answer = "yes" if a.year == b.year else "no"
    return f'Were "{a.title}" and "{b.title}" made in the same year?', answer, (a.title, b.title)


# -- harder questions: three hops, and comparisons of entities named through a bridge ---------------------------------
def _org(kb, name):
    return next(o for o in kb.orgs if o.name == name)


def _three_work_river(rng, kb):
    w = _pick(rng, kb.works)
    c = w.creator.city
    return (
        f'On which river lies the birthplace of the {w.role} of the {w.kind} "{w.title}"?',
        c.river,
        (w.title, w.creator.name, c.name),
    )


def _three_work_hq(rng, kb):
    w = _pick(rng, kb.works)
    org = _org(kb, w.creator.employer)
    return (
        f'In which city is the employer of the {w.role} of the {w.kind} "{w.title}" headquartered?',
        org.city.name,
        (w.title, w.creator.name, org.name),
    )


def _three_org_river(rng, kb):
    o = _pick(rng, kb.orgs)
    return (
        f"On which river lies the city where the founder of {o.name} was born?",
        o.founder.city.river,
        (o.name, o.founder.name, o.founder.city.name),
    )


def _three_person_founder(rng, kb):
    p = _pick(rng, kb.people)
    org = _org(kb, p.employer)
    return (
        f"What is the occupation of the founder of the {org.kind} that {p.name} works at?",
        org.founder.occupation,
        (p.name, org.name, org.founder.name),
    )


def _bridged_born(rng, kb):
    a, b = _two(rng, kb.works, lambda w: w.creator.born)
    first = a if a.creator.born < b.creator.born else b
    return (
        f'Who was born first, the {a.role} of "{a.title}" or the {b.role} of "{b.title}"?',
        first.creator.name,
        (a.title, b.title, a.creator.name, b.creator.name),
    )


def _bridged_city_founded(rng, kb):
    a, b = _two(rng, kb.people, lambda p: p.city.founded)
    first = a if a.city.founded < b.city.founded else b
    return (
        f"Which was founded earlier, the city where {a.name} was born or the city where {b.name} was born?",
        first.city.name,
        (a.name, b.name, a.city.name, b.city.name),
    )


def _bridged_hq_population(rng, kb):
    a, b = _two(rng, kb.orgs, lambda o: o.city.population)
    more = a if a.city.population > b.city.population else b
    return (
        f"Which has more inhabitants, the city where {a.name} has its headquarters or the city where {b.name} "
        f"has its headquarters?",
        more.city.name,
        (a.name, b.name, a.city.name, b.city.name),
    )


THREE_HOP = (_three_work_river, _three_work_hq, _three_org_river, _three_person_founder)
BRIDGED_COMPARISON = (_bridged_born, _bridged_city_founded, _bridged_hq_population)


@dataclass(frozen=True)
class Knobs:
    """What makes a generated question harder: ``three_hop``, the chance that a bridge question goes through two
    bridges; ``bridged_comparison``, the chance that a comparison compares entities named through a bridge."""

    three_hop: float = 0.0
    bridged_comparison: float = 0.0

    def __post_init__(self) -> None:
        check_rate("HotpotQA synthetic", "three_hop", self.three_hop)
        check_rate("HotpotQA synthetic", "bridged_comparison", self.bridged_comparison)


LEVELS = {
    "easy": Knobs(),
    "medium": Knobs(three_hop=0.35, bridged_comparison=0.35),
    "hard": Knobs(three_hop=0.8, bridged_comparison=0.8),
}


BRIDGE = (
    _bridge_work_city,
    _bridge_work_year,
    _bridge_work_employer,
    _bridge_person_hq,
    _bridge_org_founder,
    _bridge_org_river,
)
COMPARISON = (_compare_born, _compare_founded, _compare_population, _compare_country, _compare_year)


def generate_question(seed: int, index: int, size: int = 1000, knobs: Knobs | None = None) -> Question:
    """Question ``index`` over the KB of ``(seed, size)`` at ``knobs`` (default ``easy``): bridge or comparison with
    equal odds."""
    k = knobs or Knobs()
    kb = build_kb(seed, size)
    rng = np.random.default_rng([seed, index, 0x5151])
    kind = "bridge" if rng.integers(2) else "comparison"
    harder = k.three_hop if kind == "bridge" else k.bridged_comparison
    if harder and rng.random() < harder:  # no draw at all on easy: its questions stay as they were
        make = _pick(rng, THREE_HOP if kind == "bridge" else BRIDGED_COMPARISON)
    else:
        make = _pick(rng, BRIDGE if kind == "bridge" else COMPARISON)
    question, answer, supporting = make(rng, kb)
    return Question(question, answer, supporting, kind, make.__name__.lstrip("_"))


def distractors(seed: int, index: int, size: int, supporting: tuple[str, ...], n: int = 8) -> list[str]:
    """``n`` titles of other passages drawn for question ``index``: the distractor paragraphs of its context."""
    titles = list(build_kb(seed, size).passages)
    rng = np.random.default_rng([seed, index, 0xD157])
    out: list[str] = []
    while len(out) < min(n, len(titles) - len(supporting)):
        t = _pick(rng, titles)
        if t not in supporting and t not in out:
            out.append(t)
    return out
