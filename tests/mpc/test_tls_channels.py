"""Issue #33 item 5: the pi_TEXT parties over mutually authenticated TLS channels (``channels.py``).

Loopback only, free ports from the OS, files under tmp_path (xdist-safe). The mesh-level tests play the
adversary with real sockets in threads (no CrypTen); the protocol-level ones run the three parties as
forked processes."""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import os
import select
import socket
import ssl
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from typer.testing import CliRunner

from privnlp.core.errors import InvalidArgument, ProtocolError
from privnlp.mechanisms.federated.tls import make_certs

channels = pytest.importorskip("privnlp.mechanisms.mpc.channels")
PartyTLS, TLSSettings, connect_mesh = channels.PartyTLS, channels.TLSSettings, channels.connect_mesh

LOGIT_TOL = 5e-3


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The deployment's CA with party certificates 0-2, and a second (foreign) CA with its own."""
    good = tmp_path_factory.mktemp("pki-good")
    other = tmp_path_factory.mktemp("pki-other")
    make_certs(good, parties=3)
    make_certs(other, parties=3)
    return good, other


def _files(d: Path, rank: int, ca_from: Path | None = None) -> PartyTLS:
    f = PartyTLS.in_dir(d, rank)
    return PartyTLS(f.ca_certfile if ca_from is None else ca_from / "ca.crt", f.certfile, f.keyfile)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_threads(jobs: dict) -> dict:
    """Run each ``name: fn`` in a thread; returns ``name: result or exception``."""
    out: dict = {}

    def wrap(name, fn):
        try:
            out[name] = fn()
        except BaseException as e:  # noqa: BLE001 - inspected by the test
            out[name] = e

    ts = [threading.Thread(target=wrap, args=(n, f), daemon=True) for n, f in jobs.items()]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not any(t.is_alive() for t in ts), "a party hung past its deadline"
    return out


def _mesh(rank, port, tls, ranks, timeout=2.0):
    return lambda: connect_mesh(TLSSettings(rank, "127.0.0.1", port, tls, timeout), ranks)


# -- the mesh: who gets in ------------------------------------------------------------------------


def test_mesh_of_three_is_mutually_authenticated_tls13(pki):
    good, _ = pki
    port = _port()
    res = _run_threads({r: _mesh(r, port, _files(good, r), [0, 1, 2], 20) for r in range(3)})
    try:
        for r in range(3):
            m = res[r]
            assert isinstance(m, channels.Mesh), m
            assert sorted(m.socks) == sorted({0, 1, 2} - {r})
            for peer, s in m.socks.items():
                assert isinstance(s, ssl.SSLSocket) and s.version() == "TLSv1.3"
                cn = dict(x[0] for x in s.getpeercert()["subject"])["commonName"]
                assert cn == channels.party_common_name(peer)  # verified peer, the expected rank
    finally:
        for m in res.values():
            if isinstance(m, channels.Mesh):
                m.close()


def test_party_with_certificate_of_another_ca_is_refused(pki):
    """The impostor knows the deployment's (public) CA certificate, but its own certificate was signed
    by another CA: Alice refuses it during the handshake; the mesh never forms, nothing is sent."""
    good, other = pki
    port = _port()
    res = _run_threads(
        {
            "alice": _mesh(0, port, _files(good, 0), [0, 1]),
            "impostor": _mesh(1, port, _files(other, 1, ca_from=good), [0, 1]),
        }
    )
    assert isinstance(res["alice"], ProtocolError), res["alice"]
    assert "bob (rank 1) did not join" in str(res["alice"])
    assert "failed the TLS handshake" in str(res["alice"])
    assert isinstance(res["impostor"], ProtocolError), res["impostor"]
    assert "refused" in str(res["impostor"]) or "failed" in str(res["impostor"])


def test_party_trusting_another_ca_refuses_alice(pki):
    """Seen from a party: a rendezvous whose certificate is not signed by its CA is refused."""
    good, other = pki
    port = _port()
    res = _run_threads(
        {
            "alice": _mesh(0, port, _files(good, 0), [0, 1]),
            "bob": _mesh(1, port, _files(other, 1), [0, 1]),
        }
    )
    assert isinstance(res["bob"], ProtocolError)
    assert "not signed by the deployment's CA" in str(res["bob"])
    assert isinstance(res["alice"], ProtocolError)


