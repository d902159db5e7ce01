"""The dashboard's SVG plots: pure functions, every label escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from actors.dashboard.svg import Node, nice_ceiling, relation_graph, stacked_bars


@pytest.mark.parametrize(
    ("value", "ceiling"), [(0, 1.0), (0.013, 0.02), (0.02, 0.02), (7, 10.0), (1500, 2000.0)]
)
def test_the_axis_top_is_a_round_number_at_or_above_the_highest_bar(
    value: float, ceiling: float
) -> None:
    assert nice_ceiling(value) == pytest.approx(ceiling)


def test_bars_stack_per_label_and_scale_to_the_axis() -> None:
    svg = stacked_bars(["d1", "d2"], {"agent": [1.0, 0.0], "compaction": [1.0, 2.0]}, title="t")
    root = ET.fromstring(svg)
    bars = [e for e in root.iter("{http://www.w3.org/2000/svg}rect") if e.get("class") == "bar"]
    assert len(bars) == 3  # the zero is not drawn
    heights = sorted(float(b.get("height", 0)) for b in bars)
    # axis top 2: a value of 2 fills the plot, 1 half of it
    assert heights[0] == pytest.approx(heights[1]) and heights[2] == pytest.approx(2 * heights[0])


def test_an_empty_plot_says_so() -> None:
    assert "nothing in this period" in stacked_bars([], {}, title="t")
    assert "nothing in this period" in stacked_bars(["d"], {"a": [0.0]}, title="t")


def test_labels_are_escaped() -> None:
    evil = '<script>alert("x")</script>'
    svg = stacked_bars(["d"], {evil: [1.0]}, title=evil) + relation_graph(
        Node(1, evil), [Node(2, evil, relation=evil, href='/x"><script>')]
    )
    assert "<script>" not in svg
    ET.fromstring(relation_graph(Node(1, evil), [Node(2, evil, "supports")]))  # well formed


def test_the_graph_draws_an_arrow_per_relation_in_its_direction() -> None:
    svg = relation_graph(
        Node(1, "a"), [Node(2, "b", "supports", "out"), Node(3, "c", "causes", "in")]
    )
    root = ET.fromstring(svg)
    lines = list(root.iter("{http://www.w3.org/2000/svg}line"))
    assert len(lines) == 2
    assert all(line.get("marker-end") == "url(#arrow)" for line in lines)
    assert "supports" in svg and "causes" in svg and "#3" in svg
