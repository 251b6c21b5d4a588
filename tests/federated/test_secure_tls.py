"""Issue #33 items 1-2, bad input: certificates and SuperNode keys are checked before any process starts, with an
error naming the file; a non-loopback bind without TLS is refused (no process is started)."""

from __future__ import annotations

import datetime as dt
import shutil

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from privnlp.core.errors import InvalidArgument
from privnlp.mechanisms.federated import tls
from privnlp.mechanisms.federated.flower import start_superlink, start_supernode


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return tls.make_certs(tmp_path_factory.mktemp("certs"), ["10.0.0.5", "fl.example"])


def test_made_certificates_pass_and_name_the_hosts(certs):
    assert tls.check_server_tls(certs, "127.0.0.1") is certs
    tls.check_server_tls(certs, "10.0.0.5")
    tls.check_server_tls(certs, "fl.example")
    tls.check_server_tls(certs, "0.0.0.0")  # wildcard bind: the name is checked by the nodes
    with pytest.raises(InvalidArgument, match=r"not valid for host '10.0.0.6'"):
        tls.check_server_tls(certs, "10.0.0.6")
    assert (certs.keyfile.stat().st_mode & 0o077) == 0  # private keys are not world-readable


def test_missing_mismatched_foreign_and_expired(certs, tmp_path):
    with pytest.raises(InvalidArgument, match="server certificate: .*nope.pem does not exist"):
        tls.check_server_tls(tls.TlsFiles(certs.ca_certfile, tmp_path / "nope.pem", certs.keyfile))
    other = tls.make_certs(tmp_path / "other")
    # the key of another deployment
    with pytest.raises(InvalidArgument, match=r"private key: .*other/server.key does not match"):
        tls.check_server_tls(tls.TlsFiles(certs.ca_certfile, certs.certfile, other.keyfile))
    # a certificate of another CA
    with pytest.raises(InvalidArgument, match=r"other/server.pem is not signed by the CA"):
        tls.check_server_tls(tls.TlsFiles(certs.ca_certfile, other.certfile, other.keyfile))
    # expired: signed by the right CA, valid until yesterday
    ca_key = serialization.load_pem_private_key(
        (certs.ca_certfile.parent / tls.CA_KEY).read_bytes(), None
    )
    from cryptography import x509

    ca = x509.load_pem_x509_certificate(certs.ca_certfile.read_bytes())
    key = serialization.load_pem_private_key(certs.keyfile.read_bytes(), None)
    now = dt.datetime.now(dt.timezone.utc)
    old = (
        x509.CertificateBuilder()
        .subject_name(ca.subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=10))
        .not_valid_after(now - dt.timedelta(days=1))
        .sign(ca_key, tls.hashes.SHA256())
    )
    expired = tmp_path / "expired.pem"
    expired.write_bytes(old.public_bytes(serialization.Encoding.PEM))
    with pytest.raises(InvalidArgument, match=r"server certificate: .*expired.pem expired on"):
        tls.check_server_tls(tls.TlsFiles(certs.ca_certfile, expired, certs.keyfile))
    with pytest.raises(InvalidArgument, match="already holds a CA"):
        tls.make_certs(certs.ca_certfile.parent)


