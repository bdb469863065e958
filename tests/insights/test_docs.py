"""docs/insights.md is generated from the rules and the settings, and is current."""

from __future__ import annotations

from pathlib import Path

import attrs

from arena_ls.insights import INSIGHTS
from arena_ls.insights.docs import DEFAULT_OUTPUT, PROBE_SETTINGS, SETTINGS, main, render
from arena_ls.settings import InsightSettings, ProbeSettings, Settings, parse_settings


def test_the_committed_docs_are_current() -> None:
    assert main(["--check"]) == 0, "run python -m arena_ls.insights.docs"
    assert DEFAULT_OUTPUT.read_text(encoding="utf-8") == render()


def test_every_kind_and_every_setting_is_documented() -> None:
    text = render()
    for kind in INSIGHTS:
        assert f"## {kind}\n" in text
    assert {attr for attr, _ in SETTINGS.values()} == {f.name for f in attrs.fields(InsightSettings)}
    assert {attr for attr, _ in PROBE_SETTINGS.values()} == {f.name for f in attrs.fields(ProbeSettings)}
    assert "| `insights.lossSpikeMads` | 8 |" in text and "1010" in text and "AR013" in text


def another_value(default: object) -> object:
    """A valid value that differs from ``default``."""
    if default == "warn":  # insights.lossSpikeAction
        return "rollback"
    if isinstance(default, bool):
        return not default
    if default is None or isinstance(default, int):
        return 2
    return 1.0


def test_every_documented_key_is_a_setting() -> None:
    """Each key the docs name changes its field (so a renamed key cannot stay documented)."""
    for key, (attr, _) in SETTINGS.items():
        value = another_value(getattr(InsightSettings(), attr))
        settings, problems = parse_settings({"insights": {key: value}})
        assert problems == [] and getattr(settings.insights, attr) == value, key
    for key, (attr, _) in PROBE_SETTINGS.items():
        value = another_value(getattr(ProbeSettings(), attr))
        settings, _ = parse_settings({"probe": {key: value}})
        assert getattr(settings.probe, attr) == value, key
    assert Settings().insights == InsightSettings()


def test_check_reports_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "insights.md"
    stale.write_text("old\n")
    assert main(["--check", "--output", str(stale)]) == 1
    assert main(["--output", str(stale)]) == 0 and main(["--check", "--output", str(stale)]) == 0
