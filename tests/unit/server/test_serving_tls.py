"""The coordinator's own serving certificate is renewed near its end, by the running servers."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography import x509

from appliance.config.tls_fields import TlsSettings
from appliance.server import pki
from appliance.server.tls import ServingTls


def test_its_own_certificate_is_renewed_near_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = TlsSettings(ca_dir=tmp_path / "ca", serving_dir=tmp_path / "serving")
    tls = ServingTls(settings, "127.0.0.1")

    def serial() -> int:
        return x509.load_pem_x509_certificate(tls.cert_file.read_bytes()).serial_number

    first = serial()
    assert not tls.refresh()  # far from its end: nothing looked at again
    assert serial() == first
    monkeypatch.setattr(pki, "RENEW_BEFORE", datetime.timedelta(days=pki.SERVING_DAYS + 1))
    assert tls.refresh()  # within RENEW_BEFORE: a new one, served
    assert serial() != first
    assert tls.ca is not None and tls.ca.signed(
        x509.load_pem_x509_certificate(tls.cert_file.read_bytes())
    )
