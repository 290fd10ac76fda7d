"""An array's view (domain/array_view.py) as the ArrayView message and back."""

from __future__ import annotations

from appliance._proto.v1 import cluster_pb2
from appliance.domain.array_view import ArrayTaskRow, ArrayView
from appliance.domain.phases import Phase
from appliance.protocol.convert import phase_from_pb, phase_to_pb


def array_view_to_pb(view: ArrayView) -> cluster_pb2.ArrayView:
    msg = cluster_pb2.ArrayView(array_id=view.array_id, user=view.user, cap=view.cap)
    for row in view.tasks:
        task = msg.tasks.add(
            job_id=row.job_id, index=row.index, phase=phase_to_pb(row.phase),
            reason=row.reason, reason_code=row.reason_code, step=row.step,
        )  # fmt: skip
        task.overrides.update(row.overrides)
        if row.loss is not None:
            task.loss = row.loss
        if row.eval_loss is not None:
            task.eval_loss = row.eval_loss
        if row.eval_accuracy is not None:
            task.eval_accuracy = row.eval_accuracy
    return msg


def array_view_from_pb(msg: cluster_pb2.ArrayView) -> ArrayView:
    rows = tuple(
        ArrayTaskRow(
            job_id=t.job_id,
            index=t.index,
            overrides=dict(t.overrides),
            phase=phase_from_pb(t.phase) or Phase.QUEUED,
            reason=t.reason,
            reason_code=t.reason_code,
            step=t.step,
            loss=t.loss if t.HasField("loss") else None,
            eval_loss=t.eval_loss if t.HasField("eval_loss") else None,
            eval_accuracy=t.eval_accuracy if t.HasField("eval_accuracy") else None,
        )
        for t in msg.tasks
    )
    return ArrayView(msg.array_id, msg.user, msg.cap, rows)
