"""Full job views (GET one job) cached under (job id, version).

Every write that changes what a full view shows bumps the job's version in the same
transaction (phase, reasons, progress, priority, labels, lease, replicas; see JobStore), so a
view cached under the current version is never stale. The queue position moves with other
jobs and not with this job's version: it is read fresh on every call, with the version.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

from appliance.domain.job import Job

MAX_CACHED = 2_048  # full views hold the params YAML; a few MB at most


class JobViewCache:
    def __init__(self, max_entries: int = MAX_CACHED) -> None:
        self.max_entries = max_entries
        self._views: OrderedDict[str, tuple[int, Job]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._views)

    def get(self, job_id: str, version: int, queue_position: int) -> Job | None:
        """The cached view if it is of `version`, with `queue_position`; else None."""
        cached = self._views.get(job_id)
        if cached is None or cached[0] != version:
            return None
        self._views.move_to_end(job_id)
        job = cached[1]
        if job.queue_position != queue_position:
            job = dataclasses.replace(job, queue_position=queue_position)
        return job

    def put(self, job_id: str, version: int, job: Job) -> None:
        """Keep the view of `version`, unless a newer one is already kept."""
        cached = self._views.get(job_id)
        if cached is not None and cached[0] > version:
            return
        self._views[job_id] = (version, job)
        self._views.move_to_end(job_id)
        if len(self._views) > self.max_entries:
            self._views.popitem(last=False)
