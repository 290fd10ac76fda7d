"""Where an OIDC issuer's keys come from (server/oidc.py checks JWTs with them): a JWKS file
the admin keeps current, followed on change, or the issuer's JWKS URL, fetched by a thread of
its own, as the Kubernetes API server fetches its issuer's keys.

A URL is fetched at start, then every `refresh` seconds, and again soon after a JWT names a key
not held (the issuer rotated its keys), but at most once per `min_refetch` seconds however many
such JWTs come: a caller can never make the coordinator fetch at its pace, and no call ever
waits for a fetch (a JWT whose key is not here yet is refused; its retry finds it). Only
HTTPS (plain HTTP to a loopback address alone), verified against the system's CAs or
`ca_file`; no redirects (one could lead to plaintext); the body is bounded before it is
parsed. A fetch that fails keeps the keys held, says why once, and is retried.
"""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import jwt

log = logging.getLogger(__name__)

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA")
MAX_JWKS_BYTES = 1024 * 1024
FILE_CHECK_SECONDS = 0.5
REFRESH_SECONDS = 300.0  # a URL's keys are fetched again this often
MIN_REFETCH_SECONDS = 10.0  # and after an unknown key, no sooner than this after a fetch
RETRY_SECONDS = 10.0  # after a fetch that failed
FETCH_TIMEOUT_SECONDS = 5.0
FIRST_FETCH_WAIT_SECONDS = 5.0  # the start waits this long for a URL's first keys

Keys = dict[str, jwt.PyJWK]


class KeySource(Protocol):
    def held(self) -> Keys: ...

    def unknown(self) -> None:
        """A JWT named a key not held."""

    def close(self) -> None: ...


def parse_jwks(text: str | bytes, where: str) -> Keys:
    """The keys of a JWKS document that use an accepted algorithm, by key id; ValueError naming
    `where` when it is not one."""
    try:
        document = json.loads(text)
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        keys = jwt.PyJWKSet.from_dict(document).keys
    except (ValueError, TypeError, KeyError, AttributeError, jwt.PyJWTError) as exc:
        raise ValueError(f"cannot read the OIDC JWKS {where}: {exc}") from None
    usable = {str(k.key_id): k for k in keys if k.algorithm_name in ALGORITHMS}
    if len(usable) != len(keys):
        log.warning("the JWKS %s: keys without an accepted algorithm are ignored", where)
    return usable


