"""`privnlp fl ...`: embedded simulation, and a real Flower deployment (SuperLink / SuperNodes).

Paper: ``../shared/papers/unintended-memorization-under-fl.txt`` (DP-FedAvg). Heavy imports happen
inside the commands.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import typer

from privnlp.core.errors import InvalidArgument
from privnlp.data import generate_corpus


def _flower():
    """privnlp.mechanisms.federated.flower (torch + flwr, ~5 s): deferred, `privnlp --help` stays light."""
    from privnlp.mechanisms.federated import flower

    return flower


def _tls():
    """privnlp.mechanisms.federated.tls (cryptography; its package imports torch): deferred like _flower."""
    from privnlp.mechanisms.federated import tls

    return tls


app = typer.Typer(
    help="Federated learning: FedAvg and DP-FedAvg simulator, Flower server and client.",
    no_args_is_help=True,
)


@app.command()
def simulate(
    rounds: int = typer.Option(5, help="number of rounds"),
    users: int = typer.Option(
        20, help="synthetic users (bundled corpus, natural non-IID partition)"
    ),
    clients_per_round: int = typer.Option(5, "--clients-per-round", "-m"),
    mechanism: str = typer.Option("dp_fedavg", help="fedavg | dp_fedavg"),
    clip_norm: float = typer.Option(0.5),
    noise_multiplier: float = typer.Option(1.0),
    sampling: str = typer.Option("fixed", help="fixed | poisson"),
    snapshot_dir: Path | None = typer.Option(
        None, help="write per-round snapshots + selection log here"
    ),
    seed: int = typer.Option(0),
) -> None:
    """Embedded, deterministic simulation on the tiny LM; prints the claim and the per-round loss."""
    # deferred: the federated package imports torch, the tokenizer module `tokenizers` (light CLI start-up)
    from privnlp.mechanisms.federated import (
        DPFedAvg,
        FedAvg,
        FedSimulator,
        lm_client_data,
        lm_task,
        partition_natural,
    )
    from privnlp.models import train_bpe_tokenizer

    corpus = generate_corpus(n_users=users, records_per_user=6, seed=seed)
    tok = train_bpe_tokenizer(corpus.texts(), vocab_size=400)
    part = partition_natural(corpus.records)
    data = lm_client_data(tok, {k: [r.text for r in v] for k, v in part.clients.items()})
    common = dict(clients_per_round=clients_per_round, sampling=sampling, local_lr=0.5)
    mech = (
        FedAvg(**common)
        if mechanism == "fedavg"
        else DPFedAvg(clip_norm=clip_norm, noise_multiplier=noise_multiplier, **common)
    )
    res = FedSimulator(mech, lm_task(tok), data).run(
        rounds, rng=seed, snapshot_dir=snapshot_dir, progress=True
    )
    for h in res.history:
        typer.echo(
            f"round {h.round}: {len(h.selected)} selected, {h.num_replies} replies, loss {h.loss:.3f}"
        )
    typer.echo(res.claim.statement())


_FORWARDING = (
    False  # set once _forward_termination installed its handlers (the CLI process, not tests)
)


class _Terminated(KeyboardInterrupt):
    """SIGTERM / SIGINT received: unwind (the ``finally`` stops every Flower process) and exit 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def _forward_termination() -> None:
    """SIGTERM/SIGINT unwind the command (its ``finally`` stops the Flower processes it started, their process
    groups and descendants, and waits, bounded). Without this, SIGTERM kills the CLI at once and its
    SuperLink/SuperNode (own process groups) are orphaned."""

    def _raise(signum, frame):  # noqa: ARG001
        raise _Terminated(signum)

    global _FORWARDING
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _raise)
    _FORWARDING = True


def _stop_quietly(fl, procs) -> None:
    """Stop the Flower processes; a second SIGTERM/SIGINT must not interrupt the (bounded) cleanup."""

    if _FORWARDING:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
    fl.stop(procs)


def _fail(msg: str, code: int = 1) -> None:
    typer.echo(msg, err=True)
    raise typer.Exit(code)


