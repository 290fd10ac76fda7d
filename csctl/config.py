"""Where csctl finds the appliance: `--server`, then $CSCTL_SERVER, then the config file.

The config file is `$CSCTL_CONFIG`, else `$XDG_CONFIG_HOME/csctl/config.yaml`, else
`~/.config/csctl/config.yaml`; it is YAML with a `server: host:port` key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import yaml

from appliance.client import DEFAULT_ADDRESS

ENV_SERVER = "CSCTL_SERVER"
ENV_CONFIG = "CSCTL_CONFIG"
ENV_TOKEN = "CSCTL_TOKEN"


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
    server = read_config(path, required=bool(environ.get(ENV_CONFIG))).get("server")
    if server is not None:
        if not isinstance(server, str):
            raise ConfigError(f"`server` in config file {path} must be a host:port string")
        return ServerAddress(_checked(server, f"config file {path}"), f"config file {path}")
    return ServerAddress(DEFAULT_ADDRESS, "default")


def resolve_token(flag: str | None, environ: Mapping[str, str]) -> str | None:
    """The bearer token by precedence: flag, environment, `token:` in the config file."""
    if flag:
        return flag
    if environ.get(ENV_TOKEN):
        return environ[ENV_TOKEN]
    path = config_path(environ)
    token = read_config(path, required=bool(environ.get(ENV_CONFIG))).get("token")
    if token is not None and not isinstance(token, str):
        raise ConfigError(f"`token` in config file {path} must be a string")
    return token or None


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


def set_server(path: Path, address: str) -> str:
    """Write `server: address` into the config file at `path`, keeping its other keys.

    Returns the checked address. Creates the file (and its directory) when absent.
    """
    checked = _checked(address, "the command line")
    config = read_config(path, required=False)
    config["server"] = checked
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        temporary.replace(path)
    except OSError as exc:
        raise ConfigError(f"cannot write config file {path}: {exc.strerror or exc}") from None
    return checked


def _checked(address: str, source: str) -> str:
    address = address.strip()
    if address.startswith("unix:") or "://" in address:  # other gRPC target forms
        return address
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"server address {address!r} from {source} must be host:port")
    return address
