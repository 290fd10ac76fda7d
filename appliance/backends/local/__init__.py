"""The embedded default backend: every replica a subprocess on 127.0.0.1."""

from appliance.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
