"""`privnlp mpc serve`: three real processes rendezvousing over TCP on 127.0.0.1."""

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "privnlp.cli.main", "mpc", "serve"]


def _port():
    from privnlp.mechanisms.mpc.protocol import free_port

    return free_port()


def _start(args, env=None):
    e = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", **(env or {}))
    for k in ("RENDEZVOUS", "RANK", "WORLD_SIZE"):
        if not env or k not in env:
            e.pop(k, None)
    return subprocess.Popen(
        CLI + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e
    )


def _finish(procs, limit=90):
    deadline = time.monotonic() + limit
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
            outs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
    return outs


@pytest.fixture(scope="module")
def files(alice, tmp_path_factory):
    from privnlp.mechanisms.federated.tls import make_certs
    from privnlp.mechanisms.mpc import save_alice_model

    d = tmp_path_factory.mktemp("mpc")
    save_alice_model(alice[0].model, str(d / "alice.pt"))
    make_certs(d / "pki", parties=3)
    np.save(d / "x.npy", alice[1][:16])
    np.save(d / "bad.npy", np.zeros((2, 5), np.float32))
    return d


def _cli_in_fork(args, err_path):
    """`privnlp mpc serve ARGS` in a forked child of the test process (a real separate process on
    its own TCP rendezvous, without paying interpreter + torch + CrypTen start-up again)."""
    import multiprocessing as mp

    def child():
        fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 2)
        sys.stderr = open(2, "w", closefd=False)  # pytest replaced sys.stderr in the parent
        code = 1
        try:
            from privnlp.cli.main import app

            app(["mpc", "serve", *args])
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException as e:  # noqa: BLE001
            print(f"{type(e).__name__}: {e}", file=sys.stderr)
        finally:
            sys.stderr.flush()
            os._exit(code)

    p = mp.get_context("fork").Process(target=child)
    p.start()
    return p


