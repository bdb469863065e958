"""Screenshots, the page and the logs of a failed end-to-end test, while its browser is still open."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    pair = funcargs.get("session") or funcargs.get("cluster_session")
    if pair is None:
        return
    folder = pair[0].save_evidence(item.name)
    report.sections.append(("e2e evidence", f"screenshot, page and logs: {folder}"))
