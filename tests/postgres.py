"""A throwaway PostgreSQL server for the test suite, and one fresh database per test.

The server comes from the distribution's packages (`apt-get install postgresql`): `initdb` into
a temporary directory, `pg_ctl start -w` on 127.0.0.1 and a free port, sockets in that
directory, `pg_ctl stop` and removal on teardown. `initdb` refuses to run as root, so as root
the server commands run as the `postgres` system user through `runuser`.

`APPLIANCE_TEST_POSTGRES_URL` points the suite at an existing server instead (its user needs
CREATEDB). With `APPLIANCE_REQUIRE_POSTGRES=1` (as in CI) a missing server is an error, not a
skip.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy.engine import URL, make_url

URL_ENV = "APPLIANCE_TEST_POSTGRES_URL"
REQUIRE_ENV = "APPLIANCE_REQUIRE_POSTGRES"
NOT_FOUND = "PostgreSQL server binaries not found; apt-get install postgresql"
SYSTEM_USER = "postgres"
SUPERUSER = "postgres"
_START_ATTEMPTS = 3


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server can be had on this machine."""


@dataclasses.dataclass(frozen=True)
class PostgresServer:
    """A running server; `admin_url` reaches a database we may CREATE DATABASE from."""

    admin_url: URL
    started_in: float = 0.0  # seconds the server took to initdb and start; 0 when external
    # Databases emptied after a test, ready for the next one (CREATE DATABASE takes ~0.3 s).
    _spare: list[str] = dataclasses.field(default_factory=list, repr=False)

    def url(self, database: str) -> str:
        """The SQLAlchemy URL (psycopg 3 driver) of `database` on this server."""
        url = self.admin_url.set(drivername="postgresql+psycopg", database=database)
        return url.render_as_string(hide_password=False)

    @contextlib.contextmanager
    def fresh_database(self) -> Iterator[str]:
        """Yield the URL of an empty database of our own; it is emptied again afterwards.

        Emptying ends the connections a test left open, then drops and recreates the `public`
        schema, so no table, row or sequence of one test is seen by the next.
        """
        name = self._spare.pop() if self._spare else self._create_database()
        try:
            yield self.url(name)
        finally:
            self._empty(name)
            self._spare.append(name)

    def drop_spare_databases(self) -> None:
        with self._connect() as conn:
            while self._spare:
                name = sql.Identifier(self._spare.pop())
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))

    def _create_database(self) -> str:
        name = f"test_{uuid.uuid4().hex[:16]}"
        with self._connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return name

    def _empty(self, name: str) -> None:
        with self._connect() as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
        # DROP SCHEMA waits for the locks of terminated backends; they release them on exit.
        with self._connect(name) as conn:
            conn.execute("DROP SCHEMA public CASCADE")
            conn.execute("CREATE SCHEMA public")

    def _connect(self, database: str = "") -> psycopg.Connection[tuple[object, ...]]:
        url = self.admin_url
        return psycopg.connect(
            host=url.host or "",
            port=url.port or 5432,
            user=url.username or "",
            password=url.password or "",
            dbname=database or url.database or "postgres",
            autocommit=True,
        )


def find_bindir() -> Path | None:
    """The `bin` directory of the newest PostgreSQL under /usr/lib/postgresql, if any."""
    candidates = [
        p.parent
        for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")
        if (p.parent / "pg_ctl").exists()
    ]

    def major(bindir: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", bindir.parent.name))

    return max(candidates, key=major, default=None)


@contextlib.contextmanager
def postgres_server(also_on: tuple[str, str] | None = None) -> Iterator[PostgresServer]:
    """An external server when URL_ENV is set, else a throwaway local one.

    `also_on` = (address, network): a local server listens on that address too (a bridge of
    this machine) and lets clients of that network (e.g. pods on it) in. Raises
    PostgresUnavailable when no server can be had.
    """
    external = os.environ.get(URL_ENV, "").strip()
    if external and also_on is None:
        server = PostgresServer(make_url(external))
        try:
            yield server
        finally:
            server.drop_spare_databases()
        return
    bindir = find_bindir()
    if bindir is None:
        raise PostgresUnavailable(NOT_FOUND)
    with _local_server(bindir, also_on) as server:
        yield server


@contextlib.contextmanager
def _local_server(bindir: Path, also_on: tuple[str, str] | None) -> Iterator[PostgresServer]:
    started = time.monotonic()
    as_root = os.geteuid() == 0
    base = Path(tempfile.mkdtemp(prefix="appliance-pg-"))
    try:
        if as_root:
            try:
                account = pwd.getpwnam(SYSTEM_USER)
            except KeyError:
                raise PostgresUnavailable(
                    f"running as root needs the {SYSTEM_USER!r} system user that the "
                    "postgresql package creates; apt-get install postgresql"
                ) from None
            os.chown(base, account.pw_uid, account.pw_gid)
        data = base / "data"
        log = base / "server.log"
        _run(
            bindir,
            as_root,
            base,
            ["initdb", "-D", str(data), "-U", SUPERUSER, "--auth=trust", "--no-locale"],
            ["-E", "UTF8", "--no-sync"],
        )
        listen = "127.0.0.1"
        if also_on:
            listen = f"127.0.0.1,{also_on[0]}"
            with (data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {also_on[1]} trust\n")
        port = _start(bindir, as_root, base, data, log, listen)
        try:
            admin = URL.create(
                "postgresql+psycopg",
                username=SUPERUSER,
                host="127.0.0.1",
                port=port,
                database="postgres",
            )
            yield PostgresServer(admin, started_in=time.monotonic() - started)
        finally:
            _run(bindir, as_root, base, ["pg_ctl", "stop", "-D", str(data), "-m", "fast", "-w"])
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _start(bindir: Path, as_root: bool, base: Path, data: Path, log: Path, listen: str) -> int:
    """Start on a free port; another process may take the port first, so try a few."""
    for attempt in range(1, _START_ATTEMPTS + 1):
        port = _free_port()
        options = (
            f"-c listen_addresses={listen} -c port={port} -c unix_socket_directories={base} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        try:
            _run(
                bindir,
                as_root,
                base,
                ["pg_ctl", "start", "-w", "-t", "60", "-D", str(data), "-l", str(log)],
                ["-o", options],
            )
            return port
        except PostgresUnavailable as exc:
            if attempt == _START_ATTEMPTS:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise PostgresUnavailable(
                    f"PostgreSQL did not start; server log:\n{tail}"
                ) from exc
    raise AssertionError("unreachable")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run(
    bindir: Path, as_root: bool, cwd: Path, argv: Sequence[str], extra: Sequence[str] = ()
) -> None:
    command = [str(bindir / argv[0]), *argv[1:], *extra]
    if as_root:
        command = ["runuser", "-u", SYSTEM_USER, "--", *command]
    # cwd: the server user may not be allowed into the caller's working directory.
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PostgresUnavailable(
            f"{' '.join(argv[:2])} failed ({done.returncode}): {done.stderr or done.stdout}"
        )
