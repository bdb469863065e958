"""Whether a cluster answers its agent, said once each way in the run's log.

Shared by the parts of ``RayTrainer`` (``ray_trainer``) that talk to Ray: the follow loop and
the stop (``ray_stop``).
"""

from __future__ import annotations

from arena_ls.agent.attempts import RunRecord
from arena_ls.cluster.jobsapi import ClusterError


class ClusterContact:
    """The cluster's answers as the run's log tells them: unreachable once, answering again once."""

    def __init__(self, record: RunRecord, cluster_name: str) -> None:
        self.record = record
        self.cluster_name = cluster_name
        self.unreachable_said = False

    def answering(self) -> None:
        if self.unreachable_said:
            self.unreachable_said = False
            self.record.say(f"cluster {self.cluster_name!r} answers again")

    def unreachable(self, error: ClusterError) -> None:
        if not self.unreachable_said:
            self.unreachable_said = True
            self.record.warn(f"{error}; the job keeps running there, retrying")