class JwksFile:
    """The keys of a JWKS file, read again when it changes (looked at every 0.5 s, when a JWT
    comes); a file that cannot be read holds no key, so every JWT is refused until it can."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self._path = path
        self._clock = clock
        self._stamp: tuple[int, int] | None = None
        self._checked = -FILE_CHECK_SECONDS
        self._keys: Keys = {}
        self.held()
        if not self._keys:
            raise SystemExit(f"the OIDC JWKS file {path} holds no usable key")

    def held(self) -> Keys:
        if self._clock() - self._checked >= FILE_CHECK_SECONDS:
            self._checked = self._clock()
            self._follow()
        return self._keys

    def _follow(self) -> None:
        try:
            found = self._path.stat()
            stamp = (found.st_ino, found.st_mtime_ns)
        except OSError:
            stamp = (0, 0)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            if self._path.stat().st_size > MAX_JWKS_BYTES:
                raise ValueError(f"file {self._path} is larger than {MAX_JWKS_BYTES} bytes")
            self._keys = parse_jwks(self._path.read_bytes(), f"file {self._path}")
        except OSError as exc:
            log.error("cannot read the OIDC JWKS file %s (%s); refusing every OIDC token "
                      "until it can be read", self._path, exc.strerror or exc)  # fmt: skip
            self._keys = {}
        except ValueError as exc:
            log.error("%s; refusing every OIDC token until it can be read", exc)
            self._keys = {}

    def unknown(self) -> None:
        pass  # the file is looked at again anyway

    def close(self) -> None:
        pass


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx is then an error: no fetch goes where the admin did not say


class JwksUrl:
    """The keys at the issuer's JWKS URL, fetched by a daemon thread (see the module's doc)."""

    def __init__(
        self,
        url: str,
        ca_file: Path | None = None,
        *,
        refresh: float = REFRESH_SECONDS,
        min_refetch: float = MIN_REFETCH_SECONDS,
        retry: float = RETRY_SECONDS,
        first_wait: float = FIRST_FETCH_WAIT_SECONDS,
    ) -> None:
        if urllib.parse.urlsplit(url).scheme not in ("https", "http"):
            raise SystemExit(f"the OIDC JWKS URL {url} must be https://")
        self.url = url
        try:
            context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        except (OSError, ssl.SSLError) as exc:
            raise SystemExit(f"cannot use the OIDC CA file {ca_file}: {exc}") from None
        # Straight to the issuer: no proxy from the environment (one could see plain HTTP to
        # a loopback issuer), no redirect.
        self._open = urllib.request.build_opener(
            urllib.request.ProxyHandler({}),
            urllib.request.HTTPSHandler(context=context),
            _NoRedirect(),
        ).open
        self._refresh, self._min_refetch, self._retry = refresh, min_refetch, retry
        self._keys: Keys = {}
        self._wanted = threading.Event()
        self._stopping = threading.Event()
        self._tried = threading.Event()
        self.fetches = 0  # fetches made (tried), for the tests and the metrics
        self._thread = threading.Thread(target=self._run, name="oidc-jwks", daemon=True)
        self._thread.start()
        if not self._tried.wait(first_wait) or not self._keys:
            log.error("no keys from the OIDC JWKS URL %s yet: OIDC tokens are refused until "
                      "a fetch succeeds (retried every %.0f s)", url, retry)  # fmt: skip

    def held(self) -> Keys:
        return self._keys

    def unknown(self) -> None:
        self._wanted.set()

    def close(self) -> None:
        self._stopping.set()
        self._wanted.set()
        self._thread.join(FETCH_TIMEOUT_SECONDS + 1)

    def _run(self) -> None:
        failing = ""
        while not self._stopping.is_set():
            self.fetches += 1
            try:
                self._keys = self._fetch()
                wait, failing = self._refresh, ""
            except Exception as exc:  # the thread lives on, whatever a fetch met
                said = str(exc) if isinstance(exc, ValueError) else f"{self.url}: {exc!r}"
                if said != failing:  # said once, not every retry
                    log.error("%s; keeping the keys held (%d), retrying", said, len(self._keys))
                wait, failing = self._retry, said
            self._tried.set()
            if self._stopping.wait(min(self._min_refetch, wait)):
                return
            self._wanted.wait(max(wait - self._min_refetch, 0.0))
            self._wanted.clear()

    def _fetch(self) -> Keys:
        where = f"URL {self.url}"
        try:
            request = urllib.request.Request(self.url, headers={"Accept": "application/json"})
            with self._open(request, timeout=FETCH_TIMEOUT_SECONDS) as response:
                body = response.read(MAX_JWKS_BYTES + 1)
                if len(body) <= MAX_JWKS_BYTES and getattr(response, "length", None):
                    raise ValueError("the body was cut off before its Content-Length")
        except urllib.error.HTTPError as exc:
            raise ValueError(f"cannot fetch the OIDC JWKS {where}: HTTP {exc.code}") from None
        except (OSError, ValueError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise ValueError(f"cannot fetch the OIDC JWKS {where}: {reason}") from None
        if len(body) > MAX_JWKS_BYTES:
            raise ValueError(f"the OIDC JWKS {where} is larger than {MAX_JWKS_BYTES} bytes")
        keys = parse_jwks(body, where)
        if not keys:
            raise ValueError(f"the OIDC JWKS {where} holds no usable key")
        return keys
