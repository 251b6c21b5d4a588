"""Transport security of a Flower deployment (issue #33 items 1-2): TLS certificates and SuperNode keys.

Threat model: a network eavesdropper (reads every byte on the wire) and an outsider who reaches the SuperLink's
port (registers as a SuperNode, gets selected, receives the model, submits updates the ledger would count as a
user's). TLS (server certificate signed by a CA the nodes trust) defeats the first; Flower's SuperNode
authentication (``--enable-supernode-auth``: only SuperNodes whose public key was registered with
``flwr supernode register`` may activate; every request is signed with the node's key) defeats the second.
Neither is a DP mechanism: the claim records which protections were on (``transport``).

:func:`make_certs` writes a CA and a server certificate for a test deployment (``privnlp fl certs DIR``);
:func:`make_node_keys` writes SuperNode key pairs and the public-key list (``privnlp fl keys DIR``);
:func:`check_server_tls` / :func:`check_root_certificate` / :func:`read_key_list` / :func:`check_node_key`
validate user-supplied files before anything starts (missing, mismatched, expired, not signed by the CA,
wrong key type) with an error naming the file. The ``cryptography`` package (a Flower dependency) does the
X.509 and SSH-key work; nothing here is hand-written cryptography.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from privnlp.core.errors import InvalidArgument

__all__ = [
    "CA_CERT",
    "CA_KEY",
    "SERVER_CERT",
    "SERVER_KEY",
    "KEY_LIST",
    "TlsFiles",
    "Transport",
    "is_loopback",
    "make_certs",
    "make_node_keys",
    "check_server_tls",
    "check_root_certificate",
    "check_party_certificate",
    "read_key_list",
    "check_node_key",
]

CA_CERT, CA_KEY = "ca.crt", "ca.key"
SERVER_CERT, SERVER_KEY = "server.pem", "server.key"
KEY_LIST = "supernode_public_keys.txt"
_NIST = (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)


def is_loopback(host: str) -> bool:
    """``host`` (a name or an address, without port) only reaches this machine."""
    h = host.strip().strip("[]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class TlsFiles:
    """Server side: ``certfile`` / ``keyfile`` (the SuperLink's certificate and key) and ``ca_certfile`` (the CA
    that signed it; the nodes' ``--root-certificates``)."""

    ca_certfile: Path
    certfile: Path
    keyfile: Path

    @classmethod
    def in_dir(cls, d: str | os.PathLike) -> TlsFiles:
        """The files :func:`make_certs` wrote to ``d``."""
        d = Path(d)
        return cls(d / CA_CERT, d / SERVER_CERT, d / SERVER_KEY)


@dataclass(frozen=True)
class Transport:
    """What protects a deployment's wire: ``tls`` (server authenticated, traffic encrypted), ``node_auth``
    (only registered SuperNodes), ``authenticated_nodes`` (size of the key list; 0 without node_auth) and
    ``host`` (the bind address). Recorded in the result and the claim."""

    tls: bool
    node_auth: bool
    authenticated_nodes: int
    host: str

    def describe(self) -> str:
        if not self.tls:
            where = "loopback only" if is_loopback(self.host) else f"bound to {self.host}"
            return (
                f"INSECURE transport ({where}): no TLS, any process that reaches the port can join; an "
                "eavesdropper reads every update, so the user-level claim does not hold against it"
            )
        auth = (
            f"SuperNode authentication ({self.authenticated_nodes} registered public keys)"
            if self.node_auth
            else "no SuperNode authentication (any process that reaches the port can join)"
        )
        return f"TLS (server certificate checked against the CA), {auth}"

    def to_dict(self) -> dict:
        return {
            "tls": self.tls,
            "node_auth": self.node_auth,
            "authenticated_nodes": self.authenticated_nodes,
            "host": self.host,
            "statement": self.describe(),
        }


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _san(hosts: list[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for h in dict.fromkeys(["localhost", "127.0.0.1", *hosts]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    return x509.SubjectAlternativeName(names)


def _sign(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    days: float,
    ca: bool,
    hosts: list[str] = (),
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    start = _now() - _dt.timedelta(minutes=5)
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + _dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
    else:
        b = b.add_extension(_san(list(hosts)), critical=False).add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    return b.sign(issuer_key, hashes.SHA256())


def make_certs(
    out_dir: str | os.PathLike,
    hosts: list[str] | tuple[str, ...] = (),
    *,
    days: float = 30.0,
    parties: int = 0,
) -> TlsFiles:
    """A CA (``ca.crt`` / ``ca.key``) and a server certificate (``server.pem`` / ``server.key``) valid for
    ``localhost``, ``127.0.0.1`` and every name or address in ``hosts``; with ``parties`` > 0 also
    ``party-<i>.pem`` / ``party-<i>.key`` for the MPC parties. For a test deployment: keep ``ca.key`` off the
    machines (only ``ca.crt`` travels to the nodes). Refuses to overwrite an existing CA."""
    if days <= 0:
        raise InvalidArgument(f"days must be > 0; got {days}")
    if parties < 0:
        raise InvalidArgument(f"parties must be >= 0; got {parties}")
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    if (d / CA_KEY).exists() or (d / CA_CERT).exists():
        raise InvalidArgument(f"{d}: already holds a CA ({CA_CERT}); use another directory")
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca = _sign("privnlp test CA", ca_key, None, ca_key, days=days, ca=True)
    _write_key(d / CA_KEY, ca_key)
    (d / CA_CERT).write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for stem, cn in [("server", "privnlp SuperLink")] + [
        (f"party-{i}", f"privnlp mpc party {i}") for i in range(parties)
    ]:
        k = ec.generate_private_key(ec.SECP384R1())
        cert = _sign(cn, k, ca.subject, ca_key, days=days, ca=False, hosts=list(hosts))
        _write_key(d / f"{stem}.key", k)
        (d / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return TlsFiles.in_dir(d)


def make_node_keys(out_dir: str | os.PathLike, n: int) -> Path:
    """``n`` SuperNode key pairs (``node-<i>.key`` OpenSSH EC private key, ``node-<i>.pub``) and the
    public-key list ``supernode_public_keys.txt`` (one OpenSSH public key a line) the server registers.
    Returns the list's path. Refuses to overwrite existing keys."""
    if n < 1:
        raise InvalidArgument(f"n must be >= 1; got {n}")
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    if (d / KEY_LIST).exists():
        raise InvalidArgument(f"{d}: already holds {KEY_LIST}; use another directory")
    lines = []
    for i in range(n):
        k = ec.generate_private_key(ec.SECP384R1())
        priv = d / f"node-{i}.key"
        priv.write_bytes(
            k.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.OpenSSH,
                serialization.NoEncryption(),
            )
        )
        priv.chmod(0o600)
        pub = k.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        (d / f"node-{i}.pub").write_bytes(pub + b"\n")
        lines.append(pub.decode() + f" node-{i}")
    (d / KEY_LIST).write_text("\n".join(lines) + "\n")
    return d / KEY_LIST


def _load_cert(path: Path, what: str) -> x509.Certificate:
    if not path.is_file():
        raise InvalidArgument(f"{what}: {path} does not exist")
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except ValueError as e:
        raise InvalidArgument(f"{what}: {path} is not a PEM certificate ({e})") from e


def _check_validity(cert: x509.Certificate, path: Path, what: str) -> None:
    now = _now()
    if cert.not_valid_after_utc <= now:
        raise InvalidArgument(
            f"{what}: {path} expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
        )
    if cert.not_valid_before_utc > now:
        raise InvalidArgument(
            f"{what}: {path} is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
        )


def _check_signed_by(
    cert: x509.Certificate, ca: x509.Certificate, path: Path, ca_path: Path
) -> None:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature) as e:
        raise InvalidArgument(
            f"{path} is not signed by the CA {ca_path} ({type(e).__name__}: {e or 'bad signature'})"
        ) from e


def check_root_certificate(path: str | os.PathLike) -> Path:
    """A node's ``--root-certificates``: exists, is a PEM certificate, not expired."""
    p = Path(path)
    _check_validity(_load_cert(p, "root certificate"), p, "root certificate")
    return p


def check_server_tls(files: TlsFiles, host: str | None = None) -> TlsFiles:
    """The SuperLink's files: all present, none expired, the key matches the certificate, the certificate is
    signed by the CA and (if ``host`` is a name or address other than 0.0.0.0) names ``host``."""
    ca = _load_cert(files.ca_certfile, "CA certificate")
    _check_validity(ca, files.ca_certfile, "CA certificate")
    cert = _load_cert(files.certfile, "server certificate")
    _check_validity(cert, files.certfile, "server certificate")
    _check_signed_by(cert, ca, files.certfile, files.ca_certfile)
    _check_key_matches(files.keyfile, cert, files.certfile)
    if host and host not in ("0.0.0.0", "::"):
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            san = x509.SubjectAlternativeName([])
        names = set(san.get_values_for_type(x509.DNSName)) | {
            str(a) for a in san.get_values_for_type(x509.IPAddress)
        }
        if host.strip("[]") not in names:
            raise InvalidArgument(
                f"server certificate: {files.certfile} is not valid for host {host!r} (it names "
                f"{sorted(names)}); make one with `privnlp fl certs DIR --host {host}`"
            )
    return files


def _check_key_matches(keyfile: Path, cert: x509.Certificate, certfile: Path) -> None:
    if not keyfile.is_file():
        raise InvalidArgument(f"private key: {keyfile} does not exist")
    try:
        key = serialization.load_pem_private_key(keyfile.read_bytes(), password=None)
    except (ValueError, TypeError) as e:
        raise InvalidArgument(f"private key: {keyfile} is not an unencrypted PEM key ({e})") from e
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    enc = serialization.Encoding.DER
    if key.public_key().public_bytes(enc, pub) != cert.public_key().public_bytes(enc, pub):
        raise InvalidArgument(f"private key: {keyfile} does not match the certificate {certfile}")


def check_party_certificate(
    certfile: str | os.PathLike, keyfile: str | os.PathLike, ca_certfile: str | os.PathLike
) -> None:
    """An MPC party's certificate: present, not expired, signed by the CA, matching its key."""
    ca_p, cert_p = Path(ca_certfile), Path(certfile)
    ca = _load_cert(ca_p, "CA certificate")
    _check_validity(ca, ca_p, "CA certificate")
    cert = _load_cert(cert_p, "party certificate")
    _check_validity(cert, cert_p, "party certificate")
    _check_signed_by(cert, ca, cert_p, ca_p)
    _check_key_matches(Path(keyfile), cert, cert_p)


def read_key_list(path: str | os.PathLike) -> list[str]:
    """The SuperNode public-key list: one OpenSSH EC public key (NIST curve) a line; blank lines and ``#``
    comments skipped; duplicates refused. Returns the keys (``type base64`` without the comment)."""
    p = Path(path)
    if not p.is_file():
        raise InvalidArgument(f"auth key list: {p} does not exist")
    keys: list[str] = []
    for i, line in enumerate(p.read_text().splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        parts = s.split()
        try:
            k = serialization.load_ssh_public_key(" ".join(parts[:2]).encode())
        except (ValueError, IndexError, TypeError) as e:
            raise InvalidArgument(
                f"auth key list: {p} line {i} is not an OpenSSH public key"
            ) from e
        if not isinstance(k, ec.EllipticCurvePublicKey) or not isinstance(k.curve, _NIST):
            raise InvalidArgument(
                f"auth key list: {p} line {i}: Flower needs an EC key on a NIST curve "
                "(make them with `privnlp fl keys DIR`)"
            )
        key = " ".join(parts[:2])
        if key in keys:
            raise InvalidArgument(f"auth key list: {p} line {i} repeats a key (a node counts once)")
        keys.append(key)
    if not keys:
        raise InvalidArgument(f"auth key list: {p} holds no public key")
    return keys


def check_node_key(path: str | os.PathLike, key_list: list[str] | None = None) -> Path:
    """A SuperNode's private key: an OpenSSH EC key; with ``key_list``, its public key must be in it."""
    p = Path(path)
    if not p.is_file():
        raise InvalidArgument(f"node key: {p} does not exist")
    try:
        k = serialization.load_ssh_private_key(p.read_bytes(), password=None)
    except (ValueError, TypeError) as e:
        raise InvalidArgument(
            f"node key: {p} is not an unencrypted OpenSSH private key ({e})"
        ) from e
    if not isinstance(k, ec.EllipticCurvePrivateKey):
        raise InvalidArgument(f"node key: {p} is not an EC key (Flower needs EC on a NIST curve)")
    if key_list is not None:
        pub = (
            k.public_key()
            .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
            .decode()
        )
        if pub not in key_list:
            raise InvalidArgument(f"node key: the public key of {p} is not in the auth key list")
    return p