def test_key_list_and_node_keys(tmp_path):
    lst = tls.make_node_keys(tmp_path / "keys", 2)
    keys = tls.read_key_list(lst)
    assert len(keys) == 2 and all(k.startswith("ecdsa-sha2-nistp384 ") for k in keys)
    tls.check_node_key(tmp_path / "keys" / "node-1.key", keys)
    stranger = tls.make_node_keys(tmp_path / "stranger", 1)
    assert stranger.exists()
    with pytest.raises(
        InvalidArgument, match=r"node key: the public key of .*stranger/node-0.key is not in"
    ):
        tls.check_node_key(tmp_path / "stranger" / "node-0.key", keys)
    dup = tmp_path / "dup.txt"
    dup.write_text(lst.read_text() + keys[0] + "\n")
    with pytest.raises(InvalidArgument, match=r"dup.txt line 3 repeats a key"):
        tls.read_key_list(dup)
    rsa_pub = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    bad = tmp_path / "rsa.txt"
    bad.write_bytes(rsa_pub + b"\n")
    with pytest.raises(InvalidArgument, match=r"rsa.txt line 1: Flower needs an EC key"):
        tls.read_key_list(bad)
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("ssh-ed25519 not-base64\n")
    with pytest.raises(InvalidArgument, match=r"garbage.txt line 1 is not an OpenSSH public key"):
        tls.read_key_list(garbage)
    with pytest.raises(InvalidArgument, match="holds no public key"):
        (tmp_path / "empty.txt").write_text("# nothing\n")
        tls.read_key_list(tmp_path / "empty.txt")
    with pytest.raises(InvalidArgument, match=r"node key: .*missing.key does not exist"):
        tls.check_node_key(tmp_path / "missing.key")


def test_insecure_refused_off_loopback_before_any_process(tmp_path, certs, monkeypatch):
    import subprocess

    def no_popen(*a, **k):  # pragma: no cover - reaching it is the failure
        raise AssertionError("a process was started")

    monkeypatch.setattr(subprocess, "Popen", no_popen)
    env = {"PATH": ""}
    with pytest.raises(InvalidArgument, match=r"host: '0.0.0.0' is not a loopback address"):
        start_superlink(9999, env=env, host="0.0.0.0")
    with pytest.raises(InvalidArgument, match=r"superlink: '10.1.2.3' is not a loopback"):
        start_supernode("10.1.2.3:9093", 0, 1, 9998, env=env)
    with pytest.raises(InvalidArgument, match="needs TLS"):
        start_superlink(9999, env=env, node_auth=True)
    with pytest.raises(InvalidArgument, match="needs TLS"):
        start_supernode("127.0.0.1:9093", 0, 1, 9998, env=env, auth_key=tmp_path / "k")
    # a broken certificate set is refused before the SuperLink starts
    broken = tmp_path / "broken"
    shutil.copytree(certs.ca_certfile.parent, broken)
    (broken / tls.SERVER_KEY).unlink()
    with pytest.raises(InvalidArgument, match=r"private key: .*broken/server.key does not exist"):
        start_superlink(9999, env=env, host="127.0.0.1", tls=tls.TlsFiles.in_dir(broken))
    assert tls.is_loopback("127.0.0.1") and tls.is_loopback("localhost") and tls.is_loopback("::1")
    assert not tls.is_loopback("0.0.0.0") and not tls.is_loopback("192.168.1.1")


