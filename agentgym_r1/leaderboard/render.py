"""The board rendered for the terminal and as markdown (``tabulate``), as CSV, and as one static HTML page
(a ``jinja2`` template) with a ``matplotlib`` bar chart per env, inline as SVG.

The HTML page needs no network: styles and plots are inline.
"""

from __future__ import annotations

import csv
import io
import math
import time
from importlib import resources

from agentgym_r1.leaderboard.board import REFERENCE_SOURCE, Row, Stat, metric_columns

KIND_LABEL = {"random": "random", "baseline": "baseline", "oracle": "ORACLE (reads the answer)", "model": "model",
              "reported": "reported, not run", "unknown": "?"}
ALL_METRICS = ("accuracy", "em", "f1", "success", "score")


def pct(stat: Stat | None, ci: bool = True) -> str:
    if stat is None or math.isnan(stat.value):
        return "-"
    if math.isnan(stat.low):  # a reported figure: as precise as it was reported
        return f"{100 * stat.value:.4g}"
    if not ci:
        return f"{100 * stat.value:.1f}"
    return f"{100 * stat.value:.1f} [{100 * stat.low:.1f}, {100 * stat.high:.1f}]"


def num(stat: Stat | None) -> str:
    if stat is None or math.isnan(stat.value):
        return "-"
    return f"{stat.value:.2f} [{stat.low:.2f}, {stat.high:.2f}]"


def _status(row: Row) -> str:
    if row.reported:
        return "reported, not run" + (f" ({row.message})" if row.message else "")
    text = row.status
    if row.planned and row.episodes < row.planned and row.status != "skipped":
        text += f" ({row.episodes}/{row.planned})"
    if row.errors:
        text += f", {row.errors} failed"
    return text + (f": {row.message}" if row.message else "")


