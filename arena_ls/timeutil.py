"""Times on the wire: ISO 8601 UTC strings."""

from __future__ import annotations

import datetime as _dt
import functools


@functools.lru_cache(maxsize=1024)
def iso_utc(epoch: float | None) -> str | None:
    """An epoch time as ``2026-11-29T14:50:36.123Z``; None stays None.

    Cached: the lines of one captured chunk share its arrival time, and an
    ``arena/log`` batch formats hundreds of them.
    """
    if epoch is None:
        return None
    return iso_utc_moment(_dt.datetime.fromtimestamp(epoch, tz=_dt.timezone.utc))


def iso_utc_moment(moment: _dt.datetime) -> str:
    """A datetime as ``2026-11-29T14:50:36.123Z`` (a naive one is taken as local time)."""
    utc = moment.astimezone(_dt.timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def iso_utc_now() -> str:
    return iso_utc_moment(_dt.datetime.now(tz=_dt.timezone.utc))
