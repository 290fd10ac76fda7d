"""A store the code of revision 0005 wrote migrates to the newest schema with nothing lost: every
row that hangs off a job (events, labels, replicas, placements, attempts) is still there after
migrations that copy the jobs table on SQLite (0006 did; with foreign keys on, dropping the old
copy cascaded and deleted them all).
"""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from appliance.store.engine import alembic_config, make_engine, migrate
from appliance.store.jobs import JobStore

JOB = "wsjob-aaaaaaaaaaaaaa"
CHILDREN = {
    "job_events": "INSERT INTO job_events (job_id, time, from_phase, to_phase, reason) "
    "VALUES (:j, 1000.0, NULL, 'QUEUED', 'submitted by alice')",
    "job_labels": "INSERT INTO job_labels (job_id, key, value) VALUES (:j, 'team', 'nlp')",
    "replicas": 'INSERT INTO replicas (job_id, name, role, "index", node, phase, address, pid, '
    "exit_code, message, log_tail) VALUES (:j, 'chief-0', 'chief', 0, 'n', 'READY', '', 0, "
    "NULL, '', '')",
    "placements": "INSERT INTO placements (job_id, replica, node, amount) "
    "VALUES (:j, 'cs2-0', 'cs2-0', 1)",
    "job_attempts": "INSERT INTO job_attempts (job_id, attempt, scheduled_at, started_at, "
    "ended_at, systems, reason, ended_in) VALUES (:j, 1, 1.0, 2.0, 3.0, 'cs2-0', 'x', 'FAILED')",
}


def test_rows_of_a_job_survive_every_migration(store_url: str) -> None:
    engine = make_engine(store_url)
    try:
        command.upgrade(alembic_config(engine), "0005")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO nodes (name, kind, capacity, state) "
                    "VALUES ('cs2-0', 'cs2', 1, 'ok')"
                )
            )
            conn.execute(
                text(
                    'INSERT INTO jobs (id, "user", phase, priority, mode, num_csx, num_steps, '
                    "model_dir, params_yaml, labels, plan, reason, pending_reason, systems, "
                    "created_at, updated_at, started_at, finished_at, progress, max_restarts) "
                    "VALUES (:j, 'alice', 'RUNNING', 2, 'train', 1, 100, '/m', "
                    "'model:\n  name: fc_mnist\n', '{\"team\": \"nlp\"}', "
                    '\'{"model_bytes": 1, "groups": [["chief", 1, 0], ["cs2", 1, 1]]}\', '
                    "'', '', 'cs2-0', 1000.0, 1000.0, 1001.0, 0.0, '{}', NULL)"
                ),
                {"j": JOB},
            )
            for insert in CHILDREN.values():
                conn.execute(text(insert), {"j": JOB})
        migrate(engine)
        with engine.connect() as conn:
            counts = {
                table: conn.execute(text(f"SELECT count(*) FROM {table}")).scalar()
                for table in CHILDREN
            }
        assert counts == dict.fromkeys(CHILDREN, 1)
        job = JobStore(engine).get_job(JOB)
        assert (job.spec.num_steps, dict(job.spec.labels), job.systems) == (
            100,
            {"team": "nlp"},
            ("cs2-0",),
        )
        assert [e.reason for e in JobStore(engine).events(JOB)] == ["submitted by alice"]
    finally:
        engine.dispose()