def table(env_id: str, rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of one env's table (metrics in percent with the 95% CI half-width)."""
    cols = metric_columns(env_id)
    ks = sorted({r.passk[0] for r in rows if r.passk})
    passk = ["pass@1 %", f"pass@{'/'.join(map(str, ks))} %"] if ks else []
    options = ["env options"] if any(r.options for r in rows) else []  # e.g. difficulty=hard
    header = ["policy", *options, "kind", "n", *[f"{label} %" for _, label in cols], *passk, "turns", "invalid %",
              "status"]
    cells = [[r.policy, *([r.options or "-"] if options else []), KIND_LABEL.get(r.kind, r.kind),
              str(r.episodes) if not r.reported else "-",
              *[pct(r.metrics.get(k)) for k, _ in cols], *(_passk(r) if ks else []), num(r.turns), pct(r.invalid),
              _status(r)] for r in rows]
    return header, cells


def _passk(row: Row) -> list[str]:
    if not row.passk:
        return ["-", "-"]
    _, one, at_k = row.passk
    return [pct(one), pct(at_k)]


def terminal(boards: dict[str, list[Row]]) -> str:
    from tabulate import tabulate

    out = []
    for env_id, rows in boards.items():
        header, cells = table(env_id, rows)
        out.append(f"== {env_id} ({', '.join(sorted({r.source for r in rows if not r.reported}))})")
        out += [tabulate(cells, header, tablefmt="simple", disable_numparse=True), ""]
    out.append(f"[low, high] is the 95% confidence interval (Wilson for rates, Student's t for means). Reported rows: "
               f"{REFERENCE_SOURCE}.")
    return "\n".join(out)


def markdown(boards: dict[str, list[Row]]) -> str:
    from tabulate import tabulate

    out = ["# agentgym-r1 leaderboard", ""]
    for env_id, rows in boards.items():
        header, cells = table(env_id, rows)
        out += [f"## {env_id}", "", tabulate(cells, header, tablefmt="github", disable_numparse=True), ""]
    out.append(f"[low, high] is the 95% confidence interval (Wilson for rates, Student's t for means). Rows marked *reported, not run* are copied from "
               f"{REFERENCE_SOURCE}; oracle rows read the gold answer and are upper bounds, not results.")
    return "\n".join(out) + "\n"


def to_csv(boards: dict[str, list[Row]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["env_id", "source", "policy", "kind", "seed", "episodes", "planned",
                *[f"{m}{s}" for m in ALL_METRICS for s in ("", "_low", "_high")],
                "turns", "turns_low", "turns_high", "invalid", "invalid_low", "invalid_high", "errors", "status",
                "message", "env_version", "package_version", "git_commit", "updated_at", "env_options"])
    for rows in boards.values():
        for r in rows:
            stats = [*[r.metrics.get(m) for m in ALL_METRICS], r.turns, r.invalid]
            values = [_f(v) for s in stats for v in ((s.value, s.low, s.high) if s else (None, None, None))]
            w.writerow([r.env_id, r.source, r.policy, r.kind, r.seed, r.episodes, r.planned, *values, r.errors,
                        r.status, r.message or "", *(r.meta.get(k, "") for k in
                                                    ("env_version", "package_version", "git_commit", "updated_at")),
                        r.options])
    return buf.getvalue()


def _f(v: float | None) -> str:
    return "" if v is None or math.isnan(v) else f"{v:.6g}"


# -- HTML ------------------------------------------------------------------------------------------------------------
COLOURS = {"random": "#9aa5b1", "baseline": "#2f6fdf", "oracle": "#e08a1e", "model": "#1c9c6b", "reported": "#b9b9b9"}


def bar_chart(env_id: str, rows: list[Row]) -> str:
    """A horizontal bar chart of the primary metric (percent) with 95% CI whiskers, as an inline ``<svg
    class="plot">`` drawn by matplotlib's SVG backend (text kept as text). Each bar is a group ``id="bar-KIND-I"``;
    reported rows are hatched."""
    import matplotlib
    from matplotlib.figure import Figure

    key, label = metric_columns(env_id)[0]
    shown = [r for r in rows if key in r.metrics and not math.isnan(r.metrics[key].value)]
    fig = Figure(figsize=(7.5, 0.6 + 0.32 * max(1, len(shown))))
    ax = fig.add_axes((0.3, 0.5 / fig.get_figheight(), 0.62, 1 - 0.8 / fig.get_figheight()))
    for i, r in enumerate(shown):
        s, y = r.metrics[key], len(shown) - 1 - i
        bar = ax.barh(y, 100 * max(0.0, s.value), height=0.7, color="white" if r.reported else COLOURS.get(r.kind),
                      edgecolor=COLOURS["reported"] if r.reported else "none", hatch="///" if r.reported else None,
                      antialiased=False)
        bar.patches[0].set_gid(f"bar-{r.kind}-{i}")
        if not math.isnan(s.low):
            ax.errorbar(100 * s.value, y, xerr=[[100 * (s.value - s.low)], [100 * (s.high - s.value)]], color="#111",
                        capsize=3, linewidth=1)
        ax.text(101, y, f"{100 * s.value:.1f}", va="center", fontsize=8)
    ax.set_yticks(range(len(shown)), [r.policy for r in reversed(shown)], fontsize=8)
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"{label} (%)", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#e3e3e3")
    ax.set_axisbelow(True)
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": env_id}):
        fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    return svg.replace("<svg", f'<svg class="plot" role="img" aria-label="{env_id} {label}"', 1)


def to_html(boards: dict[str, list[Row]], title: str = "agentgym-r1 leaderboard") -> str:
    """The page from the ``templates/board.html.j2`` template (autoescaped; the plots are inserted as markup)."""
    import jinja2

    source = resources.files("agentgym_r1.leaderboard").joinpath("templates/board.html.j2").read_text("utf-8")
    template = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True).from_string(source)
    envs = []
    for env_id, rows in boards.items():
        header, cells = table(env_id, rows)
        envs.append({"id": env_id, "plot": bar_chart(env_id, rows), "header": header,
                     "rows": [{"kind": r.kind, "cells": c} for r, c in zip(rows, cells, strict=True)]})
    failed = sum(r.errors for rows in boards.values() for r in rows)
    return template.render(title=title, generated=time.strftime("%Y-%m-%d %H:%M:%S"), envs=envs, failed=failed,
                           reference_source=REFERENCE_SOURCE)
