"""Rendering: terminal, markdown, CSV, and the HTML page opened in headless Chromium."""

from __future__ import annotations

import csv
import html
import io
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from agentgym_r1.leaderboard import render
from agentgym_r1.leaderboard.board import board
from agentgym_r1.leaderboard.jobs import Job, run_jobs
from agentgym_r1.leaderboard.store import EpisodeRecord, ResultsStore, RunMeta, TrainingRecord


@pytest.fixture(scope="module")
def boards(tmp_path_factory):
    path = tmp_path_factory.mktemp("board") / "r.sqlite"
    jobs = [Job("AgentR1/GSM8K-v0", "synthetic", p, episodes=12) for p in ("random", "scripted", "oracle")]
    jobs += [
        Job("AgentR1/ToolEnv-v0", "lookup", "scripted", episodes=6),
        Job("AgentR1/NoSuchEnv-v0", "synthetic", "random", episodes=6),
    ]
    run_jobs(jobs, path, workers=1)
    store = ResultsStore(path)
    yield board(store)
    store.close()


def test_terminal_and_markdown_show_metrics_intervals_and_reported_rows(boards):
    text = render.terminal(boards)
    assert "== AgentR1/GSM8K-v0 (synthetic)" in text and "accuracy %" in text
    assert re.search(r"scripted\s+baseline\s+12\s+100\.0 \[75\.8, 100\.0\]", text)  # Wilson, 12 of 12
    assert "AgentR1/NoSuchEnv-v0 is not registered in this checkout" in text
    md = render.markdown(boards)
    assert re.search(r"\| policy +\| kind +\| n +\| accuracy % +\| turns +\| invalid % +\| status +\|", md)
    assert re.search(r"\| Qwen3-4B GRPO +\| reported, not run +\| - +\| 83\.3 +\|", md)
    assert "ORACLE (reads the answer)" in md


def test_csv_has_one_row_per_run_and_reported_row(boards):
    rows = list(csv.DictReader(io.StringIO(render.to_csv(boards))))
    gsm = [r for r in rows if r["env_id"] == "AgentR1/GSM8K-v0"]
    assert {r["policy"] for r in gsm if r["kind"] != "reported"} == {"random", "scripted", "oracle"}
    scripted = next(r for r in gsm if r["policy"] == "scripted")
    assert float(scripted["accuracy"]) == 1.0 and float(scripted["accuracy_low"]) < 1.0
    assert scripted["git_commit"] != "" and scripted["env_version"] == "v0"
    assert sum(r["kind"] == "reported" for r in gsm) == 5


CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    pytest.skip("headless Chromium not found: install it with `apt-get install -y chromium chromium-driver`")


