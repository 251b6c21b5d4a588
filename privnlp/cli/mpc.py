"""`privnlp mpc ...`: private text classification with CrypTen (pi_TEXT).

Paper: ../shared/papers/mpc-cnn-private-text-classification.txt. Heavy imports (torch, CrypTen)
happen inside the commands.

Real deployment (three processes, e.g. on loopback)::

    privnlp mpc serve --role ttp   --rendezvous tcp://127.0.0.1:29500
    privnlp mpc serve --role alice --rendezvous tcp://127.0.0.1:29500 --model alice.pt
    privnlp mpc serve --role bob   --rendezvous tcp://127.0.0.1:29500 --texts mine.txt --out labels.json

Rendezvous / rank can also come from the environment (``RENDEZVOUS``, ``WORLD_SIZE``=2, ``RANK``).
A rendezvous off loopback is refused unless ``--encrypted-network`` (gloo has no TLS; issue #33 item 5).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os

import typer

from privnlp.core.errors import PrivnlpError
from privnlp.core.report import atomic_write_text
from privnlp.data import load_texts
from privnlp.mechanisms.mpc import protocol as P
from privnlp.mechanisms.mpc._crypten_shim import import_crypten
from privnlp.mechanisms.mpc.encoder import PublicEncoder
from privnlp.mechanisms.mpc.textcnn import CryptenTextCNN, load_alice_model

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


@app.command()
def serve(
    role: str = typer.Option(
        ..., "--role", help="alice (model owner), bob (text owner) or ttp (trusted initializer)"
    ),
    rendezvous: str | None = typer.Option(
        None, "--rendezvous", help="tcp://HOST:PORT (default: $RENDEZVOUS)"
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
    encoder: str = typer.Option(
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
    encrypted_network: bool = typer.Option(
        False,
        "--encrypted-network",
        help="accept a non-loopback rendezvous: you assert that HOST is on an encrypted, authenticated "
        "network only the three parties can join (e.g. WireGuard); torch.distributed itself sends every "
        "share in clear",
    ),
) -> None:
    """Run one party of pi_TEXT as its own process.

    The parties talk over torch.distributed (gloo, plain TCP): secret sharing needs private, authenticated
    channels, and the gloo transport of the PyPI torch wheels has no TLS. A rendezvous off loopback is
    therefore refused unless --encrypted-network asserts that the network provides them."""

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
    if rdv.startswith("tcp://"):
        host = rdv[len("tcp://") :].rpartition(":")[0] or "127.0.0.1"
        if not _is_loopback(host) and not encrypted_network:
            _fail(
                f"--rendezvous {rdv} is not loopback: torch.distributed (gloo) sends every secret share in "
                "clear and any process that reaches the port can take a party's place. Run the parties "
                "over an encrypted, authenticated network that only they can join (WireGuard, IPsec) and "
                "pass --encrypted-network, or use loopback"
            )
        if not _is_loopback(host):
            typer.echo(
                f"{role}: non-loopback rendezvous {host}: relying on the network's encryption and "
                "authentication (--encrypted-network)",
                err=True,
            )
    env_rank = os.environ.get("RANK")
    if rendezvous is None and env_rank is not None and int(env_rank) != roles[role]:
        _fail(f"RANK={env_rank} does not match --role {role} (alice=0, bob=1, ttp=2)")
    try:
        if rdv.startswith("tcp://") and role == "alice":  # before the heavy imports: fail fast
            host, _, port = rdv[len("tcp://") :].rpartition(":")
            P.check_port_free(host or "127.0.0.1", int(port))

        import_crypten()
        if role == "ttp":
            P.run_ttp(rendezvous=rdv, timeout=timeout)
            typer.echo("ttp: done")
            return
        kwargs: dict = {"mode": mode}
        if role == "alice":
            if not model:
                _fail("--role alice needs --model")

            m = load_alice_model(model)
            from privnlp.mechanisms.mpc.crypten_model import plaintext_state

            kwargs.update(
                config=m.public_config(),
                state={k: v.numpy() for k, v in plaintext_state(m).items()},
            )
        else:
            import numpy as np

            if embeddings:
                x = np.load(embeddings)
            elif texts:
                x = PublicEncoder(encoder).encode(load_texts(texts))
            else:
                _fail("--role bob needs --texts or --embeddings")
            kwargs["embeddings"] = np.asarray(x, np.float32)
        crypten = P.init_party(roles[role], rendezvous=rdv, provider=provider, timeout=timeout)
        crypten.init()
        try:
            res = P.run_party(roles[role], **kwargs)
        finally:
            with contextlib.suppress(Exception):
                crypten.uninit()
        if role == "bob":
            payload = {
                "labels": [int(v) for v in res.labels],
                "seconds": res.seconds,
                "comm": dict(res.comm),
            }
            if out:
                atomic_write_text(out, json.dumps(payload))
            else:
                typer.echo(json.dumps(payload))
        else:
            typer.echo(f"alice: done ({res.comm})")
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
    encoder: str = typer.Option("auto", "--encoder"),
    provider: str = typer.Option("TTP", "--provider"),
    mode: str = typer.Option("batched", "--mode"),
    timeout: float = typer.Option(300.0, "--timeout"),
) -> None:
    """Embedded mode: run Alice, Bob (and the TTP) as local processes and print the labels."""

    try:
        m = load_alice_model(model)
        x = PublicEncoder(encoder).encode(load_texts(texts))
        res = CryptenTextCNN(provider=provider, mode=mode, timeout=timeout).classify(m, x)
        typer.echo(json.dumps({"labels": [int(v) for v in res.labels], "seconds": res.seconds}))
    except PrivnlpError as e:
        _fail(str(e))
