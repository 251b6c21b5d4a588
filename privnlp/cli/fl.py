"""`privnlp fl ...`: embedded simulation, and a real Flower deployment (SuperLink / SuperNodes).

Paper: ``../shared/papers/unintended-memorization-under-fl.txt`` (DP-FedAvg). Heavy imports happen
inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

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
    from privnlp.data import generate_corpus
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
    import signal

    def _raise(signum, frame):  # noqa: ARG001
        raise _Terminated(signum)

    global _FORWARDING
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _raise)
    _FORWARDING = True


def _stop_quietly(fl, procs) -> None:
    """Stop the Flower processes; a second SIGTERM/SIGINT must not interrupt the (bounded) cleanup."""
    import signal

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
) -> None:
    """Start a SuperLink, submit the privnlp app with `flwr run`, wait for the result, stop the SuperLink.

    Exit status: 0 = the run finished and its claim is printed; 1 = the run failed (e.g. a DP-FedAvg round
    failed closed, no result within --timeout, `flwr run` failed; the error is printed on stderr);
    128 + signal number after SIGTERM / SIGINT. Running it again with the same --work-dir resumes the run.
    """
    from privnlp.mechanisms.federated import flower as fl

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
    }
    app_dir = fl.write_app(work_dir / "app", cfg)
    _forward_termination()
    env = fl.flower_env(work_dir / "flwr_home", f"127.0.0.1:{port}")
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
        )
        fl._wait_port(port, 30.0, link)
        typer.echo(
            f"SuperLink on {host}:{port}; start {num_clients} clients with "
            f"`privnlp fl client --superlink <this-host>:{port} --partition-id i --num-partitions {num_clients}`"
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
) -> None:
    """Run a SuperNode (foreground) serving partition ``partition_id`` of the privnlp app.

    SIGTERM / SIGINT stop the SuperNode and its ClientApp processes, then exit 128 + signal number; if the
    SuperNode exits by itself, its exit status is returned."""
    from privnlp.mechanisms.federated import flower as fl

    env = fl.flower_env(flwr_home)
    _forward_termination()
    p = None
    try:
        p = fl.start_supernode(
            superlink, partition_id, num_partitions, port or fl.free_port(), env=env
        )
        rc = p.wait()
        if rc:
            raise typer.Exit(rc)
    except _Terminated as e:
        raise typer.Exit(128 + e.signum) from None
    finally:
        _stop_quietly(fl, [p])