def test_cli_refuses_bad_deployments_before_starting_anything(tmp_path, monkeypatch):
    import subprocess

    from typer.testing import CliRunner

    from privnlp.cli.fl import app

    def no_popen(*a, **k):  # pragma: no cover - reaching it is the failure
        raise AssertionError("a process was started")

    monkeypatch.setattr(subprocess, "Popen", no_popen)
    r = CliRunner()
    res = r.invoke(app, ["certs", str(tmp_path / "c"), "--host", "10.0.0.5"])
    assert res.exit_code == 0, res.output
    res = r.invoke(app, ["keys", str(tmp_path / "k"), "--nodes", "2"])
    assert res.exit_code == 0, res.output
    w = ["--work-dir", str(tmp_path / "w")]
    cases = [
        (["--host", "0.0.0.0"], "is not loopback: pass TLS certificates"),
        (["--host", "10.0.0.5", "--insecure"], "is not loopback"),
        (["--certs", str(tmp_path / "c"), "--host", "10.0.0.6"], "not valid for host '10.0.0.6'"),
        (["--certs", str(tmp_path / "nope")], "nope/ca.crt does not exist"),
        (["--certs", str(tmp_path / "c"), "--insecure"], "--insecure contradicts"),
        (
            ["--auth-keys", str(tmp_path / "k" / "supernode_public_keys.txt")],
            "--auth-keys needs TLS",
        ),
        (
            ["--certs", str(tmp_path / "c"), "--auth-keys", str(tmp_path / "missing.txt")],
            "missing.txt does not exist",
        ),
        (
            [
                "--certs",
                str(tmp_path / "c"),
                "--auth-keys",
                str(tmp_path / "k" / "supernode_public_keys.txt"),
            ],
            "exceeds the 2 authenticated SuperNodes",
        ),
        (["--aggregation", "secagg", "--secagg-min-survivors", "4"], "secagg-min-survivors"),
        (
            ["--aggregation", "secagg", "--secagg-bits", "9", "--secagg-levels", "4096"],
            "secagg-bits=9",
        ),
    ]
    for args, msg in cases:
        res = r.invoke(app, ["server", *w, *args])
        assert res.exit_code == 2, (args, res.output)
        assert msg in res.output, (args, res.output)
    res = r.invoke(app, ["client", "--superlink", "10.0.0.5:9093"])
    assert res.exit_code == 2 and "--root-certificates" in res.output


def test_central_claim_records_the_transport_and_voids_the_eavesdropper_in_clear():
    """Central DP-FedAvg: labelled as trusting the server; off loopback in plain text the eavesdropper reads every
    clipped update, so its epsilon (and the headline) is inf; TLS or loopback keep the accounted bound."""
    import math

    from privnlp.core.claims import PrivacyClaim
    from privnlp.mechanisms.federated import flower
    from privnlp.mechanisms.federated.accounting import dp_fedavg_adversary_bounds

    advs = dp_fedavg_adversary_bounds(
        noise_multiplier=1.0,
        clients_per_round=10,
        population=100,
        rounds=5,
        delta=1e-5,
        sampling="fixed",
    )
    base = PrivacyClaim.dp(max(a.epsilon for a in advs), 1e-5, "user", adversaries=advs)
    cfg = dict(flower.DEFAULT_RUN_CONFIG)
    loop = flower._central_claim(base, cfg)
    assert loop.epsilon == base.epsilon and "trusting it" in " ".join(loop.notes)
    assert "INSECURE transport (loopback only)" in " ".join(loop.notes)
    tls_cfg = {**cfg, "transport-tls": True, "transport-host": "0.0.0.0"}
    assert flower._central_claim(base, tls_cfg).epsilon == base.epsilon
    clear = flower._central_claim(base, {**cfg, "transport-host": "0.0.0.0"})
    assert math.isinf(clear.epsilon) and math.isinf(clear.epsilon_against("eavesdropper"))
    assert clear.epsilon_against("honest-but-curious server") == base.epsilon_against(
        "honest-but-curious server"
    )
    assert clear.extra["transport"]["tls"] is False


def test_party_certificates_for_mpc(tmp_path):
    """`privnlp fl certs DIR --parties N` also writes MPC party certificates: each checks against its CA; a party
    of another CA, or a party presenting another party's key, is refused."""
    a = tls.make_certs(tmp_path / "a", parties=2)
    b = tls.make_certs(tmp_path / "b", parties=1)
    d = a.ca_certfile.parent
    tls.check_party_certificate(d / "party-0.pem", d / "party-0.key", a.ca_certfile)
    tls.check_party_certificate(d / "party-1.pem", d / "party-1.key", a.ca_certfile)
    other = b.ca_certfile.parent
    with pytest.raises(InvalidArgument, match="is not signed by the CA"):
        tls.check_party_certificate(other / "party-0.pem", other / "party-0.key", a.ca_certfile)
    with pytest.raises(InvalidArgument, match="does not match the certificate"):
        tls.check_party_certificate(d / "party-0.pem", d / "party-1.key", a.ca_certfile)
