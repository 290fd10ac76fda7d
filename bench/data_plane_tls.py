"""What mutual TLS costs the data plane (#36): weight-streaming step time with the replicas'
certificates against without, in one run.

    python -m bench.data_plane_tls [--models fc_mnist,gpt2] [--pairs 2] [--no-record]

Every job's replicas talk gRPC only (APPLIANCE_DATA_PLANE=grpc: shared memory needs no TLS, so
the gRPC data plane is where the cost is). With TLS each replica holds a certificate of a CA
made for the run, issued as the coordinator issues them (server/replica_identity.py; the
harness of tests/integration/test_workers.py gives them when APPLIANCE_TLS_CA_DIR is set),
serves with mutual TLS and checks each caller's certificate per call; without, plaintext and
the token only. Replicas are real processes against the fake coordinator, as in
bench.weight_streaming, whose measurement this reuses. Per model at 1 and 2 CS-2s, `--pairs`
A/B pairs alternating which goes first; each figure is the median of its jobs.
"""

# ruff: noqa: E402  (BLAS threads must be pinned before anything imports NumPy)
from __future__ import annotations

import os

from appliance.workers.models.numerics import pin_blas_threads

pin_blas_threads(os.environ)  # before NumPy loads: what every replica does

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appliance.server.pki import CertificateAuthority
from bench.common import emit
from bench.data_plane import STEPS, params_of
from bench.weight_streaming import streamed_job

CS2_COUNTS = (1, 2)
CA_DIR_ENV = "APPLIANCE_TLS_CA_DIR"


async def step_ms(model: str, num_csx: int, ca_dir: Path | None) -> float:
    """One job's steady step time, with the replicas' certificates from `ca_dir` or none."""
    if ca_dir is None:
        os.environ.pop(CA_DIR_ENV, None)
    else:
        os.environ[CA_DIR_ENV] = str(ca_dir)
    job = await streamed_job(params_of(model, scaling=False), num_csx, STEPS[model])
    return 1000 / float(job["steps_per_second"])


async def measure(models: list[str], pairs: int, ca_dir: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for model in models:
        for num_csx in CS2_COUNTS:
            times: dict[str, list[float]] = {"plaintext": [], "mutual_tls": []}
            for pair in range(pairs):
                order = (
                    ("plaintext", "mutual_tls") if pair % 2 == 0 else ("mutual_tls", "plaintext")
                )
                for mode in order:
                    chosen = ca_dir if mode == "mutual_tls" else None
                    times[mode].append(round(await step_ms(model, num_csx, chosen), 3))
            plain, tls = (statistics.median(times[m]) for m in ("plaintext", "mutual_tls"))
            results[f"{model}_{num_csx}_cs2"] = {
                "step_ms_plaintext": round(plain, 3),
                "step_ms_mutual_tls": round(tls, 3),
                "tls_vs_plaintext": round(tls / plain, 3),
                "every_job_ms": times,
            }
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="fc_mnist,gpt2")
    parser.add_argument("--pairs", type=int, default=2, help="A/B pairs per figure")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    os.environ["APPLIANCE_DATA_PLANE"] = "grpc"  # the replicas inherit it
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as scratch:
        ca_dir = Path(scratch) / "ca"
        CertificateAuthority.load_or_create(ca_dir)
        load_start = os.getloadavg()
        figures = await measure(args.models.split(","), args.pairs, ca_dir)
    result = {
        "transport": "grpc (APPLIANCE_DATA_PLANE=grpc), every replica pair over TCP loopback",
        "cpus": os.cpu_count(),
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "figures": figures,
    }
    emit("data_plane_tls", result)


if __name__ == "__main__":
    asyncio.run(main())
