"""The board rendered for the terminal, as markdown, as CSV, and as one static HTML page with inline SVG plots.

The HTML page needs no network: styles and plots (made here as SVG) are inline.
"""

from __future__ import annotations

import csv
import html
import io
import math
import time

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
    return f"{100 * stat.value:.1f} ±{100 * stat.half:.1f}"


def num(stat: Stat | None) -> str:
    if stat is None or math.isnan(stat.value):
        return "-"
    return f"{stat.value:.2f} ±{stat.half:.2f}"


def _status(row: Row) -> str:
    if row.reported:
        return "reported, not run" + (f" ({row.message})" if row.message else "")
    text = row.status
    if row.planned and row.episodes < row.planned and row.status != "skipped":
        text += f" ({row.episodes}/{row.planned})"
    if row.errors:
        text += f", {row.errors} episode error(s)"
    return text + (f": {row.message}" if row.message else "")


def table(env_id: str, rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of one env's table (metrics in percent with the 95% CI half-width)."""
    cols = metric_columns(env_id)
    header = ["policy", "kind", "n", *[f"{label} %" for _, label in cols], "turns", "invalid %", "status"]
    cells = [[r.policy, KIND_LABEL.get(r.kind, r.kind), str(r.episodes) if not r.reported else "-",
              *[pct(r.metrics.get(k)) for k, _ in cols], num(r.turns), pct(r.invalid), _status(r)] for r in rows]
    return header, cells


def terminal(boards: dict[str, list[Row]]) -> str:
    out = []
    for env_id, rows in boards.items():
        header, cells = table(env_id, rows)
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header[:-1])]
        out.append(f"== {env_id} ({', '.join(sorted({r.source for r in rows if not r.reported}))})")
        for row in [header, *cells]:  # the last column (status) is left unpadded
            out.append("  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]]))
        out.append("")
    out.append(f"± is the 95% confidence interval half-width. Reported rows: {REFERENCE_SOURCE}.")
    return "\n".join(out)


def markdown(boards: dict[str, list[Row]]) -> str:
    out = ["# agentgym-r1 leaderboard", ""]
    for env_id, rows in boards.items():
        header, cells = table(env_id, rows)
        out += [f"## {env_id}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
        out.append("")
    out.append(f"± is the 95% confidence interval half-width. Rows marked *reported, not run* are copied from "
               f"{REFERENCE_SOURCE}; oracle rows read the gold answer and are upper bounds, not results.")
    return "\n".join(out) + "\n"


def to_csv(boards: dict[str, list[Row]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["env_id", "source", "policy", "kind", "seed", "episodes", "planned",
                *[f"{m}{s}" for m in ALL_METRICS for s in ("", "_low", "_high")],
                "turns", "turns_low", "turns_high", "invalid", "invalid_low", "invalid_high", "errors", "status",
                "message", "env_version", "package_version", "git_commit", "updated_at"])
    for rows in boards.values():
        for r in rows:
            stats = [*[r.metrics.get(m) for m in ALL_METRICS], r.turns, r.invalid]
            values = [_f(v) for s in stats for v in ((s.value, s.low, s.high) if s else (None, None, None))]
            w.writerow([r.env_id, r.source, r.policy, r.kind, r.seed, r.episodes, r.planned, *values, r.errors,
                        r.status, r.message or "", *(r.meta.get(k, "") for k in
                                                    ("env_version", "package_version", "git_commit", "updated_at"))])
    return buf.getvalue()


def _f(v: float | None) -> str:
    return "" if v is None or math.isnan(v) else f"{v:.6g}"


# -- HTML ------------------------------------------------------------------------------------------------------------
COLOURS = {"random": "#9aa5b1", "baseline": "#2f6fdf", "oracle": "#e08a1e", "model": "#1c9c6b", "reported": "#b9b9b9"}
CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 2em}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f0f0f0}tr.reported td{color:#777;font-style:italic}tr.oracle td{background:#fff6e8}
.note{color:#555;font-size:13px}svg text{font-size:11px;font-family:system-ui,sans-serif}"""


def bar_chart(env_id: str, rows: list[Row]) -> str:
    """A horizontal bar chart of the primary metric (percent) with 95% CI whiskers; reported rows hatched."""
    key, label = metric_columns(env_id)[0]
    shown = [r for r in rows if key in r.metrics and not math.isnan(r.metrics[key].value)]
    left, width, bar, gap = 190, 420, 16, 6
    height = 30 + len(shown) * (bar + gap)
    parts = [f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{left + width + 70}" height="{height}" '
             f'role="img" aria-label="{html.escape(env_id)} {label}">',
             '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
             'patternTransform="rotate(45)"><rect width="3" height="6" fill="#b9b9b9"/></pattern></defs>']
    for tick in range(0, 101, 25):
        x = left + width * tick / 100
        parts.append(f'<line x1="{x}" y1="14" x2="{x}" y2="{height}" stroke="#e3e3e3"/>'
                     f'<text x="{x}" y="11" text-anchor="middle">{tick}</text>')
    for i, r in enumerate(shown):
        y, s = 20 + i * (bar + gap), r.metrics[key]
        fill = "url(#hatch)" if r.reported else COLOURS.get(r.kind, "#666")
        parts.append(f'<text x="{left - 6}" y="{y + bar - 4}" text-anchor="end">{html.escape(r.policy)}</text>')
        parts.append(f'<rect class="bar {r.kind}" x="{left}" y="{y}" width="{width * max(0.0, s.value):.1f}" '
                     f'height="{bar}" fill="{fill}"><title>{html.escape(r.policy)}: {pct(s)}</title></rect>')
        if not math.isnan(s.low):
            x1, x2, ym = left + width * s.low, left + width * s.high, y + bar / 2
            parts.append(f'<line class="ci" x1="{x1:.1f}" y1="{ym}" x2="{x2:.1f}" y2="{ym}" stroke="#111"/>'
                         f'<line x1="{x1:.1f}" y1="{y + 3}" x2="{x1:.1f}" y2="{y + bar - 3}" stroke="#111"/>'
                         f'<line x1="{x2:.1f}" y1="{y + 3}" x2="{x2:.1f}" y2="{y + bar - 3}" stroke="#111"/>')
        parts.append(f'<text x="{left + width + 6}" y="{y + bar - 4}">{100 * s.value:.1f}</text>')
    parts.append("</svg>")
    return "".join(parts)


def to_html(boards: dict[str, list[Row]], title: str = "agentgym-r1 leaderboard") -> str:
    body = [f"<h1>{html.escape(title)}</h1>",
            f'<p class="note">Generated {html.escape(time.strftime("%Y-%m-%d %H:%M:%S"))}. Bars: the first metric '
            f"of each env in percent, whiskers the 95% confidence interval. Hatched bars and grey italic rows are "
            f"reported in {html.escape(REFERENCE_SOURCE)}: <b>reported, not run</b> here (different data and "
            f"model). Oracle rows read the gold answer: upper bounds, not results.</p>"]
    for env_id, rows in boards.items():
        header, cells = table(env_id, rows)
        body.append(f'<section class="env" id="{html.escape(env_id)}"><h2>{html.escape(env_id)}</h2>')
        body.append(bar_chart(env_id, rows))
        body.append('<table class="board"><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
        for r, row in zip(rows, cells, strict=True):
            body.append(f'<tr class="{r.kind}">' + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
        body.append("</table></section>")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")