def test_valid_certificate_of_another_rank_is_refused_and_the_real_party_still_joins(pki):
    """An insider with the TTP's valid certificate tries to take Bob's place (it claims rank 1): Alice
    refuses it, and the real Bob, arriving later, still gets in."""
    good, _ = pki
    port = _port()
    started = threading.Event()

    def impostor():
        try:
            return connect_mesh(TLSSettings(1, "127.0.0.1", port, _files(good, 2), 2.0), [0, 1])
        finally:
            started.set()

    def real_bob():
        started.wait(10)
        return connect_mesh(TLSSettings(1, "127.0.0.1", port, _files(good, 1), 10.0), [0, 1])

    res = _run_threads(
        {
            "alice": _mesh(0, port, _files(good, 0), [0, 1], 12),
            "impostor": impostor,
            "bob": real_bob,
        }
    )
    assert isinstance(res["impostor"], ProtocolError), res["impostor"]
    assert isinstance(res["alice"], channels.Mesh) and isinstance(res["bob"], channels.Mesh)
    res["alice"].close(), res["bob"].close()

    # the same claim in a three-party mesh: rank 2's certificate used to say "I am rank 1"
    port = _port()
    res = _run_threads(
        {
            "alice": _mesh(0, port, _files(good, 0), [0, 1, 2]),
            "impostor": _mesh(1, port, _files(good, 2), [0, 1, 2]),
        }
    )
    assert isinstance(res["alice"], ProtocolError)
    assert "claims rank 1 with the certificate of ttp (rank 2)" in str(res["alice"])


def test_listener_with_another_ranks_certificate_is_refused(pki):
    """Someone with Bob's valid certificate listens on the rendezvous pretending to be Alice: the TTP
    checks the rank in the certificate and refuses."""
    good, _ = pki
    port = _port()
    res = _run_threads(
        {
            "fake_alice": _mesh(0, port, _files(good, 1), [0, 2]),
            "ttp": _mesh(2, port, _files(good, 2), [0, 2]),
        }
    )
    assert isinstance(res["ttp"], ProtocolError)
    assert "expected 'privnlp mpc party 0'" in str(res["ttp"])


# -- certificate files: clear errors before anything is sent ----------------------------------------


def _expired_cert(d: Path, rank: int, out: Path) -> Path:
    ca_key = serialization.load_pem_private_key((d / "ca.key").read_bytes(), None)
    ca = x509.load_pem_x509_certificate((d / "ca.crt").read_bytes())
    key = serialization.load_pem_private_key((d / f"party-{rank}.key").read_bytes(), None)
    now = dt.datetime.now(dt.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"privnlp mpc party {rank}")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=10))
        .not_valid_after(now - dt.timedelta(days=1))
        .sign(ca_key, hashes.SHA256())
    )
    out.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return out


