"""The board rendered for the terminal and as markdown (``tabulate``), as CSV, and as one static HTML page
(a ``jinja2`` template) with a ``matplotlib`` bar chart per env and env options, inline as SVG.

The HTML page needs no network: styles and plots are inline.
"""

from __future__ import annotations

import csv
import html
import io
import math
import textwrap
import time
from collections.abc import Sequence
from importlib import resources

from agentgym_r1.leaderboard.board import REFERENCE_SOURCE, Row, Stat, metric_columns, training_state, wilson
from agentgym_r1.leaderboard.store import TrainingRecord
from agentgym_r1.leaderboard.suites import options_label

KIND_LABEL = {
    "random": "random",
    "baseline": "baseline",
    "oracle": "ORACLE (reads the answer)",
    "model": "model",
    "trained": "trained in this run",
    "reported": "reported, not run",
    "unknown": "?",
}
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
    header = [
        "policy",
        *options,
        "kind",
        "n",
        *[f"{label} %" for _, label in cols],
        *passk,
        "turns",
        "invalid %",
        "status",
    ]
    cells = [
        [
            r.policy,
            *([r.options or "-"] if options else []),
            KIND_LABEL.get(r.kind, r.kind),
            str(r.episodes) if not r.reported else "-",
            *[pct(r.metrics.get(k)) for k, _ in cols],
            *(_passk(r) if ks else []),
            num(r.turns),
            pct(r.invalid),
            _status(r),
        ]
        for r in rows
    ]
    return header, cells


def _passk(row: Row) -> list[str]:
    if not row.passk:
        return ["-", "-"]
    _, one, at_k = row.passk
    return [pct(one), pct(at_k)]


def training_summary(rec: TrainingRecord) -> str:
    """One paragraph on an agent trained in the run: the recipe, held-out success before and after, the learning
    curve's points, the checkpoint; or why its row is missing."""
    b = rec.budget
    where = ", ".join(filter(None, (rec.source, options_label(rec.env_kwargs))))  # no dangling comma without options
    what = (
        f"Trained in this run on {rec.env_id} ({where}): a tiny Qwen2 "
        f"({b.get('layers')} layers, hidden {b.get('hidden')}) and its tokenizer built on the spot, SFT "
        f"{b.get('sft_steps')} steps on expert episodes, then GRPO {b.get('grpo_steps')} steps "
        f"({b.get('grpo_prompts')} tasks x {b.get('generations')} samples a step), seed {b.get('seed')}."
    )
    curve = ", ".join(f"{int(p[0])}: {100 * p[1]:.1f}" for p in rec.curve)
    points = (
        f" Held-out success by GRPO step (greedy, on the first {int(rec.curve[0][2])} of the rows' episodes): {curve}."
        if rec.curve
        else ""
    )
    if rec.status == "skipped":
        return f"{what} Not trained here: {training_state(rec)}"
    if rec.status != "done":
        return f"{what} TRAINING ROW MISSING: {training_state(rec)}.{points}"
    (_, first, n), (steps, last, _) = rec.curve[0], rec.curve[-1]
    return (
        f"{what} On the curve's {int(n)} held-out episodes: {100 * first:.1f}% -> {100 * last:.1f}% "
        f"({100 * (last - first):+.1f} points after {int(steps)} GRPO steps).{points} Checkpoint: {rec.checkpoint}."
    )


def paired_lines(rows: Sequence[Row]) -> list[str]:
    """Under an env's table: each trained agent's paired test (its after-training row against its start, episode by
    episode) and, where a trained row is shown, what its figures depend on
    (:data:`~agentgym_r1.leaderboard.training.DEPENDS`)."""
    from agentgym_r1.leaderboard.training import DEPENDS

    lines = [
        f"Paired test, '{r.policy}' against its start on the same {p.pairs} episodes: {p.gained} newly solved, "
        f"{p.lost} lost; McNemar's exact p = {p.p:.2g}."
        for r in rows
        if (p := r.paired) is not None
    ]
    return lines + ([DEPENDS] if any(r.kind == "trained" and r.episodes for r in rows) else [])


def _summaries(env_id: str, trainings: Sequence[TrainingRecord]) -> list[str]:
    return [training_summary(t) for t in trainings if t.env_id == env_id]


def terminal(boards: dict[str, list[Row]], trainings: Sequence[TrainingRecord] = ()) -> str:
    from tabulate import tabulate

    out = []
    for env_id, rows in boards.items():
        header, cells = table(env_id, rows)
        out.append(f"== {env_id} ({', '.join(sorted({r.source for r in rows if not r.reported}))})")
        out += [
            tabulate(cells, header, tablefmt="simple", disable_numparse=True),
            *paired_lines(rows),
            *_summaries(env_id, trainings),
            "",
        ]
    out.append(
        f"[low, high] is the 95% confidence interval (Wilson for rates, Student's t for means). Reported rows: "
        f"{REFERENCE_SOURCE}."
    )
    return "\n".join(out)