@app.command()
def server(
    port: int = typer.Option(9093, help="SuperLink HTTP port (Fleet + Control + runtime API)"),
    host: str = typer.Option(
        "127.0.0.1", help="bind address; 0.0.0.0 to accept SuperNodes of other machines"
    ),
    work_dir: Path = typer.Option(
        Path("fl-run"),
        help="app folder, FLWR_HOME, logs, SuperLink database, "
        "out/ (result.json, error.json, server_checkpoint.pt)",
    ),
    num_clients: int = typer.Option(3),
    clients_per_round: int = typer.Option(3),
    rounds: int = typer.Option(2),
    mechanism: str = typer.Option("dp_fedavg"),
    clip_norm: float = typer.Option(0.5),
    noise_multiplier: float = typer.Option(1.0),
    delta: float = typer.Option(1e-3),
    task: str = typer.Option(
        "linear", help="linear | lm | pii_tagger (the federated PII tagger, issue #19)"
    ),
    seed: int = typer.Option(
        0, help="non-private randomness only (model init, data order); sent to every node"
    ),
    seeded_noise: bool = typer.Option(
        False,
        "--seeded-noise",
        help="reproducible simulation: DP noise and "
        "client selection from --seed (the claim says 'noise seeded': not private "
        "against anyone who knows the seed)",
    ),
    round_timeout: float = typer.Option(
        60.0,
        help="seconds a round waits for every selected node; a missing "
        "reply fails the DP-FedAvg round closed",
    ),
    round_retries: int = typer.Option(
        0,
        help="re-run a failed round (nothing released) with the same "
        "selected users after waiting up to --node-wait for replacement "
        "SuperNodes; 0 = stop with an error",
    ),
    node_wait: float = typer.Option(
        600.0, help="seconds to wait for a live SuperNode per partition"
    ),
    resume: bool = typer.Option(
        True,
        "--resume/--no-resume",
        help="continue from out/server_checkpoint.pt "
        "(rounds and privacy ledger); --no-resume refuses an out/ that holds one",
    ),
    timeout: float = typer.Option(3600.0, help="seconds to wait for the whole run"),
    certs: Path | None = typer.Option(
        None,
        help="TLS: a folder made by `privnlp fl certs` (ca.crt, server.pem, server.key); "
        "or give the three files below",
    ),
    ssl_certfile: Path | None = typer.Option(None, help="TLS: the SuperLink's certificate (PEM)"),
    ssl_keyfile: Path | None = typer.Option(None, help="TLS: the SuperLink's private key (PEM)"),
    ssl_ca_certfile: Path | None = typer.Option(None, help="TLS: the CA certificate (PEM)"),
    auth_keys: Path | None = typer.Option(
        None,
        help="SuperNode authentication: the public-key list (one OpenSSH EC key a line, e.g. "
        "supernode_public_keys.txt of `privnlp fl keys`); only these nodes can join. Needs TLS",
    ),
    insecure: bool = typer.Option(
        False,
        "--insecure",
        help="no TLS (the labelled demo): accepted on a loopback --host; elsewhere only with "
        "--allow-insecure-network",
    ),
    allow_insecure_network: bool = typer.Option(
        False,
        "--allow-insecure-network",
        help="accept --insecure on a non-loopback --host (an eavesdropper reads every update; the "
        "claim says so)",
    ),
    aggregation: str = typer.Option(
        "central",
        help="central (the server adds the noise: trusted) | secagg (SecAgg+ with distributed "
        "Skellam noise: the server sees only the noisy sum)",
    ),
    secagg_levels: int = typer.Option(
        1024, help="secagg: integer levels of the clip norm (quantisation step clip-norm/levels)"
    ),
    secagg_bits: int = typer.Option(32, help="secagg: SecAgg+ modulus 2^bits (8..32)"),
    secagg_min_survivors: int = typer.Option(
        0,
        help="secagg: minimum surviving clients per round (SecAgg+ threshold; the noise shares are "
        "sized for it; 0 = all selected: any dropout fails the round closed)",
    ),
) -> None:
    """Start a SuperLink, submit the privnlp app with `flwr run`, wait for the result, stop the SuperLink.

    Secure by default: a non-loopback --host needs TLS (--certs); --auth-keys admits only registered
    SuperNodes; --aggregation secagg keeps individual updates from the server. Without certificates on a
    loopback --host the run is the insecure demo, and its claim says so.

    Exit status: 0 = the run finished and its claim is printed; 1 = the run failed (e.g. a DP-FedAvg round
    failed closed, no result within --timeout, `flwr run` failed; the error is printed on stderr);
    128 + signal number after SIGTERM / SIGINT. Running it again with the same --work-dir resumes the run.
    """
    fl = _flower()
    T = _tls()

    try:
        tls_files = _server_tls(certs, ssl_certfile, ssl_keyfile, ssl_ca_certfile, insecure)
        if tls_files is None:
            if not T.is_loopback(host) and not (insecure and allow_insecure_network):
                _fail(
                    f"error: --host {host} is not loopback: pass TLS certificates (--certs DIR, make test "
                    "ones with `privnlp fl certs DIR --host <this-host>`), or --insecure "
                    "--allow-insecure-network to knowingly send every update in clear",
                    2,
                )
            typer.echo(
                "WARNING: insecure transport (no TLS, no SuperNode authentication): loopback demo only",
                err=True,
            )
        else:
            T.check_server_tls(tls_files, None if host in ("0.0.0.0", "::") else host)
        keys = T.read_key_list(auth_keys) if auth_keys is not None else []
        if keys and tls_files is None:
            _fail("error: --auth-keys needs TLS (--certs DIR)", 2)
        if keys and num_clients > len(keys):
            _fail(
                f"error: --num-clients {num_clients} exceeds the {len(keys)} authenticated SuperNodes "
                f"of {auth_keys} (the accounted population is the authenticated one)",
                2,
            )
    except InvalidArgument as e:
        _fail(f"error: {e}", 2)

    work_dir.mkdir(parents=True, exist_ok=True)
    out = (work_dir / "out").resolve()
    cfg = {
        "mechanism": mechanism,
        "num-server-rounds": rounds,
        "num-clients": num_clients,
        "clients-per-round": clients_per_round,
        "clip-norm": clip_norm,
        "noise-multiplier": noise_multiplier,
        "delta": delta,
        "task": task,
        "out-dir": str(out),
        "node-wait": node_wait,
        "seed": seed,
        "seeded-noise": seeded_noise,
        "round-timeout": round_timeout,
        "round-retries": round_retries,
        "resume": resume,
        "aggregation": aggregation,
        "secagg-levels": secagg_levels,
        "secagg-bits": secagg_bits,
        "secagg-min-survivors": secagg_min_survivors,
        "transport-tls": tls_files is not None,
        "transport-node-auth": bool(keys),
        "transport-authenticated-nodes": len(keys),
        "transport-host": host,
    }
    try:
        fl.validate_run_config(
            cfg
        )  # a threshold, modulus, mechanism error: before any process starts
    except InvalidArgument as e:
        _fail(f"error: {e}", 2)
    app_dir = fl.write_app(work_dir / "app", cfg)
    _forward_termination()
    env = fl.flower_env(
        work_dir / "flwr_home",
        f"127.0.0.1:{port}",
        root_certificates=tls_files.ca_certfile if tls_files else None,
    )
    log = open(work_dir / "superlink.log", "ab")
    link = None
    try:
        # SuperLink state in a file: a restarted server keeps the SuperNodes' registrations
        link = fl.start_superlink(
            port,
            env=env,
            host=host,
            log=log,
            extra=["--database", str((work_dir / "superlink.db").resolve())],
            tls=tls_files,
            node_auth=bool(keys),
            allow_insecure=insecure and allow_insecure_network,
        )
        fl._wait_port(port, 30.0, link)
        if keys:  # before any SuperNode can activate: an unknown node is refused, never selected
            fl.register_nodes(keys, env=env, work_dir=work_dir)
            typer.echo(f"registered {len(keys)} SuperNode public keys from {auth_keys}")
        typer.echo(
            f"SuperLink on {host}:{port}; start {num_clients} clients with "
            f"`privnlp fl client --superlink <this-host>:{port} --partition-id i --num-partitions {num_clients}"
            + (" --root-certificates ca.crt" if tls_files else " --insecure")
            + (" --auth-key node-i.key`" if keys else "`")
        )
        fl.clear_result(out)
        sub = fl.submit_run(app_dir, env=env, timeout=60)
        if sub.returncode != 0:
            _fail(f"flwr run failed (rc={sub.returncode}): {sub.stdout}{sub.stderr}")
        try:
            res = fl.wait_for_result(out, timeout=timeout, procs=(link,))
        except Exception as e:  # noqa: BLE001 - no result (timeout, a Flower process died) is a failed run
            _fail(json.dumps({"error": f"{type(e).__name__}: {e}"}, indent=2))
        if "error" in res or "claim" not in res:
            # a failed (e.g. fail-closed) private run must never read as a success to scripts (issue #15)
            _fail(json.dumps(res, indent=2, default=str))
        typer.echo(json.dumps(res["claim"], indent=2, default=str))
    except _Terminated as e:
        typer.echo(f"interrupted by signal {e.signum}; stopping the SuperLink", err=True)
        raise typer.Exit(128 + e.signum) from None
    finally:
        _stop_quietly(fl, [link])
        log.close()


