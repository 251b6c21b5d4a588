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
    return subprocess.Popen(CLI + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)


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
    from privnlp.mechanisms.mpc import save_alice_model

    d = tmp_path_factory.mktemp("mpc")
    save_alice_model(alice[0].model, str(d / "alice.pt"))
    np.save(d / "x.npy", alice[1][:16])
    np.save(d / "bad.npy", np.zeros((2, 5), np.float32))
    return d


@pytest.fixture(scope="module")
def wave(alice, files):
    """All CLI processes started at once (interpreter + torch + CrypTen start-up dominates, so
    the runs overlap): a good TTP/Alice/Bob trio; a pair whose Bob has the wrong embedding size
    (both must fail); an Alice whose peers never come (rendezvous timeout); an Alice whose port
    is taken."""
    rdv = f"tcp://127.0.0.1:{_port()}"
    bad_rdv = f"tcp://127.0.0.1:{_port()}"
    model = str(files / "alice.pt")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        t0 = time.monotonic()
        procs = [
            _start(["--role", "ttp", "--timeout", "60"], env={"RENDEZVOUS": rdv, "RANK": "2", "WORLD_SIZE": "2"}),
            _start(["--role", "alice", "--rendezvous", rdv, "--model", model, "--timeout", "60"]),
            _start(["--role", "bob", "--rendezvous", rdv, "--embeddings", str(files / "x.npy"),
                    "--out", str(files / "labels.json"), "--timeout", "60"]),
            _start(["--role", "alice", "--rendezvous", bad_rdv, "--model", model, "--provider", "TFP",
                    "--timeout", "30"]),
            _start(["--role", "bob", "--rendezvous", bad_rdv, "--embeddings", str(files / "bad.npy"),
                    "--provider", "TFP", "--timeout", "30"]),
            _start(["--role", "alice", "--rendezvous", f"tcp://127.0.0.1:{_port()}", "--model", model,
                    "--provider", "TFP", "--timeout", "5"]),
            _start(["--role", "alice", "--rendezvous", f"tcp://127.0.0.1:{s.getsockname()[1]}",
                    "--model", model, "--timeout", "5"]),
        ]
        outs = _finish(procs, limit=110)
        elapsed = time.monotonic() - t0
    return {"good": outs[:3], "bad_embed": outs[3:5], "lonely": outs[5], "taken": outs[6], "elapsed": elapsed}


def test_three_processes_on_loopback(alice, files, wave):
    outs = wave["good"]
    assert all(rc == 0 for rc, _, _ in outs), outs
    got = json.loads((files / "labels.json").read_text())["labels"]
    ref = alice[0].model.predict(torch.tensor(alice[1][:16])).tolist()
    assert got == ref


def test_bad_runs_fail_cleanly_without_hanging(wave):
    """Wrong embedding size (both sides fail), a missing party (timeout), a taken port."""
    assert wave["elapsed"] < 100
    for rc, _, err in wave["bad_embed"]:
        assert rc != 0 and "embed_dim" in err, err[-1500:]
    rc, _, err = wave["lonely"]
    assert rc != 0 and "error" in err.lower(), err[-1500:]
    rc, _, err = wave["taken"]
    assert rc != 0 and "already in use" in err, err[-1500:]
