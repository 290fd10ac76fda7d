"""Typed REST request bodies (pydantic v2): what a caller sends, bounded and checked before a
use case sees it (the documents sent back are in models.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from appliance.domain.bulk_cancel import MAX_IDS, CancelSelection
from appliance.domain.dependencies import MAX_DEPENDENCIES
from appliance.domain.phases import Phase
from appliance.domain.selectors import MAX_SELECTOR_CHARS, parse_selector
from appliance.domain.spec import MAX_RESTARTS, MAX_STEPS, Mode, Priority
from appliance.domain.spec_document import spec_fields
from appliance.server.rest.models import PriorityIn, PriorityName, StrictBool, StrictInt
from appliance.server.rest.spec_models import with_spec_fields


class _DeclaredJobSubmitIn(BaseModel):
    """A job to run: the model config and how much of the cluster to run it on."""

    model_config = ConfigDict(extra="forbid")

    params: str | dict[str, Any] = Field(
        description="Model Zoo style params: YAML text, or the same mapping as a JSON object "
        "(sections model, train_input, eval_input, optimizer, runconfig)."
    )
    num_csx: StrictInt = Field(ge=1, description="How many CS-2 systems to run on.")
    num_steps: StrictInt = Field(ge=1, le=MAX_STEPS, description="Training steps to run.")
    mode: Mode = Field(default=Mode.TRAIN, description="What to run.")
    labels: dict[str, str] = Field(
        default_factory=dict, description='Kubernetes-style labels, e.g. {"team": "nlp"}.'
    )
    priority: PriorityIn = Field(default=PriorityName.P2, description="Queue priority.")
    model_dir: str = Field(
        default="", description="Where checkpoints and summaries go; empty = under the data dir."
    )
    max_restarts: StrictInt | None = Field(
        default=None,
        ge=0,
        le=MAX_RESTARTS,
        description="Restarts allowed after a retryable failure; null = the cluster's default.",
    )
    preemptible: StrictBool = Field(
        default=True,
        description="false: never preempted by a job of higher priority (admins only).",
    )
    queue: str = Field(
        default="", max_length=63, description="The queue to submit to; empty = default."
    )
    depends_on: list[Annotated[str, StringConstraints(max_length=100)]] = Field(
        default_factory=list,
        max_length=MAX_DEPENDENCIES,
        description='Jobs it waits for: "wsjob-…" (afterok: it succeeded), or "afterok:…", '
        '"afterany:…" (it ended), "afternotok:…" (it failed or was cancelled).',
    )
    user: str = Field(
        default="",
        max_length=253,
        description="Whose job it is while authentication is off: the user the request names, "
        'as at every door (the Python client and csctl name your OS user); empty: "anonymous". '
        "With authentication on the job is the token's user's, and this is ignored.",
    )

    def spec_fields(self) -> dict[str, Any]:
        """The fields for validate_spec: the same rules as every other door. Each spec field is
        a field of this body of the same name (with_spec_fields adds those not declared here),
        but the params."""
        fields = {f.name: getattr(self, f.name) for f in spec_fields() if f.name != "params_yaml"}
        fields.update(
            params_yaml=self.params,
            priority=Priority[self.priority.name],
            queue=self.queue or None,
        )
        return fields


if TYPE_CHECKING:
    JobSubmitIn = _DeclaredJobSubmitIn
else:
    JobSubmitIn = with_spec_fields(
        _DeclaredJobSubmitIn, "JobSubmitIn", strict=True, skip={"params_yaml"}
    )


class CancelIn(BaseModel):
    """Why the job is cancelled (optional; recorded as the job's reason)."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="", max_length=1024, description="Recorded as the reason.")


class CancelJobsIn(BaseModel):
    """Which jobs to cancel: ids, or a selection (user, mine, labels, phases; or all), never
    both. A selection must say whose jobs or which ones (user, mine, labels) or be `all`."""

    model_config = ConfigDict(extra="forbid")

    user: str = Field(default="", max_length=253, description="One user's jobs.")
    mine: StrictBool = Field(
        default=False,
        description="The caller's jobs (authentication off: `user`, which must then be given).",
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description='Every label must match, e.g. {"team": "nlp"}.'
    )
    label_selector: str = Field(
        default="",
        max_length=MAX_SELECTOR_CHARS,
        description='A label selector as kubectl writes it, e.g. "team in (nlp,cv),!tmp" '
        "(with labels, both must match).",
    )
    phases: list[Phase] = Field(
        default_factory=list,
        max_length=len(Phase),
        description="Only jobs in these active phases; empty: every active phase.",
    )
    job_ids: list[Annotated[str, StringConstraints(max_length=64)]] = Field(
        default_factory=list,
        max_length=MAX_IDS,
        description="Exactly these jobs; a finished one is counted as finished.",
    )
    all: StrictBool = Field(default=False, description="Every user's jobs (admins).")
    reason: str = Field(default="", max_length=1024, description="Recorded as each reason.")
    page_token: str = Field(
        default="", max_length=512, description="next_page_token of the previous call."
    )

    def selection(self) -> CancelSelection:
        return CancelSelection(
            user=self.user, mine=self.mine, labels=self.labels, phases=frozenset(self.phases),
            job_ids=tuple(self.job_ids), all=self.all, reason=self.reason,
            page_token=self.page_token,
            selector=parse_selector(self.label_selector, field="label_selector"),
        )  # fmt: skip
