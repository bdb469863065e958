"""``arena status`` says whether the active run keeps the machine awake (``RunInfo.keepAwake``,
contract 8.3), and when it cannot, the reason its log gives; the words are the other clients'."""

from __future__ import annotations

import asyncio
import io
from typing import Any

from rich.console import Console

from arena_ls.client.commands import active_keep_awake_reason
from arena_ls.client.keep_awake import KEEP_AWAKE_LINE, keep_awake_reason, keep_awake_text, needs_reason
from arena_ls.client.tables import print_status

REASON = "cannot reach the system bus: no such file"


def active(**fields: Any) -> dict[str, Any]:
    return {"runId": "r1", "jobId": "tiny-lm", "status": "running", **fields}


def line(text: str, stream: str = "arena", seq: int = 0) -> dict[str, Any]:
    return {"seq": seq, "stream": stream, "text": text}


def test_the_three_values_in_words() -> None:
    assert keep_awake_text(active(keepAwake=True)) == "keeping the machine awake"
    assert keep_awake_text(active(keepAwake=False)) == "not keeping the machine awake"
    assert keep_awake_text(active(keepAwake=None), REASON) == f"the machine may sleep: {REASON}"
    assert keep_awake_text(active(keepAwake=None)) is None, "not decided yet, or no line: nothing is claimed"
    assert keep_awake_text(active()) is None, "a server that does not say: nothing is claimed"
    assert needs_reason(active(keepAwake=None)) and not needs_reason(active(keepAwake=False))
    assert not needs_reason(active()) and not needs_reason(None)


def test_the_reason_is_the_agents_line_not_a_trainers_print() -> None:
    lines = [
        line("started"),
        line(KEEP_AWAKE_LINE + "a trainer's lie", stream="stdout", seq=1),
        "not a line",
        line(KEEP_AWAKE_LINE + REASON, seq=2),
        line(KEEP_AWAKE_LINE + "a later one", seq=3),
    ]
    assert keep_awake_reason(lines) == REASON
    assert keep_awake_reason([line("started")]) is None
    assert keep_awake_reason([line(KEEP_AWAKE_LINE + "  ")]) is None


def status_text(status: dict[str, Any], reason: str | None = None) -> str:
    out = io.StringIO()
    print_status(Console(file=out, width=220, color_system=None), status, keep_awake_reason=reason)
    return out.getvalue()


def test_arena_status_shows_it_beside_the_active_run() -> None:
    base: dict[str, Any] = {"runs": [], "jobs": [], "health": {}}
    assert "keeping the machine awake" in status_text({**base, "active": active(keepAwake=True)})
    text = status_text({**base, "active": active(keepAwake=None)}, "[red]no bus\x1b[2J")
    assert "the machine may sleep: [red]no bus^[[2J" in text, "the reason is data: no markup, no control"
    assert "machine" not in status_text({**base, "active": active()})


class FakeSession:
    def __init__(self, lines: list[dict[str, Any]]) -> None:
        self.lines, self.asked = lines, []  # type: list[dict[str, Any]], list[tuple[str, Any]]

    async def request(self, method: str, params: Any) -> Any:
        self.asked.append((method, params))
        return {"runId": "r1", "lines": self.lines, "cursor": "c", "done": False}


def test_the_reason_is_read_from_the_first_page_of_the_active_runs_log_only_when_null() -> None:
    session = FakeSession([line("started"), line(KEEP_AWAKE_LINE + REASON, seq=1)])
    status = {"active": active(keepAwake=None)}
    assert asyncio.run(active_keep_awake_reason(session, status)) == REASON  # type: ignore[arg-type]
    [(method, params)] = session.asked
    assert method == "arena/logs" and params["runId"] == "r1" and "cursor" not in params
    for quiet in ({"active": active(keepAwake=True)}, {"active": None}, {"active": active()}):
        assert asyncio.run(active_keep_awake_reason(session, quiet)) is None  # type: ignore[arg-type]
    assert len(session.asked) == 1
