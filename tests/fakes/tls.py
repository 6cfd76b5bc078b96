"""A throwaway CA and a certificate it signs for 127.0.0.1/localhost, for TLS tests on loopback."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tenor.auth.tls import TlsFiles


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(subject: str | None, key, issuer: str, signer, *, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)] if subject else [])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=not subject,
        )
    return builder.sign(signer, hashes.SHA256())


def make_tls(directory: Path, name: str = "tenor", *, common_name: bool = True) -> TlsFiles:
    """ca.pem, cert.pem and key.pem under `directory`: one certificate serves as server and client.
    common_name=False: a subject with no CN (etcd's gateway refuses client certificates with one
    once auth is on, since it would not use the CN as the user)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _cert(f"{name} test CA", ca_key, f"{name} test CA", ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _cert(f"{name} server" if common_name else None, key, f"{name} test CA", ca_key, ca=False)
    (directory / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(_key_pem(key))
    return TlsFiles(str(directory / "cert.pem"), str(directory / "key.pem"), str(directory / "ca.pem"))


def tls_flags(tls: TlsFiles) -> list[str]:
    return ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--tls-ca", str(tls.ca)]
