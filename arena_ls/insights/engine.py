"""Evaluates every insight rule over a run's observations, remembering since when each holds."""

from __future__ import annotations

import logging

from arena_ls.insights.model import Insight, Observations
from arena_ls.insights.registry import INSIGHTS
from arena_ls.settings import InsightSettings

log = logging.getLogger(__name__)


class InsightEngine:
    """One run's insights: which hold now, since when, and which are new to the user.

    ``since`` is when an insight was first seen holding; it is kept while the
    insight holds, and forgotten when it clears (a later return is a new
    insight with a new ``since``). ``take_new`` hands out each kind once per
    run, for the one ``window/showMessage`` warning.
    """

    def __init__(self) -> None:
        self.since: dict[str, float] = {}
        self.current: list[Insight] = []
        self.announced: set[str] = set()

    def evaluate(self, obs: Observations, settings: InsightSettings, now: float) -> list[Insight]:
        """The insights that hold now, in the registry's order."""
        held: list[Insight] = []
        if settings.enabled:
            for kind, rule in INSIGHTS.items():
                try:
                    message = rule.check(obs, settings, now)
                except Exception:  # one broken rule must not hide the others
                    log.exception("insight %s failed", kind)
                    continue
                if message is None:
                    continue
                since = self.since.setdefault(kind, now)
                held.append(Insight(kind, rule.severity, message, since))
        kinds = {insight.kind for insight in held}
        for kind in list(self.since):
            if kind not in kinds:
                del self.since[kind]
        self.current = held
        return held

    def clear(self) -> None:
        """The run ended: nothing holds any more."""
        self.since.clear()
        self.current = []

    def take_new(self) -> list[Insight]:
        """Insights holding now that were never announced in this run (each kind once)."""
        fresh = [i for i in self.current if i.kind not in self.announced]
        self.announced.update(i.kind for i in fresh)
        return fresh
