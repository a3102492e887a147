"""Self-signed TLS material for the local broker's SASL_SSL listener.

``ensure_tls(folder)`` writes a throwaway CA and a server certificate it signed
(SAN ``DNS:localhost`` and ``IP:127.0.0.1``), reusing the files on later calls.
The CA's private key is never written: once the server certificate exists nobody
needs to mint another, and a missing or expiring file simply regenerates the set.

Files (all PEM):

* ``ca.pem``: the CA certificate; clients trust it (``ssl.ca.location``).
* ``server.pem``: the server certificate followed by the CA certificate.
* ``server-key.pem``: the server's private key, unencrypted PKCS#8 (mode 0600).
* ``server-keystore.pem``: key + chain in one file, the layout Kafka reads with
  ``ssl.keystore.type=PEM`` (mode 0600).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
SERVER_DAYS = 825
RENEW_MARGIN = dt.timedelta(days=1)
DEFAULT_DNS_NAMES = ("localhost",)
DEFAULT_IPS = ("127.0.0.1",)


@dataclass(frozen=True)
class TlsFiles:
    """Paths of the PEM files ``ensure_tls`` maintains."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    keystore: Path

    @classmethod
    def in_dir(cls, folder: Path) -> TlsFiles:
        """Return the file layout inside ``folder`` (files may not exist yet)."""
        return cls(
            ca_cert=folder / "ca.pem",
            server_cert=folder / "server.pem",
            server_key=folder / "server-key.pem",
            keystore=folder / "server-keystore.pem",
        )

    def all_exist(self) -> bool:
        """Whether every file is present."""
        return all(
            p.is_file() for p in (self.ca_cert, self.server_cert, self.server_key, self.keystore)
        )


def ensure_tls(
    folder: Path,
    *,
    dns_names: Sequence[str] = DEFAULT_DNS_NAMES,
    ips: Sequence[str] = DEFAULT_IPS,
) -> TlsFiles:
    """Create the CA and server certificate in ``folder`` unless valid ones exist.

    Args:
        folder: Where the PEM files live; created if missing.
        dns_names: DNS subject alternative names of the server certificate.
        ips: IP subject alternative names of the server certificate.

    Returns:
        The paths of the PEM files.
    """
    files = TlsFiles.in_dir(folder)
    if files.all_exist() and _still_valid(files.server_cert):
        return files
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = _new_key()
    ca_cert = _ca_certificate(ca_key)
    server_key = _new_key()
    server_cert = _server_certificate(server_key, ca_key, ca_cert, dns_names, ips)

    key_pem = server_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    chain_pem = server_cert.public_bytes(serialization.Encoding.PEM) + ca_pem
    _write(files.server_key, key_pem, private=True)
    _write(files.keystore, key_pem + chain_pem, private=True)
    _write(files.server_cert, chain_pem, private=False)
    _write(files.ca_cert, ca_pem, private=False)
    return files


def _still_valid(cert_file: Path) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    except ValueError:
        return False
    return cert.not_valid_after_utc - RENEW_MARGIN > _now()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "iot-pulse local stack"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _ca_certificate(key: rsa.RSAPrivateKey) -> x509.Certificate:
    now = _now()
    name = _name("iot-pulse local CA")
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _server_certificate(
    key: rsa.RSAPrivateKey,
    ca_key: rsa.RSAPrivateKey,
    ca_cert: x509.Certificate,
    dns_names: Sequence[str],
    ips: Sequence[str],
) -> x509.Certificate:
    now = _now()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    common_name = dns_names[0] if dns_names else ips[0]
    return (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=SERVER_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )


def _write(path: Path, data: bytes, *, private: bool) -> None:
    """Write ``data`` atomically; private files are created with mode 0600."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    tmp.replace(path)
