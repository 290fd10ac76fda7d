"""The `appliance` command: run the coordinator, or run it with a demo job."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from pydantic import ValidationError
from pydantic_settings import SettingsError

from appliance.config import DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT, Settings
from appliance.data_commands import data
from appliance.domain.errors import ApplianceError
from appliance.server.app import Coordinator, StartupError
from appliance.simulation.command import simulate
from appliance.token_commands import token

EXAMPLE_PARAMS = Path(__file__).parent / "examples" / "params_fc_mnist.yaml"


def _settings(
    data_dir: Path | None, grpc_port: int | None, http_port: int | None, **tls: Any
) -> Settings:
    given = {"data_dir": data_dir, "grpc_port": grpc_port, "http_port": http_port, **tls}
    overrides = {name: value for name, value in given.items() if value is not None}
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        if not first["loc"]:  # a rule across settings: its message names them
            raise click.ClickException(first["msg"].removeprefix("Value error, ")) from None
        name, *inside = (str(part) for part in first["loc"])
        where = f" ({'.'.join(inside)})" if inside else ""  # a key inside a JSON setting
        raise click.ClickException(
            f"setting APPLIANCE_{name.upper()}{where}: {first['msg']} (got {first.get('input')!r})"
        ) from None
    except SettingsError as exc:  # not parseable at all (a list setting is JSON)
        raise click.ClickException(
            f'{exc}; a list or a table is JSON, e.g. ["/scratch"] or {{"cs2": {{"cpu": "1"}}}}'
        ) from None


_server_options = [
    click.option("--data-dir", type=click.Path(path_type=Path), default=None,
                 help="Store, logs and model dirs [default: .appliance, or APPLIANCE_DATA_DIR]."),
    click.option("--grpc-port", type=click.IntRange(0, 65535), default=None,
                 help=f"gRPC port; 0 picks a free one [default: {DEFAULT_GRPC_PORT}]."),
    click.option("--http-port", type=click.IntRange(0, 65535), default=None,
                 help=f"HTTP port; 0 picks a free one [default: {DEFAULT_HTTP_PORT}]."),
    click.option("--tls-cert", "tls_cert_file", type=click.Path(path_type=Path), default=None,
                 help="PEM serving certificate (chain) for every door, reloaded when it changes "
                 "[default: one signed by the CA in <data dir>/tls, made on first start]."),
    click.option("--tls-key", "tls_key_file", type=click.Path(path_type=Path), default=None,
                 help="PEM key of --tls-cert."),
    click.option("--tls-client-ca", "tls_client_ca_file", type=click.Path(path_type=Path),
                 default=None,
                 help="PEM bundle of CAs: callers must present a client certificate of one "
                 "(mutual TLS; not /healthz, /readyz); reloaded when it changes."),
    click.option("--insecure", is_flag=True, default=None,
                 help="Serve plaintext, no TLS: on a loopback address only."),
]  # fmt: skip


F = TypeVar("F", bound=Callable[..., Any])


def server_options(fn: F) -> F:
    for option in reversed(_server_options):
        fn = option(fn)
    return fn


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Log at DEBUG level.")
def main(verbose: bool) -> None:
    """Run the appliance's coordinator service."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)


main.add_command(data)
main.add_command(token)


@main.command()
@server_options
def serve(data_dir: Path | None, grpc_port: int | None, http_port: int | None, **tls: Any) -> None:
    """Start the coordinator (SQLite + local worker processes unless configured otherwise).

    \b
    Example:
      appliance serve --data-dir /tmp/appliance --grpc-port 0
    """
    asyncio.run(_serve(_settings(data_dir, grpc_port, http_port, **tls), demo=False))


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Data dir of the SQLite store [default: .appliance].",
)
def migrate(data_dir: Path | None) -> None:
    """Apply the store's schema migrations (serve also does this on start).

    \b
    Example:
      APPLIANCE_DATABASE_URL=postgresql://app@127.0.0.1/appliance appliance migrate
    """
    from appliance.store.engine import make_engine
    from appliance.store.engine import migrate as apply_migrations

    settings = _settings(data_dir, None, None)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.store.url)
    try:
        apply_migrations(engine)
    except Exception as exc:
        first_line = str(exc).strip().splitlines()[0]
        raise click.ClickException(f"cannot migrate {engine.url!r}: {first_line}") from None
    finally:
        engine.dispose()
    click.echo(f"{engine.url!r} is at the newest schema")


@main.command()
@server_options
@click.option("--num-csx", default=2, show_default=True, help="CS-2 systems for the demo job.")
@click.option("--num-steps", default=200, show_default=True, help="Steps of the demo job.")
def demo(
    data_dir: Path | None,
    grpc_port: int | None,
    http_port: int | None,
    num_csx: int,
    num_steps: int,
    **tls: Any,
) -> None:
    """Start the coordinator, submit a demo fc_mnist job and follow it; keep serving after.

    \b
    Example:
      appliance demo            # then, in another terminal: csctl get jobs -a
    """
    settings = _settings(data_dir, grpc_port, http_port, **tls)
    asyncio.run(_serve(settings, demo=True, num_csx=num_csx, num_steps=num_steps))


