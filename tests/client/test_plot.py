"""``arena plot``'s data layer (a job's curve stitched across runs) and its PNG."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from arena_ls.client.plot import Resume, resume_chain, stitch, write_curve_png


def points(first: int, last: int, *, lr: float = 0.001) -> list[dict[str, Any]]:
    return [{"step": s, "loss": 10.0 / s, "lr": lr, "at": "t"} for s in range(first, last + 1)]


def run(run_id: str, resumed_from: int | None) -> dict[str, Any]:
    return {"runId": run_id, "jobId": "lm", "resumedFromStep": resumed_from}


def metrics(
    pts: list[dict[str, Any]],
    checkpoints: list[int],
    evals: Sequence[tuple[int, float]] = (),
    relaunches: Sequence[int] = (),
) -> dict[str, Any]:
    return {
        "points": pts,
        "checkpoints": [{"step": s, "path": f"ckpt-{s}.pt", "at": "t"} for s in checkpoints],
        "evals": [{"step": s, "loss": loss, "at": "t"} for s, loss in evals],
        "relaunches": [{"step": s, "at": "t"} for s in relaunches],
    }


def three_runs() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """A fresh run stopped at step 175 (checkpoint 169), resumed to 230 (checkpoint 200,
    crashed), resumed again to the end at 300, with a relaunch inside the last run."""
    last = points(201, 260, lr=0.0005) + points(251, 300, lr=0.0002)  # relaunched from 250
    return [
        (run("a", None), metrics(points(1, 175), [50, 100, 150, 169], [(100, 1.5)])),
        (run("b", 169), metrics(points(170, 230), [200], [(200, 1.2)])),
        (run("c", 200), metrics(last, [250, 300], [(300, 0.9)], relaunches=[250])),
    ]


def test_runs_are_stitched_by_step_and_lost_work_is_replaced() -> None:
    curve = stitch(three_runs())
    steps = [step for step, _ in curve.loss]
    assert steps == list(range(1, 301)), "each step once, from the run that kept it"
    assert curve.run_ids == ["a", "b", "c"]
    assert curve.resumes == [Resume(169, "b"), Resume(200, "c"), Resume(250, "c", relaunch=True)]
    assert curve.checkpoints == [50, 100, 150, 169, 200, 250, 300]
    assert curve.evals == [(100, 1.5), (200, 1.2), (300, 0.9)]
    lr = dict(curve.lr)
    assert (lr[170], lr[201], lr[250], lr[251]) == (0.001, 0.0005, 0.0005, 0.0002)
    assert dict(curve.loss)[175] == pytest.approx(10.0 / 175)


def twice(first: int, last: int, every: int) -> list[dict[str, Any]]:
    """Each step announced twice, as the reference trainer does (a plain line, then ``@arena``):
    what an older server's metrics held."""
    return [p for s in range(first, last + 1, every) for p in points(s, s) * 2]


def test_a_step_announced_twice_is_no_relaunch() -> None:
    """Regression (issue 27): every progress point of one clean run drew a red relaunch line."""
    curve = stitch([(run("a", None), metrics(twice(10, 600, 10), [100, 200, 300]))])
    assert curve.resumes == []
    assert [s for s, _ in curve.loss] == list(range(10, 601, 10))


def test_steps_going_back_without_a_logged_relaunch_are_not_marked() -> None:
    pts = points(1, 50) + points(41, 60)
    curve = stitch([(run("a", None), metrics(pts, [40]))])
    assert curve.resumes == [] and [s for s, _ in curve.loss] == list(range(1, 61))
    relaunched = stitch([(run("a", None), metrics(pts, [40], relaunches=[40]))])
    assert relaunched.resumes == [Resume(40, "a", relaunch=True)]


def test_malformed_relaunches_are_ignored() -> None:
    bad: dict[str, Any] = {"points": points(1, 5), "relaunches": [None, {"step": -1}, {"step": "3"}, {}]}
    assert stitch([(run("a", None), bad)]).resumes == []
    assert stitch([(run("a", None), {"points": points(1, 5), "relaunches": "x"})]).resumes == []


def test_the_chain_starts_at_the_latest_fresh_run() -> None:
    runs = [run("old", None), run("old2", 40), run("new", None), run("new2", 10)]
    assert [r["runId"] for r in resume_chain(runs)] == ["new", "new2"]
    assert resume_chain([]) == []


def test_a_later_eval_before_the_resume_point_is_dropped() -> None:
    curve = stitch(
        [
            (run("a", None), metrics(points(1, 120), [100], [(100, 2.0), (120, 1.9)])),
            (run("b", 100), metrics(points(101, 140), [], [(120, 1.8)])),
        ]
    )
    assert curve.evals == [(100, 2.0), (120, 1.8)]
    assert [s for s, _ in curve.loss] == list(range(1, 141))


def test_non_finite_and_malformed_points_are_skipped() -> None:
    bad = [{"step": 1, "loss": float("nan"), "lr": None}, {"step": "x"}, "junk", {"step": 2, "loss": 1.0}]
    curve = stitch([(run("a", None), {"points": bad, "checkpoints": [None], "evals": None})])
    assert curve.loss == [(2, 1.0)] and curve.lr == [] and curve.checkpoints == []


@pytest.mark.process  # matplotlib's first use in a fresh environment builds its font cache with fc-list
def test_the_curve_renders_to_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="arena plot needs the extra `plot` (matplotlib)")
    out = tmp_path / "curve" / "lm.png"
    write_curve_png(stitch(three_runs()), "lm · 3 runs", out)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_a_loss_spike_rollback_is_marked_at_the_spike_and_the_curve_goes_back(tmp_path: Path) -> None:
    """Contract 8.2: each rollback of ``arena/metrics`` is a mark on the plot."""
    spiked = [*points(1, 60), *points(41, 100)]  # spiked at 60, rolled back to 40
    data = metrics(spiked, [20, 40, 60])
    data["rollbacks"] = [{"step": 40, "spikeStep": 60, "skipBatches": 200, "at": "t"}, {"step": "x"}, "junk"]
    curve = stitch([(run("a", None), data)])
    assert curve.rollbacks == [(60, 40)], "a malformed entry is ignored"
    assert [s for s, _ in curve.loss] == list(range(1, 101)), "the rolled-back stretch replaced"
    pytest.importorskip("matplotlib", reason="arena plot needs the extra `plot` (matplotlib)")
    out = tmp_path / "rollback.png"
    write_curve_png(curve, "lm", out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
