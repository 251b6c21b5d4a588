"""`privnlp mpc ...`: private text classification with CrypTen (pi_TEXT).

Paper: ../shared/papers/mpc-cnn-private-text-classification.txt. Heavy imports (torch, CrypTen)
happen inside the commands (``privnlp --help`` imports this module).

Real deployment (three processes; certificates from ``privnlp fl certs DIR --parties 3 --host HOST``)::

    privnlp mpc serve --role ttp   --rendezvous tcp://HOST:29500 --tls-dir DIR
    privnlp mpc serve --role alice --rendezvous tcp://HOST:29500 --tls-dir DIR --model alice.pt
    privnlp mpc serve --role bob   --rendezvous tcp://HOST:29500 --tls-dir DIR --texts mine.txt --out labels.json

With TLS material the parties talk over a mutually authenticated TLS 1.3 mesh (``channels.py``);
without it over torch.distributed (gloo, plain TCP): on loopback only (an insecure demo), or off
loopback with ``--encrypted-network`` (issue #33 item 5). Rendezvous / rank can also come from the
environment (``RENDEZVOUS``, ``WORLD_SIZE``=2, ``RANK``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
from pathlib import Path

import numpy as np
import typer

from privnlp.core.errors import PrivnlpError
from privnlp.core.report import atomic_write_text
from privnlp.data import load_texts

app = typer.Typer(help="Private text classification with CrypTen (MPC).", no_args_is_help=True)


def _is_loopback(host: str) -> bool:
    h = host.strip("[]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _fail(msg: str, code: int = 2) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def _transport_statement(tls: bool, host: str, encrypted_network: bool) -> dict:
    if tls:
        statement = (
            "TLS 1.3 between every pair of parties, mutually authenticated: each party's certificate is "
            "signed by the deployment's CA and names its rank"
        )
    elif _is_loopback(host):
        statement = (
            "INSECURE demo transport: torch.distributed (gloo) on plain TCP over loopback; no TLS, no "
            "authentication (only processes on this machine can reach it)"
        )
    else:
        statement = (
            "torch.distributed (gloo) on plain TCP, relying on the network's encryption and "
            "authentication (--encrypted-network); privnlp itself neither encrypts nor authenticates"
        )
    return {
        "channels": "tls" if tls else "gloo",
        "encrypted": bool(tls or encrypted_network),
        "authenticated": bool(tls),
        "host": host,
        "statement": statement,
    }


@app.command()
def serve(
    role: str = typer.Option(
        ..., "--role", help="alice (model owner), bob (text owner) or ttp (trusted initializer)"
    ),
    rendezvous: str | None = typer.Option(
        None, "--rendezvous", help="tcp://HOST:PORT (default: $RENDEZVOUS); alice listens there"
    ),
    model: str | None = typer.Option(
        None, "--model", help="alice: TextCNN file saved by save_alice_model"
    ),
    texts: str | None = typer.Option(
        None, "--texts", help="bob: texts file (txt/jsonl/csv), embedded with the public encoder"
    ),
    embeddings: str | None = typer.Option(
        None, "--embeddings", help="bob: .npy embeddings instead of --texts"
    ),
    encoder_name: str = typer.Option(
        "auto", "--encoder", help="bob: public encoder (auto, minilm, hashed)"
    ),
    out: str | None = typer.Option(None, "--out", help="bob: write the labels (JSON) here"),
    provider: str = typer.Option(
        "TTP", "--provider", help="TTP (third process) or TFP (CrypTen's default)"
    ),
    mode: str = typer.Option("batched", "--mode", help="batched or sequential"),
    timeout: float = typer.Option(
        60.0, "--timeout", help="seconds to wait for the other parties / any message"
    ),
    tls_dir: str | None = typer.Option(
        None,
        "--tls-dir",
        help="folder of `privnlp fl certs DIR --parties 3`: ca.crt plus this party's party-<rank>.pem/.key "
        "(alice=0, bob=1, ttp=2); the parties then talk over mutually authenticated TLS",
    ),
    ca_cert: str | None = typer.Option(
        None, "--ca-cert", help="the deployment's CA certificate (overrides DIR/ca.crt)"
    ),
    cert: str | None = typer.Option(
        None, "--cert", help="this party's certificate (overrides DIR/party-<rank>.pem)"
    ),
    key: str | None = typer.Option(
        None, "--key", help="this party's private key (overrides DIR/party-<rank>.key)"
    ),
    bind: str | None = typer.Option(
        None,
        "--bind",
        help="alice with TLS: listen on HOST:PORT instead of the rendezvous address (e.g. 0.0.0.0:29500)",
    ),
    encrypted_network: bool = typer.Option(
        False,
        "--encrypted-network",
        help="without TLS material, accept a non-loopback rendezvous: you assert that HOST is on an "
        "encrypted, authenticated network only the three parties can join (e.g. WireGuard); "
        "torch.distributed itself sends every share in clear",
    ),
) -> None:
    """Run one party of pi_TEXT as its own process.

    With TLS material (--tls-dir, or --ca-cert/--cert/--key) the parties talk over TLS 1.3, mutually
    authenticated: a party whose certificate is not signed by the deployment's CA, or names another rank,
    is refused before any share is sent. Without it they talk over torch.distributed (gloo, plain TCP, no
    TLS): allowed on loopback (insecure demo) or with --encrypted-network."""

    roles = {"alice": 0, "bob": 1, "ttp": 2}
    if role not in roles:
        _fail(f"--role must be one of alice, bob, ttp; got {role!r}")
    if provider not in ("TTP", "TFP"):
        _fail(f"--provider must be TTP or TFP; got {provider!r}")
    if role == "ttp" and provider != "TTP":
        _fail("--role ttp needs --provider TTP")
    rdv = rendezvous or os.environ.get("RENDEZVOUS")
    if not rdv:
        _fail("no rendezvous: pass --rendezvous tcp://HOST:PORT or set RENDEZVOUS")
    use_tls = any(v is not None for v in (tls_dir, ca_cert, cert, key))
    host = "127.0.0.1"
    if rdv.startswith("tcp://"):
        host = rdv[len("tcp://") :].rpartition(":")[0].strip("[]") or "127.0.0.1"
        if not use_tls and not _is_loopback(host) and not encrypted_network:
            _fail(
                f"--rendezvous {rdv} is not loopback and no TLS material was given: torch.distributed "
                "(gloo) sends every secret share in clear and any process that reaches the port can take "
                "a party's place. Pass --tls-dir DIR (certificates of `privnlp fl certs DIR --parties 3`), "
                "or assert an encrypted, authenticated network only the parties can join (WireGuard, "
                "IPsec) with --encrypted-network, or use loopback"
            )
    elif use_tls:
        _fail(f"--tls-dir needs --rendezvous tcp://HOST:PORT; got {rdv!r}")
    if bind is not None and (not use_tls or role != "alice"):
        _fail("--bind is for --role alice with TLS (--tls-dir)")
    env_rank = os.environ.get("RANK")
    if rendezvous is None and env_rank is not None and int(env_rank) != roles[role]:
        _fail(f"RANK={env_rank} does not match --role {role} (alice=0, bob=1, ttp=2)")
    transport = _transport_statement(use_tls, host, encrypted_network)
    if not use_tls:
        typer.echo(f"{role}: {transport['statement']}", err=True)
    try:
        # heavy (torch, CrypTen): this module is imported by `privnlp --help`
        from privnlp.mechanisms.mpc import encoder, protocol, textcnn

        bind_addr = None
        if bind is not None:
            bind_addr = protocol.parse_tcp(f"tcp://{bind}")
        party_tls = None
        if use_tls:
            if tls_dir is None and None in (ca_cert, cert, key):
                _fail("TLS needs --tls-dir DIR, or all three of --ca-cert, --cert and --key")
            base = protocol.PartyTLS.in_dir(tls_dir or ".", roles[role])
            party_tls = protocol.PartyTLS(
                Path(ca_cert) if ca_cert else base.ca_certfile,
                Path(cert) if cert else base.certfile,
                Path(key) if key else base.keyfile,
            ).check(
                roles[role]
            )  # before anything is sent: missing / expired / mismatched / other rank
            protocol.parse_tcp(rdv)
        if rdv.startswith("tcp://") and role == "alice":  # fail fast on a taken port
            h, port = protocol.parse_tcp(rdv)
            protocol.check_port_free(*(bind_addr or (h, port)))

        if role == "ttp":
            protocol.run_ttp(rendezvous=rdv, timeout=timeout, tls=party_tls)
            typer.echo(f"ttp: done (transport {transport['channels']})")
            return
        kwargs: dict = {"mode": mode}
        if role == "alice":
            if not model:
                _fail("--role alice needs --model")

            m = textcnn.load_alice_model(model)
            kwargs.update(
                config=m.public_config(),
                state={k: v.numpy() for k, v in protocol.plaintext_state(m).items()},
            )
        else:
            if embeddings:
                x = np.load(embeddings)
            elif texts:
                x = encoder.PublicEncoder(encoder_name).encode(load_texts(texts))
            else:
                _fail("--role bob needs --texts or --embeddings")
            kwargs["embeddings"] = np.asarray(x, np.float32)
        crypten = protocol.init_party(
            roles[role], rendezvous=rdv, provider=provider, timeout=timeout
        )
        with protocol.transport(
            roles[role], rendezvous=rdv, timeout=timeout, tls=party_tls, bind=bind_addr
        ):
            crypten.init()
            try:
                res = protocol.run_party(roles[role], **kwargs)
            finally:
                with contextlib.suppress(Exception):
                    crypten.uninit()
        if role == "bob":
            payload = {
                "labels": [int(v) for v in res.labels],
                "seconds": res.seconds,
                "comm": dict(res.comm),
                "transport": transport,
            }
            if out:
                atomic_write_text(out, json.dumps(payload))
            else:
                typer.echo(json.dumps(payload))
        else:
            typer.echo(f"alice: done (transport {transport['channels']}, {res.comm})")
    except typer.Exit:  # a _fail above (click's Exit is a RuntimeError)
        raise
    except PrivnlpError as e:
        _fail(str(e))
    except (RuntimeError, ValueError) as e:  # torch.distributed timeouts / connection errors
        _fail(
            f"MPC party {role} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
            3,
        )


@app.command()
def predict(
    model: str = typer.Option(..., "--model", help="Alice's TextCNN file"),
    texts: str = typer.Option(..., "--texts", help="texts file (txt/jsonl/csv)"),
    encoder_name: str = typer.Option("auto", "--encoder"),
    provider: str = typer.Option("TTP", "--provider"),
    mode: str = typer.Option("batched", "--mode"),
    timeout: float = typer.Option(300.0, "--timeout"),
    transport: str = typer.Option(
        "gloo",
        "--transport",
        help="gloo (torch.distributed, plain local TCP) or tls (mutually authenticated TLS 1.3 channels, "
        "certificates of a CA made for the run)",
    ),
) -> None:
    """Embedded mode: run Alice, Bob (and the TTP) as local processes and print the labels."""

    # heavy (torch): this module is imported by `privnlp --help`
    from privnlp.mechanisms.mpc import encoder, textcnn

    try:
        mech = textcnn.CryptenTextCNN(
            provider=provider, mode=mode, timeout=timeout, transport=transport
        )
        m = textcnn.load_alice_model(model)
        x = encoder.PublicEncoder(encoder_name).encode(load_texts(texts))
        res = mech.classify(m, x)
        typer.echo(
            json.dumps(
                {
                    "labels": [int(v) for v in res.labels],
                    "seconds": res.seconds,
                    "transport": res.transport,
                }
            )
        )
    except PrivnlpError as e:
        _fail(str(e))