def test_party_tls_check_names_the_file(pki, tmp_path):
    good, other = pki
    PartyTLS.in_dir(good, 1).check(1)  # the good case passes
    cases = [
        (PartyTLS.in_dir(tmp_path, 1), "does not exist"),
        (
            PartyTLS(
                good / "ca.crt", _expired_cert(good, 1, tmp_path / "old.pem"), good / "party-1.key"
            ),
            "expired",
        ),
        (PartyTLS(good / "ca.crt", good / "party-1.pem", good / "party-0.key"), "does not match"),
        (
            PartyTLS(good / "ca.crt", good / "party-0.pem", good / "party-0.key"),
            "not the certificate of bob",
        ),
        (
            PartyTLS(good / "ca.crt", other / "party-1.pem", other / "party-1.key"),
            "is not signed by the CA",
        ),
    ]
    for files, msg in cases:
        with pytest.raises(InvalidArgument, match=msg):
            files.check(1)
    k = ec.generate_private_key(ec.SECP256R1())  # a stray key: not a certificate
    bad = tmp_path / "notcert.pem"
    bad.write_bytes(
        k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(InvalidArgument, match="notcert.pem"):
        PartyTLS(good / "ca.crt", bad, good / "party-1.key").check(1)


@pytest.fixture
def no_party(monkeypatch):
    import privnlp.mechanisms.mpc.protocol as P

    def boom(*a, **k):  # pragma: no cover - reaching it is the failure
        raise AssertionError("a party started")

    monkeypatch.setattr(P, "init_party", boom)
    monkeypatch.setattr(P, "run_ttp", boom)


def test_cli_refuses_bad_tls_material_before_starting(pki, tmp_path, no_party):
    from privnlp.cli.mpc import app

    good, other = pki
    rdv = ["--rendezvous", f"tcp://10.1.2.3:{_port()}"]
    run = CliRunner().invoke
    cases = [
        (["--role", "bob", "--tls-dir", str(tmp_path)], "does not exist"),
        (
            ["--role", "alice", "--tls-dir", str(good), "--cert", str(good / "party-1.pem")],
            "does not match",
        ),
        (
            [
                "--role",
                "bob",
                "--tls-dir",
                str(good),
                "--cert",
                str(good / "party-0.pem"),
                "--key",
                str(good / "party-0.key"),
            ],
            "not the certificate of bob",
        ),
        (
            ["--role", "ttp", "--tls-dir", str(good), "--ca-cert", str(other / "ca.crt")],
            "is not signed by the CA",
        ),
        (
            [
                "--role",
                "bob",
                "--tls-dir",
                str(good),
                "--cert",
                str(_expired_cert(good, 1, tmp_path / "e.pem")),
            ],
            "expired",
        ),
        (["--role", "bob", "--cert", str(good / "party-1.pem")], "--tls-dir DIR, or all three"),
        (
            ["--role", "bob", "--tls-dir", str(good), "--bind", "0.0.0.0:1"],
            "--bind is for --role alice",
        ),
    ]
    for args, msg in cases:
        res = run(app, ["serve", *args, *rdv])
        assert res.exit_code == 2, (args, res.output)
        assert msg in res.output, (args, res.output)


def test_cli_non_loopback_without_tls_names_the_flags(no_party):
    from privnlp.cli.mpc import app

    res = CliRunner().invoke(
        app, ["serve", "--role", "bob", "--rendezvous", "tcp://10.1.2.3:29500"]
    )
    assert res.exit_code == 2
    assert "--tls-dir" in res.output and "--encrypted-network" in res.output


# -- the protocol over TLS --------------------------------------------------------------------------


def test_inference_over_tls_equals_gloo_and_plaintext(alice):
    from privnlp.mechanisms.mpc import CryptenTextCNN

    model, x = alice[0].model, alice[1][:16]
    ref = model(torch.tensor(x)).detach().numpy()
    tls = CryptenTextCNN(provider="TTP", transport="tls", timeout=120).classify(
        model, x, reveal="logits"
    )
    gloo = CryptenTextCNN(provider="TTP", transport="gloo", timeout=120).classify(
        model, x, reveal="logits"
    )
    assert tls.transport == "tls" and gloo.transport == "gloo"
    assert np.array_equal(tls.labels, gloo.labels)
    assert np.array_equal(tls.labels, (ref > 0).astype(np.int64))
    assert np.abs(tls.logits - ref).max() < LOGIT_TOL
    # the same protocol: the same number of rounds and bytes on either transport
    assert tls.comm == {
        k: {**v, "comm_time": tls.comm[k]["comm_time"]} for k, v in gloo.comm.items()
    }
    claim = CryptenTextCNN(transport="tls").claim()
    assert claim.extra["transport"] == "tls" and "mutually authenticated" in claim.statement()
    assert "no TLS" in CryptenTextCNN().claim().statement()

    # sequential mode with the trusted first party (no TTP: a two-party mesh)
    seq = CryptenTextCNN(provider="TFP", mode="sequential", transport="tls", timeout=120)
    r2 = seq.classify(model, x[:2])
    assert np.array_equal(r2.labels, (ref[:2] > 0).astype(np.int64))


def test_protocol_with_an_impostor_fails_closed(alice, pki):
    """Bob's process holds a certificate of another CA: the run fails with a clear error, within the
    timeout, and no label comes out."""
    from privnlp.mechanisms.mpc.crypten_model import plaintext_state
    from privnlp.mechanisms.mpc.protocol import run_embedded

    good, other = pki
    model = alice[0].model
    with pytest.raises(ProtocolError, match="refused|did not join|failed"):
        run_embedded(
            config=model.public_config(),
            state={k: v.numpy() for k, v in plaintext_state(model).items()},
            embeddings=alice[1][:2],
            provider="TTP",
            timeout=4,
            tls={0: _files(good, 0), 1: _files(other, 1, ca_from=good), 2: _files(good, 2)},
        )


def _proxy(listen: socket.socket, target: int, log_dir: str) -> None:
    """Forward every connection to 127.0.0.1:target, appending the raw bytes of each direction to a
    file (a wire tap). Runs until killed."""
    pairs: dict = {}
    logs: dict = {}
    n = 0
    while True:
        r, _, _ = select.select([listen, *pairs], [], [], 1.0)
        for s in r:
            if s is listen:
                c, _ = listen.accept()
                u = socket.create_connection(("127.0.0.1", target))
                pairs[c], pairs[u] = u, c
                logs[c] = open(os.path.join(log_dir, f"{n}-up.bin"), "ab")
                logs[u] = open(os.path.join(log_dir, f"{n}-down.bin"), "ab")
                n += 1
                continue
            try:
                data = s.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                other = pairs.pop(s)
                pairs.pop(other, None)
                for x in (s, other):
                    logs.pop(x).close() if x in logs else None
                    x.close()
                continue
            logs[s].write(data)
            logs[s].flush()
            pairs[s].sendall(data)


def test_eavesdropper_sees_no_share_on_the_wire(alice, pki, tmp_path):
    """A wire tap between Bob / the TTP and Alice. The leaky twin makes Bob send his fixed-point input
    *in the clear inside the protocol* (Alice's view holds it): with TLS the tap still never sees those
    bytes, only TLS records."""
    from privnlp.mechanisms.mpc.crypten_model import plaintext_state
    from privnlp.mechanisms.mpc.protocol import run_embedded

    good, _ = pki
    model, x = alice[0].model, alice[1][:4]
    alice_port = _port()
    listen = socket.create_server(("127.0.0.1", 0))
    tap_port = listen.getsockname()[1]
    tap = mp.get_context("fork").Process(
        target=_proxy, args=(listen, alice_port, str(tmp_path)), daemon=True
    )
    tap.start()
    listen.close()
    try:
        out = run_embedded(
            config=model.public_config(),
            state={k: v.numpy() for k, v in plaintext_state(model).items()},
            embeddings=x,
            provider="TTP",
            record=True,
            leak="unmasked_shares",
            timeout=120,
            rendezvous=f"tcp://127.0.0.1:{tap_port}",
            bind=("127.0.0.1", alice_port),
            tls={r: _files(good, r) for r in range(3)},
        )
    finally:
        tap.kill()
        tap.join(5)
    assert out["bob"].transport == "tls"
    seen = out["alice"].received["share/bob_input/0000"]
    assert np.allclose(seen[:8], np.round(x.flatten()[:8] * 2**16), atol=1)  # Bob's plaintext input
    needle = seen[:8].astype("<i8").tobytes()
    wire = {p.name: p.read_bytes() for p in tmp_path.glob("*.bin")}
    assert len(wire) >= 4  # Bob <-> Alice and TTP <-> Alice, both directions
    total = sum(len(b) for b in wire.values())
    assert total > x.size * 8  # the shares did cross the tap
    for name, b in wire.items():
        assert b[:1] == b"\x16" and b[1:2] == b"\x03", name  # starts with a TLS handshake record
        assert needle not in b, name


def test_cli_predict_names_a_bad_transport(tmp_path):
    from privnlp.cli.mpc import app

    res = CliRunner().invoke(
        app, ["predict", "--model", "m.pt", "--texts", "t.txt", "--transport", "ssh"]
    )
    assert res.exit_code == 2 and "transport must be one of" in res.output
