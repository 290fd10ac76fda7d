"""The user's appliance settings, shared by csctl, the Python client and the launcher.

Where to find the appliance: `--server`, then $CSCTL_SERVER, then the config file. The bearer
token (when the appliance has authentication on): the flag or `token=` argument, then
$CSCTL_TOKEN, then the config file.

The config file is `$CSCTL_CONFIG`, else `$XDG_CONFIG_HOME/csctl/config.yaml`, else
`~/.config/csctl/config.yaml`; it is YAML with a `server: host:port` key and, when the
appliance has authentication on, a `token:` key. csctl writes it readable by its owner only
(mode 0600) and warns when a file holding a token can be read by anyone else.

Both stay hand-written, for csctl's sake: platformdirs would move the file on macOS (to
~/Library/Application Support) away from where the README says it is, and reads os.environ
rather than the environment handed in; pydantic would check two string keys at the price of
~75 ms at every csctl start (importing it and building the model, measured: csctl imports in
~185 ms without it).
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Mapping
from pathlib import Path

import yaml

DEFAULT_ADDRESS = "127.0.0.1:50051"
ENV_SERVER = "CSCTL_SERVER"
ENV_CONFIG = "CSCTL_CONFIG"
ENV_TOKEN = "CSCTL_TOKEN"
SETTABLE = ("server", "token")
REDACTED = "REDACTED"  # what `config view` shows in place of a token


class ConfigError(Exception):
    """The config file or a setting is unusable; the message says which and why."""


@dataclasses.dataclass(frozen=True)
class ServerAddress:
    """The chosen `host:port` and where it came from (for messages and `csctl version`)."""

    address: str
    source: str


def config_path(environ: Mapping[str, str]) -> Path:
    """The config file csctl reads (it need not exist unless named by $CSCTL_CONFIG)."""
    if environ.get(ENV_CONFIG):
        return Path(environ[ENV_CONFIG]).expanduser()
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "csctl" / "config.yaml"


def resolve_server(flag: str | None, environ: Mapping[str, str]) -> ServerAddress:
    """Pick the server address by precedence: flag, environment, config file, default."""
    if flag:
        return ServerAddress(_checked(flag, "--server"), "--server")
    if environ.get(ENV_SERVER):
        return ServerAddress(_checked(environ[ENV_SERVER], ENV_SERVER), ENV_SERVER)
    path = config_path(environ)
    cluster = current_cluster(environ)
    if cluster is not None and cluster.server:
        where = f"cluster {cluster.name} in config file {path}"
        return ServerAddress(_checked(cluster.server, where), where)
    server = read_config(path, required=bool(environ.get(ENV_CONFIG))).get("server")
    if server is not None:
        if not isinstance(server, str):
            raise ConfigError(f"`server` in config file {path} must be a host:port string")
        return ServerAddress(_checked(server, f"config file {path}"), f"config file {path}")
    return ServerAddress(DEFAULT_ADDRESS, "default")


@dataclasses.dataclass(frozen=True)
class Token:
    """The bearer token csctl sends, and the config file it was read from (if it was)."""

    value: str = dataclasses.field(repr=False)
    file: Path | None = None


def resolve_token(flag: str | None, environ: Mapping[str, str]) -> Token | None:
    """The bearer token by precedence: flag, environment, `token:` in the config file."""
    if flag:
        return Token(flag)
    if environ.get(ENV_TOKEN):
        return Token(environ[ENV_TOKEN])
    path = config_path(environ)
    token = read_config(path, required=bool(environ.get(ENV_CONFIG))).get("token")
    if token is not None and not isinstance(token, str):
        raise ConfigError(f"`token` in config file {path} must be a string")
    return Token(token, path) if token else None


def exposure_warning(path: Path) -> str | None:
    """A warning when the config file at `path` (which holds a token) can be read by its
    group or by others; None when only its owner can (or when it is gone)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None
    readers = [who for who, bit in (("its group", 0o040), ("others", 0o004)) if mode & bit]
    if not readers:
        return None
    return (
        f"warning: config file {path} holds a token and can be read by "
        f"{' and '.join(readers)} (mode {mode:04o}); run `chmod 600 {path}`"
    )


def redacted(settings: Mapping[str, object]) -> dict[str, object]:
    """The settings with the token hidden (for showing them)."""
    return {k: REDACTED if k == "token" and v else v for k, v in settings.items()}


def read_config(path: Path, *, required: bool) -> dict[str, object]:
    """The config file as a mapping; {} if it is absent and not `required`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise ConfigError(f"config file {path} (from ${ENV_CONFIG}) does not exist") from None
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        raise ConfigError(f"config file {path} is not valid YAML") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {path} must be a YAML mapping like `server: host:port`")
    return {str(key): value for key, value in loaded.items()}


def set_setting(path: Path, key: str, value: str) -> str:
    """Write `key: value` (a SETTABLE key) into the config file at `path`, keeping its other
    keys; returns the checked value. The file (created with its directory when absent) is
    written readable by its owner only, mode 0600: it may hold a token.
    """
    if key == "server":
        checked = _checked(value, "the command line")
    elif key == "token":
        checked = _checked_token(value)
    else:
        raise ConfigError(f"unknown setting {key!r}; one of: {', '.join(SETTABLE)}")
    config = read_config(path, required=False)
    config[key] = checked
    _write(path, config)
    return checked


def _write(path: Path, config: Mapping[str, object]) -> None:
    """Write the config file whole, readable by its owner only."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            os.fchmod(file.fileno(), 0o600)  # a leftover temporary may have had another mode
            file.write(yaml.safe_dump(dict(config), sort_keys=False))
        temporary.replace(path)
    except OSError as exc:
        raise ConfigError(f"cannot write config file {path}: {exc.strerror or exc}") from None


