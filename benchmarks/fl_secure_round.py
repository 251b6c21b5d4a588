"""Round time of the secure Flower deployment (TLS + SuperNode authentication + SecAgg+ with distributed Skellam
noise) / the plain one (insecure loopback, central DP-FedAvg), real processes on 127.0.0.1 (issue #33 item 6;
target <= 2x at 10 clients).

Each mode gets its own deployment (a SuperLink and N SuperNodes, all selected every round; the linear smoke
task, so the round time is Flower's and the protocol's, not training); the round time is the ServerApp's own
(``history[i]["seconds"]``: from sending the round's first message to the aggregate), median over the rounds
after the first. Prints the machine's load average before and after: the numbers depend on it.

    OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/fl_secure_round.py --clients 10 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")


def _run(clients: int, rounds: int, secure: bool, work: str) -> list[float]:
    from privnlp.mechanisms.federated.flower import LoopbackDeployment

    cfg = {
        "num-server-rounds": rounds,
        "num-clients": clients,
        "clients-per-round": clients,
        "round-timeout": 600.0,
        "node-wait": 600.0,
        "aggregation": "secagg" if secure else "central",
    }
    with LoopbackDeployment(work, clients, secure=secure) as dep:
        out = dep.submit(cfg, os.path.join(work, "out"), timeout=600.0)  # flwr run under load
        res = dep.wait(out, 600.0 + 300.0 * rounds)
    if "error" in res:
        raise SystemExit(f"{'secure' if secure else 'plain'} run failed: {res['error']}")
    return [float(h["seconds"]) for h in res["history"]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    load0 = os.getloadavg()
    t0 = time.monotonic()
    times = {}
    with tempfile.TemporaryDirectory(prefix="privnlp-flbench-") as d:
        for name, secure in (("plain", False), ("secure", True)):
            times[name] = _run(a.clients, a.rounds, secure, os.path.join(d, name))
    load1 = os.getloadavg()
    med = {k: statistics.median(v[1:] if len(v) > 1 else v) for k, v in times.items()}
    print(
        f"clients={a.clients} (all selected) rounds={a.rounds} cpus={os.cpu_count()} "
        f"load1 before/after={load0[0]:.1f}/{load1[0]:.1f} wall={time.monotonic() - t0:.0f}s"
    )
    for k, v in times.items():
        print(
            f"{k:7s} round seconds {[round(x, 1) for x in v]}  median (after the first) {med[k]:.1f}"
        )
    ratio = med["secure"] / med["plain"]
    print(
        f"ratio secure(TLS+auth+SecAgg+)/plain = {ratio:.2f}x (target <= 2x at 10 clients) -> "
        f"{'OK' if ratio <= 2.0 else 'OVER'}"
    )


if __name__ == "__main__":
    main()
