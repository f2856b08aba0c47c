"""``voxcache.testing.waiting.until``: the one way the tests wait for what happens elsewhere."""

from __future__ import annotations

import time

import pytest

from voxcache.testing.waiting import until


def test_it_returns_what_the_check_found_once_it_holds() -> None:
    answers = iter([None, [], {"found": 1}])
    assert until(lambda: next(answers), 5) == {"found": 1}


def test_past_the_bound_it_fails_naming_what_it_waited_for() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match="the lease not within 0.3 s"):
        until(lambda: False, 0.3, "the lease")
    assert time.monotonic() - started >= 0.3


def test_the_last_check_is_at_the_bound_and_the_pauses_grow_from_20_ms() -> None:
    checked: list[float] = []
    started = time.monotonic()

    def late() -> bool:
        checked.append(time.monotonic() - started)
        return checked[-1] >= 0.5  # true only once the bound is reached

    assert until(late, 0.5)
    assert len(checked) < 15  # 20 ms growing to 200 ms (8 checks), not a 50 Hz spin (25)