def _checked_token(token: str) -> str:
    token = token.strip()
    if not token or any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError("a token is one word of printable characters, with no spaces")
    return token


def _checked(address: str, source: str) -> str:
    address = address.strip()
    if address.startswith("unix:") or "://" in address:  # other gRPC target forms
        return address
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"server address {address!r} from {source} must be host:port")
    return address


# ---- clusters: a server and how to trust it, by name (as kubectl's and csctl's contexts) -------

CLUSTERS, CURRENT = "clusters", "current-cluster"
MAX_CLUSTERS = 64


@dataclasses.dataclass(frozen=True)
class Cluster:
    """A named appliance: its server, the CA its certificate chains to, or plaintext."""

    name: str
    server: str = ""
    certificate_authority: str = ""
    insecure: bool = False
    client_certificate: str = ""  # mutual TLS: what this user presents (client_identity.py)
    client_key: str = ""


def current_cluster(environ: Mapping[str, str]) -> Cluster | None:
    """The cluster `current-cluster` names in the config file; None when it names none."""
    path = config_path(environ)
    config = read_config(path, required=bool(environ.get(ENV_CONFIG)))
    name = config.get(CURRENT)
    if name is None:
        return None
    clusters = _clusters(config, path)
    if not isinstance(name, str) or name not in clusters:
        raise ConfigError(f"`{CURRENT}` in config file {path} names no cluster of `{CLUSTERS}`")
    return clusters[name]


def _entries(config: Mapping[str, object]) -> dict[object, object]:
    entries = config.get(CLUSTERS) or {}
    return entries if isinstance(entries, dict) else {}


def _clusters(config: Mapping[str, object], path: Path) -> dict[str, Cluster]:
    entries = config.get(CLUSTERS) or {}
    if not isinstance(entries, dict) or len(entries) > MAX_CLUSTERS:
        raise ConfigError(
            f"`{CLUSTERS}` in config file {path} must map up to 64 names to clusters"
        )
    found: dict[str, Cluster] = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"cluster {name!r} in config file {path} must be a mapping")
        server, ca = entry.get("server", ""), entry.get("certificate-authority", "")
        insecure = entry.get("insecure", False)
        cert, key = entry.get("client-certificate", ""), entry.get("client-key", "")
        strings = (server, ca, cert, key)
        if not (all(isinstance(v, str) for v in strings) and isinstance(insecure, bool)):
            raise ConfigError(
                f"cluster {name!r} in config file {path}: server, certificate-authority, "
                "client-certificate and client-key are strings, insecure true or false"
            )
        found[str(name)] = Cluster(str(name), server, ca, insecure, cert, key)
    return found


def set_cluster(
    path: Path,
    name: str,
    server: str | None,
    ca: Path | None,
    insecure: bool | None,
    client: tuple[Path, Path] | None = None,
) -> Cluster:
    """Add or change cluster `name` (what is not given is kept); returns it as written.
    `client`: the certificate and key it presents (mutual TLS)."""
    _checked_name(name)
    config = read_config(path, required=False)
    old = _clusters(config, path).get(name, Cluster(name))
    authority = str(ca.expanduser().resolve()) if ca else old.certificate_authority
    entry: dict[str, object] = {
        "server": _checked(server, "--server") if server else old.server,
        "certificate-authority": authority,
        "insecure": old.insecure if insecure is None else insecure,
    }
    cert, key = (str(p.expanduser().resolve()) for p in client) if client else ("", "")
    if cert or old.client_certificate:
        entry["client-certificate"] = cert or old.client_certificate
        entry["client-key"] = key or old.client_key
    clusters: dict[str, object] = {str(k): v for k, v in _entries(config).items()}
    clusters[name] = entry
    config[CLUSTERS] = clusters
    config.setdefault(CURRENT, name)
    _write(path, config)
    return _clusters(config, path)[name]


def use_cluster(path: Path, name: str) -> None:
    """Make `name` the current cluster."""
    config = read_config(path, required=False)
    if name not in _clusters(config, path):
        raise ConfigError(f"no cluster {name!r} in config file {path}; add it with set-cluster")
    config[CURRENT] = name
    _write(path, config)


def _checked_name(name: str) -> str:
    if not (0 < len(name) <= 63 and name.replace("-", "").replace("_", "").isalnum()):
        raise ConfigError(f"cluster name {name[:64]!r}: 1-63 letters, digits, - or _")
    return name
