"""How old a checkpoint may be before a stop asks (contract 7.3, the SOP's rule 4): pure."""

from __future__ import annotations

from collections import deque

from arena_ls.lifecycle.checkpoint_age import (
    NO_CADENCE_SECONDS,
    checkpoint_cadence,
    describe,
    lost_since_checkpoint,
    note_checkpoint,
    stale_checkpoint_refusal,
    too_old,
)


def test_twice_the_cadence_is_the_limit() -> None:
    checkpoints = [(500, 1000.0), (1000, 1600.0)]  # every 600 s
    assert checkpoint_cadence(checkpoints) == 600.0
    assert not too_old(1600.0 + 1200.0, checkpoints)
    assert too_old(1600.0 + 1200.1, checkpoints)


def test_thirty_minutes_without_a_cadence_and_nothing_without_a_checkpoint() -> None:
    assert checkpoint_cadence([(500, 0.0)]) is None
    assert not too_old(NO_CADENCE_SECONDS, [(500, 0.0)])
    assert too_old(NO_CADENCE_SECONDS + 1, [(500, 0.0)])
    assert not too_old(10**9, [])  # no checkpoint at all is 1007's other case (runtimeSeconds)


def test_the_refusal_says_what_would_be_lost() -> None:
    data = stale_checkpoint_refusal(3000.0, [(500, 1000.0), (1000, 1600.0)], "ckpt_latest.pt", 2130)
    assert data is not None
    assert data["lastCheckpoint"] == {
        "step": 1000,
        "path": "ckpt_latest.pt",
        "at": "1970-01-01T00:26:40.000Z",
    }
    assert data["lost"] == {"steps": 1130, "seconds": 1400.0} and data["cadenceSeconds"] == 600.0
    text = describe(data)
    assert "step 1000" in text and "1130 steps" in text and "twice its cadence of 600s" in text
    assert "confirm: true" in text
    assert stale_checkpoint_refusal(1700.0, [(500, 1000.0), (1000, 1600.0)], None, 1010) is None


def test_lost_without_a_step_and_a_clock_behind() -> None:
    assert lost_since_checkpoint(100.0, (10, 40.0), None) == {"steps": None, "seconds": 60.0}
    assert lost_since_checkpoint(30.0, (10, 40.0), 5) == {"steps": 0, "seconds": 0.0}
    data = stale_checkpoint_refusal(5000.0, [(10, 0.0)], None, None)
    assert data is not None and "30 minutes" in describe(data) and "steps" not in describe(data)


def test_a_trainer_slowed_by_a_busy_machine_is_not_asked_about() -> None:
    """Late in time but not in steps (its saves are late, none missed): no question. Seen on a
    loaded machine with a trainer saving every 2 steps (cadence 0.1 s): every stop asked."""
    checkpoints = [(2, 10.0), (4, 10.1)]
    assert not too_old(12.0, checkpoints, step=5), "one step past its save, however late"
    assert too_old(12.0, checkpoints, step=9), "two intervals past without a save"
    assert not too_old(10.2, checkpoints, step=9), "steps past it, but not late in time"
    assert too_old(12.0, checkpoints), "no step known: time alone decides"
    assert stale_checkpoint_refusal(12.0, checkpoints, None, 5) is None


def test_one_save_announced_twice_is_one_checkpoint() -> None:
    # The reference trainer prints "saved checkpoint step=50 ..." and an @arena checkpoint event
    # for one save: counted twice, the cadence was the milliseconds between them and every stop asked.
    recent: deque[tuple[int, float]] = deque(maxlen=2)
    note_checkpoint(recent, 50, 100.0)
    note_checkpoint(recent, 50, 100.01)
    assert list(recent) == [(50, 100.0)]
    assert checkpoint_cadence(recent) is None
    assert not too_old(101.0, recent)
    note_checkpoint(recent, 100, 104.0)
    note_checkpoint(recent, 100, 104.01)
    assert list(recent) == [(50, 100.0), (100, 104.0)]
    assert checkpoint_cadence(recent) == 4.0
    assert not too_old(105.0, recent) and too_old(112.1, recent)
    assert checkpoint_cadence([(100, 104.0), (100, 104.01)]) is None  # a pair of one step is no cadence
