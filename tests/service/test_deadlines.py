"""The shared deadline keeper behind the body deadline: late tasks are cancelled and told so,
a cancellation from anyone else is never mistaken for one, every event loop gets its tick."""

from __future__ import annotations

import asyncio
import threading

import pytest

from voxcache.service.deadlines import Deadlines


async def wait_watched(deadlines: Deadlines, seconds: float, wait: float) -> str:
    task = deadlines.start(seconds)
    try:
        await asyncio.sleep(wait)
        return "done"
    except asyncio.CancelledError:
        if not deadlines.overdue(task):
            raise
        await asyncio.sleep(0)  # the task can go on awaiting: the cancellation is withdrawn
        return "late"
    finally:
        deadlines.stop(task)


def test_a_task_past_its_deadline_is_cancelled_and_told_so() -> None:
    deadlines = Deadlines()

    async def main() -> tuple[str, str]:
        return await asyncio.gather(wait_watched(deadlines, 0.2, 5.0),
                                    wait_watched(deadlines, 5.0, 0.3))

    assert asyncio.run(asyncio.wait_for(main(), 10)) == ["late", "done"]


def test_a_cancellation_from_elsewhere_is_not_a_deadline() -> None:
    deadlines = Deadlines()

    async def main() -> None:
        task = asyncio.create_task(wait_watched(deadlines, 5.0, 5.0))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_each_event_loop_keeps_its_own_deadlines() -> None:
    """TestClient runs a new loop per request; one tick must not serve another loop."""
    deadlines = Deadlines()
    results: list[str] = []

    def run() -> None:
        results.append(asyncio.run(wait_watched(deadlines, 0.2, 5.0)))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == ["late"] * 3
