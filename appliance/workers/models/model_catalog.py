"""The streamed model a job's params describe."""

from __future__ import annotations

from appliance.domain.params import Gpt2Model, Params
from appliance.workers.models.fc_mnist import FcMnist
from appliance.workers.models.gpt2 import Gpt2
from appliance.workers.models.model import StreamedModel


def build_model(params: Params) -> StreamedModel:
    """fc_mnist or gpt2, by `model.name`."""
    if isinstance(params.model, Gpt2Model):
        return Gpt2(params)
    return FcMnist(params)