@app.command()
def client(
    superlink: str = typer.Option("127.0.0.1:9093", help="HOST:PORT of the SuperLink"),
    partition_id: int = typer.Option(0),
    num_partitions: int = typer.Option(3),
    port: int = typer.Option(0, help="local SuperNode runtime port (0 = a free one)"),
    flwr_home: Path = typer.Option(Path("fl-node"), help="FLWR_HOME of this node"),
    root_certificates: Path | None = typer.Option(
        None, help="TLS: the CA certificate (ca.crt) that signed the SuperLink's certificate"
    ),
    auth_key: Path | None = typer.Option(
        None,
        help="SuperNode authentication: this node's private key (node-i.key of `privnlp fl keys`)",
    ),
    insecure: bool = typer.Option(
        False, "--insecure", help="no TLS: accepted for a loopback SuperLink (the demo)"
    ),
    allow_insecure_network: bool = typer.Option(
        False, "--allow-insecure-network", help="accept --insecure for a non-loopback SuperLink"
    ),
) -> None:
    """Run a SuperNode (foreground) serving partition ``partition_id`` of the privnlp app.

    SIGTERM / SIGINT stop the SuperNode and its ClientApp processes, then exit 128 + signal number; if the
    SuperNode exits by itself, its exit status is returned."""
    fl = _flower()

    if root_certificates is None and not insecure and not fl.is_loopback(fl._host_of(superlink)):
        _fail(
            f"error: --superlink {superlink} is not loopback: pass --root-certificates ca.crt (TLS), or "
            "--insecure --allow-insecure-network",
            2,
        )
    if root_certificates is not None and insecure:
        _fail("error: --insecure contradicts --root-certificates", 2)
    env = fl.flower_env(flwr_home)
    _forward_termination()
    p = None
    try:
        try:
            p = fl.start_supernode(
                superlink,
                partition_id,
                num_partitions,
                port or fl.free_port(),
                env=env,
                root_certificates=root_certificates,
                auth_key=auth_key,
                allow_insecure=insecure and allow_insecure_network,
            )
        except InvalidArgument as e:
            _fail(f"error: {e}", 2)
        rc = p.wait()
        if rc:
            raise typer.Exit(rc)
    except _Terminated as e:
        raise typer.Exit(128 + e.signum) from None
    finally:
        _stop_quietly(fl, [p])