def test_html_page_opens_in_headless_chromium_with_its_table_and_plots(boards, tmp_path):
    browser = _chromium()
    Image = pytest.importorskip("PIL.Image")
    page = tmp_path / "board.html"
    page.write_text(render.to_html(boards), encoding="utf-8")
    text = page.read_text()
    assert not re.search(r"""(src|href)=["'](?!#)|<link|<script|url\(http""", text)  # nothing to fetch
    base = [browser, *CHROMIUM_FLAGS]
    dom = subprocess.run(
        [*base, f"--user-data-dir={tmp_path / 'profile-dom'}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert dom.count('<table class="board">') == len(boards) == 3
    assert dom.count('<svg class="plot"') == 3 and "matplotlib" in text  # matplotlib's SVG, inline
    assert len(re.findall(r'<g id="bar-baseline-\d+"', dom)) == 2  # GSM8K and ToolEnv scripted
    assert '<g id="bar-reported-' in dom and '<g id="bar-oracle-' in dom
    assert re.search(r'<tr class="baseline"><td>scripted</td>', dom)
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            *base,
            f"--user-data-dir={tmp_path / 'profile-shot'}",
            f"--screenshot={shot}",
            "--window-size=1200,1600",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 1600)
    colours = {c for _, c in image.getcolors(maxcolors=1 << 20)}
    assert (0x2F, 0x6F, 0xDF) in colours  # a baseline bar was painted
    assert (0xE0, 0x8A, 0x1E) in colours  # an oracle bar
    assert (0xF0, 0xF0, 0xF0) in colours  # the tables' header cells


# -- a board with one env at several env options, a trained agent's long labels and a long policy spec ---------------
GSM8K = "AgentR1/GSM8K-v0"
BEFORE, AFTER = "hf:/ckpt/sft?max_new_tokens=40", "hf:/ckpt/grpo?max_new_tokens=40"
AFTER_LABEL = "tiny agent, after training (SFT + GRPO 40 steps)"  # the label the issue saw cut at the left edge
LONG_SPEC = "hf:/checkpoints/agentgym-r1/gsm8k/qwen2.5-0.5b-instruct-grpo-step-400?max_new_tokens=256&temperature=0.7"
HARD, NESTED = '{"difficulty":"hard"}', '{"difficulty":"medium","mix":{"a":1}}'


def _run(store: ResultsStore, policy: str, solved: int, options: str = "", kind: str = "baseline") -> None:
    meta = RunMeta(GSM8K, "synthetic", policy, 0, 8, policy_kind=kind, status="done", env_kwargs=options)
    run_id = store.begin_run(meta)
    for i in range(8):
        store.add_episode(
            meta,
            run_id,
            EpisodeRecord(i, i, None, i < solved, float(i < solved), 1, 0, metrics={"accuracy": float(i < solved)}),
        )
    store.finish_run(meta, "done")


@pytest.fixture(scope="module")
def options_page(tmp_path_factory) -> str:
    store = ResultsStore(tmp_path_factory.mktemp("options") / "r.sqlite")
    store.save_training(
        TrainingRecord(
            "k",
            GSM8K,
            "synthetic",
            "",
            "done",
            None,
            BEFORE,
            AFTER,
            40,
            [[0, 0.25, 8], [40, 0.75, 8]],
            {"sft_steps": 20, "grpo_steps": 40},
        )
    )
    for policy, solved, kind in (
        (BEFORE, 2, "model"),
        (AFTER, 7, "model"),
        ("scripted", 8, "baseline"),
        ("random", 1, "random"),
        (LONG_SPEC, 3, "model"),
    ):
        _run(store, policy, solved, kind=kind)
    for options in (HARD, NESTED):
        _run(store, "scripted", 5, options)
        _run(store, "random", 0, options, "random")
    skipped = RunMeta(GSM8K, "synthetic", "scripted", 0, 8, env_kwargs='{"rooms":3}')  # no bar: no chart
    store.finish_run(skipped, "skipped", "AgentR1/GSM8K-v0 does not take --env-kwargs")
    page = render.to_html(board(store), store.trainings())
    store.close()
    return page


class Charts(HTMLParser):
    """Each bar chart (``<svg class="plot">``; a learning curve is ``plot curve``) of a page: the caption shown with it
    (its ``figure``'s ``figcaption``, "" when none), its aria-label and the texts drawn in it (its ``text``
    elements)."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: list[dict] = []
        self.caption = self.where = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure":
            self.caption = ""
        elif tag == "figcaption":
            self.where = "caption"
        elif tag == "text" and self.where == "svg":
            self.where = "text"
        elif tag == "svg" and a.get("class") == "plot":
            self.charts.append({"caption": self.caption, "label": a.get("aria-label"), "texts": []})
            self.where = "svg"

    def handle_endtag(self, tag):
        if tag == "figcaption" or tag == "svg":
            self.where = ""
        elif tag == "text" and self.where == "text":
            self.where = "svg"
        if tag == "figure":
            self.caption = ""

    def handle_data(self, data):
        if self.where == "caption":
            self.caption += data
        elif self.where == "text":
            self.charts[-1]["texts"].append(data)


def test_rows_of_other_env_options_are_drawn_in_their_own_chart_named_by_its_options(options_page):
    parser = Charts()
    parser.feed(options_page)
    charts = parser.charts
    # one per options with a bar: the defaults, hard, medium+mix (not rooms=3, whose only run was skipped)
    assert len(charts) == 3, [c["caption"] for c in charts]
    assert "rooms=3" in options_page  # in the table, with its reason
    for chart in charts:  # today's page: one uncaptioned chart with 'scripted' and 'random' three times each
        assert chart["caption"].startswith(f"{GSM8K}, accuracy (%); env options: "), chart
        assert chart["label"] == chart["caption"]  # the aria-label too (a quote in the options stays inside it)
        assert chart["texts"].count("scripted") == 1 and chart["texts"].count("random") == 1, chart
    defaults, hard, nested = charts
    assert defaults["caption"].endswith("env options: none (the defaults)")
    assert AFTER_LABEL in defaults["texts"] and "Qwen3-4B GRPO" in defaults["texts"]  # the paper's rows: defaults
    assert hard["caption"].endswith("env options: difficulty=hard") and AFTER_LABEL not in hard["texts"]
    assert nested["caption"].endswith('env options: difficulty=medium mix={"a":1}')


MEASURE = """<script>
const out = [];
for (const svg of document.querySelectorAll("svg.plot")) {
  const box = svg.getBoundingClientRect();
  for (const t of svg.querySelectorAll("text")) {
    const r = t.getBoundingClientRect();
    out.push({chart: svg.getAttribute("aria-label"), text: t.textContent,
              margins: [r.left - box.left, r.top - box.top, box.right - r.right, box.bottom - r.bottom]});
  }
}
const pre = document.createElement("pre");
pre.id = "measured";
pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def test_every_label_lies_inside_its_chart_in_headless_chromium(options_page, tmp_path):
    """The browser lays the page out; a script added to a copy of it measures every text of every chart against the
    chart's box (an inline SVG clips at its viewport: a label out of it is cut, as the trained rows' were)."""
    browser = _chromium()
    page = tmp_path / "measured.html"
    page.write_text(options_page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    dom = subprocess.run(
        [
            browser,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1200,1600",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    measured = json.loads(html.unescape(re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S).group(1)))
    texts = {m["text"] for m in measured}
    assert {AFTER_LABEL, "scripted", "accuracy (%)", "GRPO step (0: the SFT checkpoint)"} <= texts
    cut = [
        (m["chart"], m["text"], [round(x, 1) for x in m["margins"]]) for m in measured if min(m["margins"]) < -0.5
    ]  # half a pixel for rounding
    assert not cut, f"texts out of their chart (margins left, top, right, bottom in px): {cut}"
    assert any(LONG_SPEC.startswith(t) and len(t) < len(LONG_SPEC) for t in texts)  # the long spec wrapped