def markdown(boards: dict[str, list[Row]], trainings: Sequence[TrainingRecord] = ()) -> str:
    from tabulate import tabulate

    out = ["# agentgym-r1 leaderboard", ""]
    for env_id, rows in boards.items():
        header, cells = table(env_id, rows)
        out += [f"## {env_id}", "", tabulate(cells, header, tablefmt="github", disable_numparse=True), ""]
        out += [line for text in paired_lines(rows) for line in (text, "")]
        out += [line for text in _summaries(env_id, trainings) for line in (text, "")]
    out.append(
        "[low, high] is the 95% confidence interval (Wilson for rates, Student's t for means). "
        "Rows marked *reported, not run* are copied from "
        f"{REFERENCE_SOURCE}; oracle rows read the gold answer and are upper bounds, not results."
    )
    return "\n".join(out) + "\n"


def to_csv(boards: dict[str, list[Row]], trainings: Sequence[TrainingRecord] = ()) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(
        [
            "env_id",
            "source",
            "policy",
            "kind",
            "seed",
            "episodes",
            "planned",
            *[f"{m}{s}" for m in ALL_METRICS for s in ("", "_low", "_high")],
            "turns",
            "turns_low",
            "turns_high",
            "invalid",
            "invalid_low",
            "invalid_high",
            "errors",
            "status",
            "message",
            "env_version",
            "package_version",
            "git_commit",
            "updated_at",
            "env_options",
        ]
    )
    for rows in boards.values():
        for r in rows:
            stats = [*[r.metrics.get(m) for m in ALL_METRICS], r.turns, r.invalid]
            values = [_f(v) for s in stats for v in ((s.value, s.low, s.high) if s else (None, None, None))]
            w.writerow(
                [
                    r.env_id,
                    r.source,
                    r.policy,
                    r.kind,
                    r.seed,
                    r.episodes,
                    r.planned,
                    *values,
                    r.errors,
                    r.status,
                    r.message or "",
                    *(r.meta.get(k, "") for k in ("env_version", "package_version", "git_commit", "updated_at")),
                    r.options,
                ]
            )
    return buf.getvalue()


def _f(v: float | None) -> str:
    return "" if v is None or math.isnan(v) else f"{v:.6g}"


# -- HTML ------------------------------------------------------------------------------------------------------------
COLOURS = {
    "random": "#9aa5b1",
    "baseline": "#2f6fdf",
    "oracle": "#e08a1e",
    "model": "#1c9c6b",
    "trained": "#8e44ad",
    "reported": "#b9b9b9",
}


LABEL_WIDTH = 48  # characters of a bar's label on one line; a longer name wraps (whole, never cut at the edge)


def charted(env_id: str, rows: Sequence[Row]) -> list[Row]:
    """The rows that have a bar: those with a figure for the env's primary metric."""
    key = metric_columns(env_id)[0][0]
    return [r for r in rows if key in r.metrics and not math.isnan(r.metrics[key].value)]


def option_groups(env_id: str, rows: Sequence[Row]) -> list[tuple[str, list[Row]]]:
    """An env's rows split by their env options, in board order: one chart per group, so bars of other tasks
    (``difficulty=hard`` beside the defaults) are never drawn side by side as if comparable. Reported rows have no
    options and join the defaults' chart. A group without a bar (its runs skipped: the env does not take the
    options) gets no chart, unless no group has a bar (then the env's one chart is empty, as its table says why)."""
    groups: dict[str, list[Row]] = {}
    for r in rows:
        groups.setdefault(r.options, []).append(r)
    drawn = [(options, group) for options, group in groups.items() if charted(env_id, group)]
    return drawn or list(groups.items())[:1]


def chart_caption(env_id: str, options: str) -> str:
    """What a bar chart shows, named with the env options all its rows share."""
    return f"{env_id}, {metric_columns(env_id)[0][1]} (%); env options: {options or 'none (the defaults)'}"


def bar_label(policy: str) -> str:
    """A bar's label: the policy's name, wrapped at :data:`LABEL_WIDTH` characters (a long spec breaks anywhere)."""
    return "\n".join(textwrap.wrap(policy, LABEL_WIDTH, break_on_hyphens=False)) or policy