async def _serve(
    settings: Settings, *, demo: bool, num_csx: int = 2, num_steps: int = 200
) -> None:
    coordinator = Coordinator(settings)
    try:
        await coordinator.start()
    except StartupError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {settings.host}: {exc.strerror}; pick another port with "
            "--grpc-port/--http-port (0 = any free port)"
        ) from None
    # Everything built so far (modules, the app, the pool, the caches' scaffolding) lives as
    # long as the process: out of the collector's reach, a full collection scans only what
    # the load made. Measured under 50 REST submitters: full collections of 60-110 ms were
    # the tail of GET latency; after freezing ~126k objects they take 8-25 ms.
    gc.freeze()
    # Before the lines below: whoever reads them may stop the coordinator at once.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, coordinator.auth.reload)  # the tokens file again
    grpc_address = dial_address(settings.host, coordinator.grpc_port)
    http_address = dial_address(settings.host, coordinator.http_port)
    scheme = "http" if coordinator.tls is None else "https"
    click.echo(
        f"appliance {grpc_address} (gRPC), {scheme}://{http_address} (HTTP), data in "
        f"{settings.data_dir.resolve()}"
        + (f"; listening on every address ({settings.host})" if _wildcard(settings.host) else "")
    )
    tls = coordinator.tls
    if tls is not None:
        click.echo(f"TLS: clients verify with the CA {tls.ca_file} ({tls.fingerprint})")
    else:
        click.echo("TLS: off (--insecure): plaintext on loopback; csctl needs --insecure")
    ca = None if tls is None else tls.ca_file
    if demo and ca is not None:
        click.echo(local_cluster(grpc_address, ca))
    click.echo(
        try_hint(grpc_address, in_pod="KUBERNETES_SERVICE_HOST" in os.environ, ca=ca, demo=demo)
    )
    if demo:
        threading.Thread(
            target=_run_demo_job, args=(grpc_address, num_csx, num_steps, ca), daemon=True
        ).start()
    stopping = asyncio.create_task(stop.wait())
    stepped_down = asyncio.create_task(coordinator.stepped_down.wait())
    await asyncio.wait({stopping, stepped_down}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if stepped_down.done():
        await coordinator.stop()
        raise click.ClickException(
            "lost the leadership lease (another coordinator leads now, or the lease could not "
            "be renewed in time): stopped acting and exits; start it again to stand by"
        )
    stepped_down.cancel()
    click.echo("stopping: draining servers (running replicas are left to finish)")
    await coordinator.stop()


def _wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::", "[::]")


def dial_address(host: str, port: int) -> str:
    """HOST:PORT a user on this machine can dial for a server bound to `host`: a wildcard bind
    (0.0.0.0, ::) is not an address to dial; loopback reaches it."""
    if _wildcard(host):
        return f"127.0.0.1:{port}"
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def try_hint(
    grpc_address: str, *, in_pod: bool, ca: Path | None = None, demo: bool = False
) -> str:
    """The line telling a user how to reach the coordinator. In a Kubernetes pod its own
    addresses mean nothing to the user: they come in through the Service."""
    if in_pod:
        return (
            "try, from your machine: kubectl port-forward svc/<release> 50051 8080 and fetch the "
            "CA (the chart prints both commands), then: csctl --server 127.0.0.1:50051 "
            "--certificate-authority ca.crt get jobs -a"
        )
    csctl = csctl_command()
    trust = "--insecure" if ca is None else f"--certificate-authority {ca}"
    hint = (
        f"try: {csctl} get jobs -a"
        if demo and ca is not None
        else f"try: {csctl} --server {grpc_address} {trust} get jobs -a"
    )
    if csctl != "csctl":
        hint += f" (plain `csctl` once you run: . {Path(csctl).parent / 'activate'})"
    return hint


def local_cluster(grpc_address: str, ca: Path) -> str:
    """Point csctl at this demo (cluster `local`: the address and the CA, made current), so
    the demo needs no configuration; the line saying so."""
    from appliance.client.user_config import ConfigError, config_path, set_cluster, use_cluster

    path = config_path(os.environ)
    try:
        set_cluster(path, "local", grpc_address, ca, False)
        use_cluster(path, "local")
    except ConfigError as exc:
        return f"could not write csctl's config ({exc}); pass --certificate-authority {ca}"
    return f"csctl now talks to this demo: cluster `local` in {path} (its server and CA)"


def csctl_command() -> str:
    """How a user types csctl in a new shell: `csctl` when the one installed beside this
    command is what PATH finds; otherwise its path (relative when under the working directory,
    e.g. .venv/bin/csctl: `make install` does not activate the virtualenv)."""
    beside = Path(sys.executable).parent / "csctl"  # not resolved: a venv's python is a link
    on_path = shutil.which("csctl")
    if not beside.exists() or (on_path is not None and os.path.samefile(on_path, beside)):
        return "csctl"
    try:
        return str(beside.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(beside.absolute())


def _run_demo_job(address: str, num_csx: int, num_steps: int, ca: Path | None) -> None:
    from appliance.client import ApplianceClient

    csctl = csctl_command()
    try:
        with ApplianceClient(address, ca=ca, insecure=ca is None) as client:
            job = client.submit(
                params=EXAMPLE_PARAMS,
                num_csx=num_csx,
                num_steps=num_steps,
                labels={"demo": "fc-mnist"},
            )
            click.echo(f"submitted {job.id}; follow it with: {csctl} get job {job.id}")
            for event in job.watch():
                click.echo(f"  {event}")
            click.echo(
                f"demo job {job.id} is {job.status.phase.value}; Ctrl-C stops the appliance"
            )
    except ApplianceError as exc:
        click.echo(f"demo job failed: {exc.message}", err=True)


main.add_command(simulate)
