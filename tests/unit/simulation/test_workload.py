"""Workloads of `appliance simulate`: our trace CSV, a Slurm sacct export, the generator, and
every bad row refused with its line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.domain.errors import InvalidSpec
from appliance.domain.spec import Priority
from appliance.simulation.workload import (
    MAX_TRACE_BYTES,
    Generator,
    SimJob,
    parse_trace,
    queue_name,
    read_trace,
    to_queues,
    weights,
)

OURS = """submit_time,num_csx,duration,priority,queue,user
100,4,3600,P1,nlp,alice
160,1,01:30:00,3,,
2024-05-01T00:00:00Z,2,1-00:00:00,p2,vision,bob
"""

SACCT = """JobID|JobName|Partition|QOS|User|State|Submit|Start|End|Elapsed|NNodes
101|train|gpu|high|alice|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:05:00|2024-05-01T11:05:00|01:00:00|4
101.batch|batch|||alice|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:05:00|2024-05-01T11:05:00|01:00:00|4
102|eval|cpu|normal|bob|CANCELLED by 7|2024-05-01T10:10:00|Unknown|2024-05-01T10:20:00|00:00:00|1
103|big|gpu|scavenger|carol|COMPLETED|2024-05-01T10:30:00|2024-05-01T12:00:00|2024-05-01T12:30:00||8
"""


def test_our_csv_with_numbers_iso_times_elapsed_and_defaults() -> None:
    jobs, left = parse_trace(OURS)
    assert left.rows == 0
    by_size = {job.num_csx: job for job in jobs}
    assert by_size[4] == SimJob(0.0, 4, 3600.0, Priority.P1, "nlp", "alice")
    assert by_size[1] == SimJob(60.0, 1, 5400.0, Priority.P3, "default", "sim")
    # An ISO time is seconds since the epoch: far after the numbers, relative to the first.
    assert by_size[2].submit_at == 1714521600.0 - 100 and by_size[2].duration == 86400.0
    assert [job.submit_at for job in jobs] == sorted(job.submit_at for job in jobs)


def test_a_sacct_export_maps_as_documented() -> None:
    jobs, left = parse_trace(SACCT)
    assert (left.steps, left.never_started, left.unreadable) == (1, 1, 0)
    first, big = jobs
    assert first == SimJob(0.0, 4, 3600.0, Priority.P1, "gpu", "alice")
    # No Elapsed: End - Start; QOS scavenger is P3; submitted 30 minutes after the first.
    assert big == SimJob(1800.0, 8, 1800.0, Priority.P3, "gpu", "carol")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("submit_time,num_csx\n1,1\n", "trace line 2: no column duration"),
        ("submit_time,num_csx,duration\nsoon,1,5\n", "trace line 2: submit_time 'soon'"),
        ("submit_time,num_csx,duration\n1,0,5\n", "trace line 2: num_csx '0'"),
        ("submit_time,num_csx,duration\n1,1,-5\n", "trace line 2: duration '-5'"),
        ("submit_time,num_csx,duration\n1,1,nan\n", "trace line 2: duration 'nan'"),
        ("submit_time,num_csx,duration,priority\n1,1,5,P9\n", "trace line 2: priority 'P9'"),
        ("submit_time,num_csx,duration,queue\n1,1,5,a b\n", "trace line 2: queue 'a b'"),
        ("submit_time,num_csx,duration\n1,1,5\n2,1e400,5\n", "trace line 3: num_csx"),
        ("submit_time,num_csx,duration\n", "trace: no job to simulate"),
        ("JobID|Submit|Start\n1|2024-05-01T10:00:00|2024-05-01T10:00:00\n", "needs the columns"),
        ("JobID|Submit|Start|NNodes\n1|soon|x|1\n", "trace: no job to simulate in it (1 rows"),
    ],
)
def test_a_bad_row_is_refused_naming_its_line_and_column(text: str, said: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        parse_trace(text)
    assert said in refused.value.message and refused.value.field == "trace"


def test_a_sacct_exports_odd_rows_are_counted_and_left_out_not_a_reason_to_stop() -> None:
    odd = (
        "104|x|gpu|normal|dan|COMPLETED|soon|2024-05-01T10:05:00||01:00:00|1\n"
        "105|x|gpu|normal|dan|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:05:00||forever|1\n"
        "106|x|gpu|normal|dan|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:05:00||01:00:00|0\n"
        "107|x|a b|normal|dan|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:05:00||01:00:00|1\n"
        "108|x|gpu|normal|dan|COMPLETED|2024-05-01T10:00:00|2024-05-01T10:05:00||01:00:00\n"
    )
    jobs, left = parse_trace(SACCT + odd)
    assert len(jobs) == 2  # the two good jobs of SACCT
    assert (left.steps, left.never_started, left.unreadable) == (1, 1, 5)
    assert left.examples == [
        "line 6: Submit 'soon' is not a time (seconds or ISO 8601)",
        "line 7: Elapsed 'forever' is not a duration (seconds or [D-]HH:MM:SS)",
        "line 8: NNodes '0' is not a number of systems from 1 to 4096",
    ]
    assert left.said().startswith("1 job steps, 1 jobs that never started, 5 rows that could")


def test_partitions_that_are_no_queue_here_go_to_the_default_queue() -> None:
    jobs, _ = parse_trace(SACCT)
    mapped, moved = to_queues(jobs, {"default", "cpu"})
    assert [job.queue for job in mapped] == ["default", "default"]
    assert moved == {"gpu": 2}
    kept, none = to_queues(jobs, {"default", "gpu"})
    assert kept == jobs and none == {}


def test_a_trace_is_bounded_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.csv"
    with big.open("wb") as f:
        f.truncate(MAX_TRACE_BYTES + 1)
    with pytest.raises(InvalidSpec, match="larger than 64 MiB"):
        read_trace(big)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InvalidSpec, match="not UTF-8"):
        read_trace(binary)


def test_the_generator_is_seeded_and_draws_by_weight() -> None:
    gen = Generator(jobs=2000, arrivals_per_hour=3600, sizes={1: 3, 8: 1}, seed=5)
    jobs = gen.workload()
    assert jobs == gen.workload()  # the same seed, the same workload
    ones = sum(1 for job in jobs if job.num_csx == 1)
    assert 0.7 < ones / len(jobs) < 0.8  # weights 3:1
    # Poisson arrivals at 3,600 an hour: the mean gap is a second.
    assert 1800 < jobs[-1].submit_at < 2200


def test_weights_name_the_option_they_come_from() -> None:
    assert weights("P1:1,P3:2", "priorities", Priority.parse) == {Priority.P1: 1, Priority.P3: 2}
    for bad in ("P1:x", "P9:1", "P1:0", "P1:-1", "", ",", ":3"):
        with pytest.raises(InvalidSpec) as refused:
            weights(bad, "priorities", Priority.parse)
        assert refused.value.field == "priorities"
    for bad in ("a b:1", "-x:1", "ok:1,"):
        with pytest.raises(InvalidSpec) as refused:
            weights(bad, "queue_mix", queue_name)
        assert refused.value.field == "queue_mix"
