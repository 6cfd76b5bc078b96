"""TLS for gRPC: a certificate and key to present, and a CA to check the other side with.

A server given a CA requires client certificates signed by it (mTLS); a client given a
CA verifies the server against it (and presents its own certificate when it has one).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc


def _read(path: str, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the TLS {what} {path}: {exc.strerror}") from None
    if b"-----BEGIN" not in data:
        raise ValueError(f"the TLS {what} {path} is not PEM")
    return data


@dataclass(frozen=True)
class TlsFiles:
    cert: str | None = None
    key: str | None = None
    ca: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("--tls-cert and --tls-key go together")
        for path, what in ((self.cert, "certificate"), (self.key, "key"), (self.ca, "CA")):
            if path is not None:
                _read(path, what)

    @property
    def enabled(self) -> bool:
        return self.cert is not None or self.ca is not None

    def server_credentials(self) -> grpc.ServerCredentials:
        if self.cert is None or self.key is None:
            raise ValueError("a TLS server needs --tls-cert and --tls-key")
        ca = _read(self.ca, "CA") if self.ca else None
        return grpc.ssl_server_credentials(
            [(_read(self.key, "key"), _read(self.cert, "certificate"))],
            root_certificates=ca,
            require_client_auth=ca is not None,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca, "CA") if self.ca else None,
            private_key=_read(self.key, "key") if self.key else None,
            certificate_chain=_read(self.cert, "certificate") if self.cert else None,
        )
