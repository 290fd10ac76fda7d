"""Listing jobs: the query a door builds, its limits, and the key of one version of a job."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from appliance.domain.phases import Phase
from appliance.domain.reasons import ReasonCode
from appliance.domain.selectors import LabelSelector

DEFAULT_LIMIT = 500
MAX_LIMIT = 10_000


@dataclasses.dataclass(frozen=True)
class JobQuery:
    """Which jobs to list: active only unless `include_terminal`, one user's or everyone's,
    matching every label and the label selector, a page at a time."""

    include_terminal: bool = False
    user: str = ""
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    limit: int = DEFAULT_LIMIT
    page_token: str = ""
    # When given, exactly these phases (include_terminal is then ignored).
    phases: frozenset[Phase] = frozenset()
    # Evaluated with `labels` (which it may repeat), where they are: in the store's query.
    selector: LabelSelector = dataclasses.field(default_factory=LabelSelector)
    # When given, only jobs whose reason or pending reason has one of these codes, ended
    # ones too (include_terminal is then ignored: why a job ended is a reason).
    reasons: frozenset[ReasonCode] = frozenset()
    # With `reasons`, filled in by the list use case (services/listing.py): the queued jobs
    # the scheduler's last pass says wait for one of them (None: match every job on its row),
    # and the queued jobs it did not decide on (matched on their row).
    waiting: frozenset[str] | None = None
    undecided: frozenset[str] = frozenset()
    # When given, only the tasks of this array (domain/arrays.py).
    array: str = ""


# (id, created_at, version): one version of a job's summary; what a summary shows changes
# only together with `version`. Plain tuples straight from the driver: listing 100,000 keys
# must cost no per-row object.
JobKey = tuple[str, float, int]