def _finish_forks(procs, paths, limit):
    deadline = time.monotonic() + limit
    outs = []
    for p, path in zip(procs, paths):
        p.join(max(0.1, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(5)
        outs.append((p.exitcode, "", open(path).read() if os.path.exists(path) else ""))
    return outs


@pytest.fixture(scope="module")
def wave(alice, files):
    """Everything started at once so the runs overlap. The good trio: the TTP as a fresh
    `python -m privnlp.cli.main mpc serve` subprocess (RENDEZVOUS/RANK from the environment),
    Alice and Bob as forked CLI children (interpreter + torch + CrypTen start-up dominates a
    fresh subprocess; ``test_three_fresh_interpreters`` (slow) starts all three fresh). The bad
    runs, forked too: a pair whose Bob has the wrong embedding size (both must fail), an Alice
    whose peers never come (rendezvous timeout), an Alice whose port is taken. And a trio over the
    mutually authenticated TLS channels (``--tls-dir``), all three forked."""
    rdv = f"tcp://127.0.0.1:{_port()}"
    tls_rdv = f"tcp://127.0.0.1:{_port()}"
    pki = ["--tls-dir", str(files / "pki")]
    bad_rdv = f"tcp://127.0.0.1:{_port()}"
    model = str(files / "alice.pt")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        t0 = time.monotonic()
        ttp = _start(
            ["--role", "ttp", "--timeout", "60"],
            env={"RENDEZVOUS": rdv, "RANK": "2", "WORLD_SIZE": "2"},
        )
        args = [
            ["--role", "alice", "--rendezvous", rdv, "--model", model, "--timeout", "60"],
            [
                "--role",
                "bob",
                "--rendezvous",
                rdv,
                "--embeddings",
                str(files / "x.npy"),
                "--out",
                str(files / "labels.json"),
                "--timeout",
                "60",
            ],
            [
                "--role",
                "alice",
                "--rendezvous",
                bad_rdv,
                "--model",
                model,
                "--provider",
                "TFP",
                "--timeout",
                "30",
            ],
            [
                "--role",
                "bob",
                "--rendezvous",
                bad_rdv,
                "--embeddings",
                str(files / "bad.npy"),
                "--provider",
                "TFP",
                "--timeout",
                "30",
            ],
            [
                "--role",
                "alice",
                "--rendezvous",
                f"tcp://127.0.0.1:{_port()}",
                "--model",
                model,
                "--provider",
                "TFP",
                "--timeout",
                "5",
            ],
            [
                "--role",
                "alice",
                "--rendezvous",
                f"tcp://127.0.0.1:{s.getsockname()[1]}",
                "--model",
                model,
                "--timeout",
                "5",
            ],
        ]
        tls_args = [
            ["--role", "ttp", "--rendezvous", tls_rdv, *pki, "--timeout", "60"],
            ["--role", "alice", "--rendezvous", tls_rdv, *pki, "--model", model, "--timeout", "60"],
            [
                "--role",
                "bob",
                "--rendezvous",
                tls_rdv,
                *pki,
                "--embeddings",
                str(files / "x.npy"),
                "--out",
                str(files / "labels_tls.json"),
                "--timeout",
                "60",
            ],
        ]
        args += tls_args
        paths = [str(files / f"err{i}.txt") for i in range(len(args))]
        forks = [_cli_in_fork(a, p) for a, p in zip(args, paths)]
        # the bad runs first (they must end on their own, well within their deadlines)
        bad = _finish_forks(forks[2:6], paths[2:6], limit=60)
        bad_elapsed = time.monotonic() - t0
        good = _finish_forks(forks[:2], paths[:2], limit=110)
        good.append(_finish([ttp], limit=30)[0])
        tls = _finish_forks(forks[6:], paths[6:], limit=60)
    return {
        "good": good,
        "bad_embed": bad[:2],
        "lonely": bad[2],
        "taken": bad[3],
        "bad_elapsed": bad_elapsed,
        "tls": tls,
    }


def test_three_processes_on_loopback(alice, files, wave):
    outs = wave["good"]
    assert all(rc == 0 for rc, _, _ in outs), outs
    got = json.loads((files / "labels.json").read_text())["labels"]
    ref = alice[0].model.predict(torch.tensor(alice[1][:16])).tolist()
    assert got == ref


def test_three_processes_over_tls(alice, files, wave):
    """`privnlp mpc serve --tls-dir`: the same labels, and Bob's result records the transport."""
    outs = wave["tls"]
    assert all(rc == 0 for rc, _, _ in outs), outs
    got = json.loads((files / "labels_tls.json").read_text())
    assert got["labels"] == alice[0].model.predict(torch.tensor(alice[1][:16])).tolist()
    assert got["transport"]["channels"] == "tls" and got["transport"]["authenticated"] is True
    plain = json.loads((files / "labels.json").read_text())["transport"]
    assert plain["channels"] == "gloo" and "INSECURE" in plain["statement"]
    assert plain["authenticated"] is False


def test_bad_runs_fail_cleanly_without_hanging(wave):
    """Wrong embedding size (both sides fail), a missing party (timeout), a taken port: clear
    errors, well within the deadline."""
    assert wave["bad_elapsed"] < 45
    for rc, _, err in wave["bad_embed"]:
        assert rc not in (0, None) and "embed_dim" in err, err[-1500:]
    rc, _, err = wave["lonely"]
    assert rc not in (0, None) and "error" in err.lower(), err[-1500:]
    rc, _, err = wave["taken"]
    assert rc not in (0, None) and "already in use" in err, err[-1500:]


@pytest.mark.slow
def test_three_fresh_interpreters(alice, files):
    """The full deployment shape: three fresh `privnlp mpc serve` interpreters over TCP."""
    rdv = f"tcp://127.0.0.1:{_port()}"
    ttp = _start(
        ["--role", "ttp", "--timeout", "60"],
        env={"RENDEZVOUS": rdv, "RANK": "2", "WORLD_SIZE": "2"},
    )
    a = _start(
        [
            "--role",
            "alice",
            "--rendezvous",
            rdv,
            "--model",
            str(files / "alice.pt"),
            "--timeout",
            "60",
        ]
    )
    b = _start(
        [
            "--role",
            "bob",
            "--rendezvous",
            rdv,
            "--embeddings",
            str(files / "x.npy"),
            "--out",
            str(files / "labels_fresh.json"),
            "--timeout",
            "60",
        ]
    )
    outs = _finish([a, b, ttp])
    assert all(rc == 0 for rc, _, _ in outs), outs
    got = json.loads((files / "labels_fresh.json").read_text())["labels"]
    assert got == alice[0].model.predict(torch.tensor(alice[1][:16])).tolist()
