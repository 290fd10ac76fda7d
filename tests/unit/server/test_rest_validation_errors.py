"""A REST body pydantic refuses is named by its field: a value that fits none of a union's
members (`max_systems_per_user: 1e9` is neither a whole number nor "unlimited") is one problem of
that field, not `max_systems_per_user.int` and "1 more problem"."""

from __future__ import annotations

import asyncio
import json

import pydantic
import pytest
from fastapi.exceptions import RequestValidationError

from appliance.server.rest.errors import _validation_error
from appliance.server.rest.queues import QueueIn
from appliance.server.rest.reservations import ReservationIn


def _refusal(body: dict[str, object], model: type[pydantic.BaseModel] = QueueIn) -> dict[str, str]:
    with pytest.raises(pydantic.ValidationError) as caught:
        model.model_validate(body)
    errors = [{**e, "loc": ("body", *e["loc"])} for e in caught.value.errors()]
    response = asyncio.run(_validation_error(None, RequestValidationError(errors)))  # type: ignore[arg-type]
    assert response.status_code == 422
    error: dict[str, str] = json.loads(bytes(response.body))["error"]
    return error


@pytest.mark.parametrize("value", [1e9, True, [1], {"a": 1}])
def test_a_value_fitting_no_member_of_a_union_names_the_field_once(value: object) -> None:
    error = _refusal({"max_systems_per_user": value})

    assert error["field"] == "max_systems_per_user"
    assert error["message"].startswith("max_systems_per_user: ")
    assert "more problem" not in error["message"] and ".int" not in error["message"]


def test_problems_of_two_fields_are_still_counted() -> None:
    error = _refusal({"max_systems_per_user": 1e9, "max_running_jobs_per_user": 2.5})

    assert "(and 1 more problem(s))" in error["message"]


@pytest.mark.parametrize("value", ["2", 2.5, {"a": 1}])
def test_nodes_that_are_neither_names_nor_a_count_name_the_field(value: object) -> None:
    error = _refusal({"name": "r", "systems": value, "maint": True}, ReservationIn)

    assert error["field"] == "systems" and "more problem" not in error["message"]
    assert "list[" not in error["message"]


def test_maint_is_true_or_false_not_a_word_read_as_one() -> None:
    error = _refusal({"name": "r", "systems": 1, "maint": "yes"}, ReservationIn)

    assert error["field"] == "maint"
