"""``arena/log`` batching is leading-edge (contract 7.2): a line after a quiet period goes out at
once, the lines that follow within ``1 / notifyHz`` leave together at the end of the period.

The batcher runs on a real event loop; its clock, and the loop's (which fires the batcher's timer),
are a fake one the test moves, so that "at once" means "in the next turn of the loop", with no
sleeping and no timed assertion: a loaded machine that stalls the test for the period's 20 ms
cannot fire the timer early.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from arena_ls.protocol import notify
from arena_ls.protocol.notify import LogBatcher
from arena_ls.run.capture import LogLine
from arena_ls.settings import Settings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def line(seq: int) -> LogLine:
    return LogLine(seq=seq, stream="stdout", text=f"line {seq}", at=0.0)


async def turns(count: int = 3) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(notify, "time", SimpleNamespace(monotonic=fake.monotonic))
    return fake


def test_the_default_rate_is_50_a_second() -> None:
    assert Settings().logs_notify_hz == 50.0


async def test_a_line_after_a_quiet_period_is_sent_in_the_next_turn(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(asyncio.get_running_loop(), "time", clock.monotonic)
    sent: list[dict[str, Any]] = []
    batcher = LogBatcher(lambda method, params: sent.append(params), lambda: 50.0)
    batcher.add("run", [line(0)])
    await turns()
    assert [[ln["seq"] for ln in p["lines"]] for p in sent] == [[0]], "sent at once"

    clock.now += 0.005  # within the period (20 ms): these wait for its end
    batcher.add("run", [line(1)])
    batcher.add("run", [line(2)])
    await turns()
    assert len(sent) == 1, "held until the period ends"
    clock.now += 1.0  # the period's end passed: its timer fires in the next turn
    await turns()
    assert len(sent) == 2, "the period's lines, sent when it ended"
    assert [ln["seq"] for ln in sent[1]["lines"]] == [1, 2], "the period's lines leave together"
    clock.now += 1.0
    batcher.add("run", [line(3)])
    await turns()
    assert [ln["seq"] for ln in sent[2]["lines"]] == [3]
