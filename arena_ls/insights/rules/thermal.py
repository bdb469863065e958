"""thermal: the GPU the run is on is at or above its slowdown temperature.

What it watches
---------------
The temperature of the GPU(s) the run's own processes are on, at the latest
health sample, against the slowdown threshold NVML reports for that GPU
(`NVML_TEMPERATURE_THRESHOLD_SLOWDOWN`: where the card starts cutting its
clocks), or against `thermalMaxCelsius` when that setting is set (for a
GPU that does not report a threshold). Without either it never fires. It
clears when the GPU is below the threshold again.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
A laptop cools its GPU through the same small heat pipes as its CPU. At the
slowdown temperature the card throttles: the run goes on, slower, and a
night at that temperature is hard on the machine.

What to do
----------
Raise the laptop for airflow, clean its vents, plug it in (some laptops cap
power on battery), or cap the GPU's power (`nvidia-smi -pl`) so that it
runs cooler at a small cost in speed.
"""

from __future__ import annotations

from arena_ls.insights.model import Observations
from arena_ls.insights.rules.base import InsightRule, parse_doc
from arena_ls.settings import InsightSettings

KIND = "thermal"


def check(obs: Observations, settings: InsightSettings, now: float) -> str | None:
    if not obs.gpu:
        return None
    sample = obs.gpu[-1]
    limit = settings.thermal_max_celsius or sample.slowdown_temperature
    if sample.temperature is None or limit is None or sample.temperature < limit:
        return None
    source = (
        "the setting insights.thermalMaxCelsius" if settings.thermal_max_celsius else "its slowdown point"
    )
    return (
        f"GPU at {sample.temperature} °C, at or above {limit} °C ({source}): it throttles; "
        "improve the laptop's airflow or cap the GPU's power"
    )


RULE = InsightRule(
    kind=KIND, severity="warning", doc=parse_doc(__doc__), check=check, settings=("thermalMaxCelsius",)
)
