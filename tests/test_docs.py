"""The documents a reader lands on stay usable: the benchmarks index is an index (one screen of rows, each linking a
report page), every relative link in the README, the index, the report pages and docs/ points at a file in the tree,
and no path of a development machine (``/work/...``, ``/tmp/...``) is left in the README or under benchmarks/."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "benchmarks" / "README.md"
INDEX_MAX_LINES = 200
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")  # [text](target) and [text](target "title")
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|tmp)/")


def documents() -> list[Path]:
    pages = [ROOT / "README.md", INDEX]
    pages += sorted((ROOT / "benchmarks" / "reports").glob("*.md"))
    pages += sorted((ROOT / "docs").glob("**/*.md"))
    return [p for p in pages if p.is_file()]


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # code blocks hold no links
    targets = [m.group(1) for m in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_the_benchmarks_index_is_one_screen_of_rows_not_a_lab_notebook():
    lines = INDEX.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= INDEX_MAX_LINES, (
        f"benchmarks/README.md has {len(lines)} lines (at most {INDEX_MAX_LINES}): put a study's protocol, tables and "
        f"commands on its page under benchmarks/reports/ and keep one row for it in the index"
    )


def test_the_index_links_a_report_page_for_its_studies():
    reports = {t for t in relative_links(INDEX) if t.split("#")[0].startswith("reports/")}
    assert len(reports) >= 5, f"the index links {sorted(reports)}: each study gets a page under benchmarks/reports/"


def anchors(page: Path) -> set[str]:
    """The heading anchors GitHub makes: lowercased, punctuation but ``-`` and ``_`` dropped, spaces as ``-``, a
    repeated slug suffixed ``-1``, ``-2``..."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


@pytest.mark.parametrize("page", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file_in_the_tree(page):
    missing = [t for t in relative_links(page) if not (page.parent / t.split("#")[0]).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to files that are not in the tree: {missing}"


@pytest.mark.parametrize("page", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_to_a_section_names_a_heading_of_its_page(page):
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    targets = [m.group(1) for m in LINK.finditer(text) if "#" in m.group(1)]
    broken = []
    for target in targets:
        path, anchor = target.split("#", 1)
        linked = page if not path else page.parent / path
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or linked.suffix != ".md" or not linked.is_file():
            continue  # another site, or a missing file (the test above names it)
        if anchor not in anchors(linked):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to sections that are not there: {broken}"


def test_no_path_of_a_development_machine_in_the_readme_or_benchmarks():
    texts = {".md", ".py", ".svg", ".txt", ".json"}
    files = [
        ROOT / "README.md",
        *sorted(p for p in (ROOT / "benchmarks").rglob("*") if p.is_file() and p.suffix in texts),
    ]
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, (
        "paths of a development machine (write them relative to the repository, e.g. runs/...):\n" + "\n".join(found)
    )
