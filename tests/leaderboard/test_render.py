"""Rendering: terminal, markdown, CSV, and the HTML page opened in headless Chromium."""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess

import pytest

from agentgym_r1.leaderboard import render
from agentgym_r1.leaderboard.board import board
from agentgym_r1.leaderboard.jobs import Job, run_jobs
from agentgym_r1.leaderboard.store import ResultsStore


@pytest.fixture(scope="module")
def boards(tmp_path_factory):
    path = tmp_path_factory.mktemp("board") / "r.sqlite"
    jobs = [Job("AgentR1/GSM8K-v0", "synthetic", p, episodes=12) for p in ("random", "scripted", "oracle")]
    jobs += [Job("AgentR1/ToolEnv-v0", "lookup", "scripted", episodes=6),
             Job("AgentR1/NoSuchEnv-v0", "synthetic", "random", episodes=6)]
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


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


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
    dom = subprocess.run([*base, f"--user-data-dir={tmp_path / 'profile-dom'}", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert dom.count('<table class="board">') == len(boards) == 3
    assert dom.count('<svg class="plot"') == 3 and "matplotlib" in text  # matplotlib's SVG, inline
    assert len(re.findall(r'<g id="bar-baseline-\d+"', dom)) == 2  # GSM8K and ToolEnv scripted
    assert '<g id="bar-reported-' in dom and '<g id="bar-oracle-' in dom
    assert re.search(r'<tr class="baseline"><td>scripted</td>', dom)
    shot = tmp_path / "shot.png"
    subprocess.run([*base, f"--user-data-dir={tmp_path / 'profile-shot'}", f"--screenshot={shot}",
                    "--window-size=1200,1600", page.as_uri()], capture_output=True, timeout=120, check=True)
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 1600)
    colours = {c for _, c in image.getcolors(maxcolors=1 << 20)}
    assert (0x2F, 0x6F, 0xDF) in colours  # a baseline bar was painted
    assert (0xE0, 0x8A, 0x1E) in colours  # an oracle bar
    assert (0xF0, 0xF0, 0xF0) in colours  # the tables' header cells
