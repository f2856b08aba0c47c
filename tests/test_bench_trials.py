"""``bench.helpers.trials``: rounds alternate, warm-up rounds are dropped, the spread is told."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from bench.helpers import trials


def test_rounds_flip_the_order_and_drop_the_warmup() -> None:
    order: list[str] = []
    clock = itertools.count()

    def call(name: str) -> Callable[[], float]:
        def one() -> float:
            order.append(name)
            return float(next(clock))
        return one

    figures = trials.rounds({"a": call("a"), "b": call("b")}, 3, warmup=1)
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert figures == {"a": [3.0, 4.0, 7.0], "b": [2.0, 5.0, 6.0]}  # round 0 (0, 1) dropped


def test_interleave_reports_the_median_ratio_its_spread_and_stability() -> None:
    subject = iter([9.0, 10.0, 11.0, 12.0, 10.0, 30.0])  # first is the warm-up
    summary = trials.interleave(lambda: next(subject), lambda: 10.0, 5)
    assert summary.ratios == (1.0, 1.1, 1.2, 1.0, 3.0)
    assert summary.median == pytest.approx(1.1)
    assert summary.iqr == pytest.approx((1.0, 1.2))
    assert not summary.stable  # 3.0 and 1.0 lie beyond ±5 % of 1.1
    record = summary.record()
    assert record["min"] == 1.0 and record["max"] == 3.0 and record["rounds"] == list(
        summary.ratios)
    assert record["spread"] == "IQR 1–1.2, range 1–3 (5 rounds)"


def test_a_ratio_within_five_percent_every_round_is_stable() -> None:
    values = iter([1.0, 1.00, 1.04, 0.97, 1.02, 1.01])
    summary = trials.interleave(lambda: next(values), lambda: 1.0, 5)
    assert summary.stable
    assert not trials.Summary.of([1.0, 1.0], [1.0, 1.0]).stable  # two rounds cannot say so


def test_a_round_without_a_figure_is_left_out() -> None:
    summary = trials.Summary.of([2.0, float("nan"), 3.0], [1.0, 1.0, 0.0])
    assert summary.ratios == (2.0,) and summary.subject == 2.0
    assert trials.Summary.of([float("nan")], [1.0]).spread() == "no round measured"


def test_batch_cpu_counts_cpu_not_sleep() -> None:
    import time

    asleep = trials.batch_cpu(lambda: time.sleep(0.002), 5)()
    spinning = trials.batch_cpu(lambda: sum(range(20_000)), 5)()
    assert asleep < 0.001 < 0.002 <= trials.batch_median(lambda: time.sleep(0.002), 5)()
    assert spinning > 0
