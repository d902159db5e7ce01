"""Plots drawn on the server as SVG (no JavaScript, no build step): pure functions from numbers
to markup, every label escaped.

:func:`stacked_bars` draws one bar per day split by a key (USD by purpose or by model, tokens by
kind); :func:`relation_graph` draws a pattern and its relations on a circle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

import attrs

#: colours for the series, in order (colour-blind safe: Okabe-Ito)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999")
WIDTH, HEIGHT = 640, 240
LEFT, BOTTOM, TOP, RIGHT = 56, 28, 12, 150


def _number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.4f}".rstrip("0").rstrip(".")


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value`` (1 for 0)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return float(step * power)
    return float(10 * power)  # pragma: no cover (the loop always returns)


def stacked_bars(
    labels: Sequence[str], series: Mapping[str, Sequence[float]], *, title: str, unit: str = ""
) -> str:
    """Bars for ``labels`` (e.g. days), each stacked from ``series`` (name -> one value per
    label), with a y axis and a legend. An empty plot says so."""
    n = len(labels)
    names = list(series)
    totals = [sum(series[name][i] for name in names) for i in range(n)]
    top = nice_ceiling(max(totals, default=0.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
    ]
    for k in range(5):  # grid and y labels
        y = TOP + plot_h - plot_h * k / 4
        out.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" stroke="#e5e5e5"/>'
        )
        label = f"{_number(top * k / 4)}{unit}"
        out.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
            f"{escape(label)}</text>"
        )
    if n == 0 or top <= 0 or not any(totals):
        out.append(
            f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" font-size="13" '
            'text-anchor="middle" fill="#777">nothing in this period</text>'
        )
    slot = plot_w / max(n, 1)
    bar = max(1.0, slot * 0.7)
    for i, label in enumerate(labels):
        x = LEFT + i * slot + (slot - bar) / 2
        base = float(TOP + plot_h)
        for j, name in enumerate(names):
            value = series[name][i]
            if value <= 0:
                continue
            h = plot_h * value / top
            base -= h
            out.append(
                f'<rect class="bar" x="{x:.1f}" y="{base:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(label)} {escape(name)}: '
                f"{escape(_number(value))}{escape(unit)}</title></rect>"
            )
        if n <= 14 or i % math.ceil(n / 14) == 0:
            out.append(
                f'<text x="{x + bar / 2:.1f}" y="{HEIGHT - 10}" font-size="10" '
                f'text-anchor="middle">{escape(label[-5:])}</text>'
            )
    for j, name in enumerate(names):  # legend
        y = TOP + 14 + j * 16
        out.append(
            f'<rect x="{WIDTH - RIGHT + 12}" y="{y - 9}" width="10" height="10" '
            f'fill="{PALETTE[j % len(PALETTE)]}"/>'
            f'<text x="{WIDTH - RIGHT + 28}" y="{y}" font-size="11">{escape(name[:22])}</text>'
        )
    out.append("</svg>")
    return "".join(out)


@attrs.frozen
class Node:
    """A pattern in a relation graph; ``relation`` and ``direction`` (``out``: the centre
    -relation-> it; ``in``: it -relation-> the centre) for the others."""

    id: int
    label: str
    relation: str = ""
    direction: str = "out"
    href: str = ""


def _short(text: str, limit: int = 28) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def relation_graph(centre: Node, others: Sequence[Node]) -> str:
    """The centre pattern in the middle, its related patterns on a circle around it, an arrow
    for each relation (labelled), each node a link to its page."""
    w, h, r = 640, 320, 120
    cx, cy = w / 2, h / 2
    out = [
        f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" '
        f'width="{w}" height="{h}" role="img" aria-label="relations">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
        f'<rect x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>',
    ]
    spots = []
    for i, node in enumerate(others):
        angle = 2 * math.pi * i / max(len(others), 1) - math.pi / 2
        spots.append((node, cx + r * 1.6 * math.cos(angle), cy + r * math.sin(angle)))
    for node, x, y in spots:
        x1, y1, x2, y2 = (cx, cy, x, y) if node.direction == "out" else (x, y, cx, cy)
        # stop the line at the node's edge
        dx, dy = x2 - x1, y2 - y1
        length = math.hypot(dx, dy) or 1.0
        x2e, y2e = x2 - dx / length * 22, y2 - dy / length * 22
        x1e, y1e = x1 + dx / length * 22, y1 + dy / length * 22
        out.append(
            f'<line x1="{x1e:.1f}" y1="{y1e:.1f}" x2="{x2e:.1f}" y2="{y2e:.1f}" stroke="#555" '
            'marker-end="url(#arrow)"/>'
            f'<text x="{(x1 + x2) / 2:.1f}" y="{(y1 + y2) / 2 - 4:.1f}" font-size="10" '
            f'text-anchor="middle" fill="#333">{escape(node.relation)}</text>'
        )
    for node, x, y, fill in [(centre, cx, cy, "#0072B2")] + [
        (n, x, y, "#E69F00") for n, x, y in spots
    ]:
        circle = (
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="20" fill="{fill}"/>'
            f'<text x="{x:.1f}" y="{y + 4:.1f}" font-size="11" text-anchor="middle" '
            f'fill="#fff">#{node.id}</text>'
            f'<text x="{x:.1f}" y="{y + 34:.1f}" font-size="10" text-anchor="middle">'
            f"{escape(_short(node.label))}</text>"
        )
        if node.href:
            circle = f'<a href="{escape(node.href)}">{circle}</a>'
        out.append(circle)
    out.append("</svg>")
    return "".join(out)
