"""WatchProgress: how far a watch has read, and waits until it has read a version."""

from __future__ import annotations

import asyncio

from gpupair.kubeclient.watch_progress import WatchProgress, revision


def test_revision_reads_only_decimal_integers():
    assert revision("293") == 293
    assert [revision(v) for v in ("", "12a", "-1", "1.5", "²", "١٢", None, 7)] == [None] * 8


def test_advance_only_moves_forward():
    progress = WatchProgress()
    for version in ("10", "7", "not-a-number", "", "12"):
        progress.advance(version)
    assert progress.revision == 12
    assert progress.behind("13") and not progress.behind("12") and not progress.behind("junk")


async def test_waiters_wake_in_any_order_once_their_version_is_read():
    progress = WatchProgress()
    progress.advance("5")
    first = asyncio.create_task(progress.reached("9", 5))
    second = asyncio.create_task(progress.reached("7", 5))
    await asyncio.sleep(0)
    progress.advance("8")
    assert await second is True
    assert not first.done()
    progress.advance("9")
    assert await first is True
    assert progress._waiters == []


async def test_a_version_already_read_or_not_comparable_does_not_wait():
    progress = WatchProgress()
    progress.advance("5")
    assert await progress.reached("5", 0) is True
    assert await progress.reached("garbage", 0) is True
    assert progress._waiters == []


async def test_a_wait_that_times_out_says_so_and_leaves_no_waiter():
    progress = WatchProgress()
    assert await progress.reached("3", 0.01) is False
    assert progress._waiters == []
    progress.advance("3")  # nothing left to wake, nothing fails
    assert progress.revision == 3