def _server_tls(certs, certfile, keyfile, cafile, insecure):
    """The SuperLink's TLS files from --certs DIR or the three --ssl-* options; ``None`` for --insecure."""
    TlsFiles = _tls().TlsFiles

    given = [x for x in (certfile, keyfile, cafile) if x is not None]
    if insecure and (certs is not None or given):
        _fail("error: --insecure contradicts the TLS certificates given", 2)
    if certs is not None:
        if given:
            _fail("error: give --certs DIR or the --ssl-* files, not both", 2)
        return TlsFiles.in_dir(certs)
    if given:
        if len(given) != 3:
            _fail(
                "error: TLS needs --ssl-certfile, --ssl-keyfile and --ssl-ca-certfile together", 2
            )
        return TlsFiles(cafile, certfile, keyfile)
    return None


@app.command()
def certs(
    out_dir: Path = typer.Argument(..., help="folder for ca.crt, ca.key, server.pem, server.key"),
    host: list[str] = typer.Option(
        [],
        "--host",
        help="a name or address the SuperLink is reached at (repeat); localhost and "
        "127.0.0.1 are always included",
    ),
    days: float = typer.Option(30.0, help="validity in days"),
    parties: int = typer.Option(0, help="also party-<i>.pem / .key for MPC parties"),
) -> None:
    """Make a CA and a SuperLink certificate for a TEST deployment (keep ca.key off the machines)."""
    make_certs = _tls().make_certs

    try:
        f = make_certs(out_dir, list(host), days=days, parties=parties)
    except InvalidArgument as e:
        _fail(f"error: {e}", 2)
    typer.echo(
        f"wrote {f.ca_certfile}, {f.certfile}, {f.keyfile}; server: --certs {out_dir}; "
        f"nodes: --root-certificates {f.ca_certfile}"
    )


@app.command()
def keys(
    out_dir: Path = typer.Argument(..., help="folder for node-<i>.key / .pub and the key list"),
    nodes: int = typer.Option(..., "--nodes", help="number of SuperNode key pairs"),
) -> None:
    """Make SuperNode key pairs (OpenSSH EC P-384) and the public-key list for `fl server --auth-keys`."""
    make_node_keys = _tls().make_node_keys

    try:
        lst = make_node_keys(out_dir, nodes)
    except InvalidArgument as e:
        _fail(f"error: {e}", 2)
    typer.echo(
        f"wrote {nodes} key pairs and {lst}; server: --auth-keys {lst}; node i: --auth-key "
        f"{out_dir}/node-<i>.key"
    )