def bar_chart(env_id: str, rows: list[Row], options: str = "") -> str:
    """A horizontal bar chart of the primary metric (percent) with 95% CI whiskers, as an inline ``<svg
    class="plot">`` drawn by matplotlib's SVG backend (text kept as text). Each bar is a group ``id="bar-KIND-I"``;
    reported rows are hatched. ``rows`` share their env ``options`` (:func:`option_groups`).

    Matplotlib's constrained layout places the axes so that the labels, however long, lie inside the figure (the
    SVG is clipped at its viewport); it measures them in DejaVu Sans, the font the SVG names."""
    from matplotlib.figure import Figure

    key, label = metric_columns(env_id)[0]
    shown = charted(env_id, rows)
    labels = [bar_label(r.policy) for r in shown]
    lines = max((t.count("\n") + 1 for t in labels), default=1)
    fig = Figure(figsize=(7.5, 0.6 + max(0.32, 0.14 * lines + 0.06) * max(1, len(shown))), layout="constrained")
    ax = fig.add_subplot()
    for i, r in enumerate(shown):
        s, y = r.metrics[key], len(shown) - 1 - i
        bar = ax.barh(
            y,
            100 * max(0.0, s.value),
            height=0.7,
            color="white" if r.reported else COLOURS.get(r.kind),
            edgecolor=COLOURS["reported"] if r.reported else "none",
            hatch="///" if r.reported else None,
            antialiased=False,
        )
        bar.patches[0].set_gid(f"bar-{r.kind}-{i}")
        if not math.isnan(s.low):
            ax.errorbar(
                100 * s.value,
                y,
                xerr=[[100 * (s.value - s.low)], [100 * (s.high - s.value)]],
                color="#111",
                capsize=3,
                linewidth=1,
            )
        ax.text(101, y, f"{100 * s.value:.1f}", va="center", fontsize=8)
    ax.set_yticks(range(len(shown)), list(reversed(labels)), fontsize=8)
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"{label} (%)", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#e3e3e3")
    ax.set_axisbelow(True)
    return _svg(fig, f"{env_id} {options}".strip(), chart_caption(env_id, options))


def _svg(fig, salt: str, label: str) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    return svg.replace("<svg", f'<svg class="plot" role="img" aria-label="{html.escape(label)}"', 1)


def curve_chart(rec: TrainingRecord) -> str:
    """The trained agent's held-out learning curve: success (percent) by GRPO step with the 95% Wilson band, as an
    inline ``<svg class="plot curve">`` (matplotlib's SVG backend). The first point is the SFT checkpoint's row, the
    last (when training finished) the trained policy's."""
    from matplotlib.figure import Figure

    steps = [p[0] for p in rec.curve]
    stats = [wilson(round(p[1] * p[2]), int(p[2])) for p in rec.curve]
    fig = Figure(figsize=(7.5, 2.6))
    ax = fig.add_axes((0.09, 0.2, 0.88, 0.7))
    ax.fill_between(
        steps,
        [100 * s.low for s in stats],
        [100 * s.high for s in stats],
        color=COLOURS["trained"],
        alpha=0.15,
        linewidth=0,
    )
    ax.plot(steps, [100 * s.value for s in stats], marker="o", color=COLOURS["trained"], linewidth=1.5, markersize=4)
    for x, s in zip(steps, stats, strict=True):
        ax.annotate(
            f"{100 * s.value:.1f}",
            (x, 100 * s.value),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=7,
        )
    ax.set_xlim(-0.5, max(rec.steps, max(steps, default=0)) + 0.5)
    ax.set_ylim(0, min(100, max((100 * s.high for s in stats), default=10) + 10))
    ax.set_xlabel("GRPO step (0: the SFT checkpoint)", fontsize=8)
    ax.set_ylabel("held-out success (%)", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(color="#e3e3e3")
    ax.set_axisbelow(True)
    svg = _svg(fig, rec.key, f"{rec.env_id} trained agent: held-out success by GRPO step")
    return svg.replace('class="plot"', 'class="plot curve"', 1)


def to_html(
    boards: dict[str, list[Row]], trainings: Sequence[TrainingRecord] = (), title: str = "agentgym-r1 leaderboard"
) -> str:
    """The page from the ``templates/board.html.j2`` template (autoescaped; the plots are inserted as markup)."""
    import jinja2

    source = resources.files("agentgym_r1.leaderboard").joinpath("templates/board.html.j2").read_text("utf-8")
    template = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True).from_string(source)
    envs = []
    for env_id, rows in boards.items():
        header, cells = table(env_id, rows)
        plots = [
            {"caption": chart_caption(env_id, options), "svg": bar_chart(env_id, group, options)}
            for options, group in option_groups(env_id, rows)
        ]
        envs.append(
            {
                "id": env_id,
                "plots": plots,
                "header": header,
                "rows": [{"kind": r.kind, "cells": c} for r, c in zip(rows, cells, strict=True)],
                "paired": paired_lines(rows),
                "trainings": [
                    {
                        "summary": training_summary(t),
                        "missing": t.status != "done",
                        "curve": curve_chart(t) if t.curve else "",
                    }
                    for t in trainings
                    if t.env_id == env_id
                ],
            }
        )
    failed = sum(r.errors for rows in boards.values() for r in rows)
    return template.render(
        title=title,
        generated=time.strftime("%Y-%m-%d %H:%M:%S"),
        envs=envs,
        failed=failed,
        reference_source=REFERENCE_SOURCE,
    )
