"""Round time of the secure Flower deployment (TLS + SuperNode authentication + SecAgg+ with distributed Skellam
noise) / the plain one (insecure loopback, central DP-FedAvg), real processes on 127.0.0.1 (issue #33 item 6;
target <= 2x at 10 clients).

Each mode gets its own deployment (a SuperLink and N SuperNodes, all selected every round); both run the same
task and local training (``--task linear``: the numpy smoke task, so the round time is Flower's and the
protocol's; ``--task lm``: privnlp's tiny GPT-2 on each user's records, what a user's round costs). The round
time is the ServerApp's own (``history[i]["seconds"]``: from sending the round's first message to the
aggregate), median over the rounds after the first. For the secure arm the SecAgg+ stages are timed from the
workflow's log (``out/server.log``): stage 0 (keys out, public keys back), 1 (key shares), 2 (masked vectors:
the local training happens here), 3 (unmasking). Prints the machine's load average before and after: the numbers
depend on it.

``--node-poll S`` (diagnosis): the SuperNodes' hard-coded 3 s idle poll shortened to S seconds by patching Flower's
loop (:func:`privnlp.mechanisms.federated.flower_exec.run_node`). ``--no-fork-exec``: Flower's own SuperExec (a fresh ``flwr-clientapp`` process per message) instead of privnlp's
fork-server SuperExec (:mod:`privnlp.mechanisms.federated.flower_exec`).

    OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/fl_secure_round.py --clients 10 --rounds 3 [--task lm]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

from privnlp.mechanisms.federated.flower import LoopbackDeployment  # noqa: E402

_STAGE = re.compile(
    r"^(\S+ \S+) \[flwr\] DEBUG \[Stage (\d)\] (Sending|Forwarding|Requesting|Received)"
)


def stage_seconds(log: Path) -> dict[int, list[float]]:
    """Seconds of each SecAgg+ stage (request sent -> all replies received), per round, from the server log."""
    out: dict[int, list[float]] = {}
    start: dict[int, dt.datetime] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        m = _STAGE.match(line)
        if not m:
            continue
        t = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
        st = int(m.group(2))
        if m.group(3) == "Received":
            if st in start:
                out.setdefault(st, []).append((t - start.pop(st)).total_seconds())
        else:
            start[st] = t
    return out


def _mem_available_gib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return float("inf")


_LOWEST = [float("inf")]  # lowest MemAvailable seen (GiB)


def _watch_memory(min_gib: float, stop: threading.Event) -> None:
    """SIGINT to this process (the deployment's ``with`` block then stops every process) when the machine's
    available memory drops below ``min_gib``: N SuperNodes on a shared machine must not starve other jobs."""
    while not stop.wait(1.0):
        _LOWEST[0] = min(_LOWEST[0], _mem_available_gib())
        if _LOWEST[0] < min_gib:
            print(f"MemAvailable below {min_gib} GiB: stopping the benchmark", flush=True)
            os.kill(os.getpid(), signal.SIGINT)
            return


def _run(
    clients: int,
    rounds: int,
    secure: bool,
    work: str,
    task: str,
    fork_exec: bool,
    node_poll: float | None,
) -> tuple[list[float], dict[int, list[float]]]:
    cfg = {
        "num-server-rounds": rounds,
        "num-clients": clients,
        "clients-per-round": clients,
        "round-timeout": 900.0,
        "node-wait": 900.0,
        "task": task,
        "aggregation": "secagg" if secure else "central",
    }
    with LoopbackDeployment(
        work, clients, secure=secure, fork_exec=fork_exec, node_poll=node_poll
    ) as dep:
        again = dep.ensure_nodes(
            600.0
        )  # N nodes pick free ports at once: a lost race restarts a node
        if again:
            print(f"restarted SuperNodes of partitions {again} (port taken before they bound it)")
        out = dep.submit(cfg, os.path.join(work, "out"), timeout=600.0)  # flwr run under load
        res = dep.wait(out, 600.0 + 600.0 * rounds)
    if "error" in res:
        raise SystemExit(f"{'secure' if secure else 'plain'} run failed: {res['error']}")
    return [float(h["seconds"]) for h in res["history"]], stage_seconds(out / "server.log")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--task", choices=("linear", "lm"), default="linear")
    ap.add_argument(
        "--no-fork-exec", action="store_true", help="Flower's SuperExec (process per message)"
    )
    ap.add_argument("--only", choices=("plain", "secure"), default=None)
    ap.add_argument(
        "--min-free-gib",
        type=float,
        default=3.0,
        help="stop everything when the machine's available memory drops below this (Linux)",
    )
    ap.add_argument(
        "--node-poll",
        type=float,
        default=None,
        help="diagnosis: shorten the SuperNodes' hard-coded 3 s idle poll (patches Flower's loop)",
    )
    a = ap.parse_args()
    # started in the background by a non-interactive shell, SIGINT is ignored: make SIGINT / SIGTERM (and the
    # memory watchdog) unwind the `with` blocks so every Flower process is stopped
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    load0 = os.getloadavg()
    stop = threading.Event()
    if os.path.exists("/proc/meminfo"):
        threading.Thread(target=_watch_memory, args=(a.min_free_gib, stop), daemon=True).start()
    t0 = time.monotonic()
    times, stages = {}, {}
    arms = [("plain", False), ("secure", True)]
    with tempfile.TemporaryDirectory(prefix="privnlp-flbench-") as d:
        for name, secure in arms:
            if a.only and a.only != name:
                continue
            times[name], stages[name] = _run(
                a.clients,
                a.rounds,
                secure,
                os.path.join(d, name),
                a.task,
                not a.no_fork_exec,
                a.node_poll,
            )
    load1 = os.getloadavg()
    stop.set()
    med = {k: statistics.median(v[1:] if len(v) > 1 else v) for k, v in times.items()}
    print(
        f"clients={a.clients} (all selected) rounds={a.rounds} task={a.task} "
        f"superexec={'flower (process per message)' if a.no_fork_exec else 'privnlp fork-server'} "
        f"node-poll={a.node_poll or 'flower 3 s'} cpus={os.cpu_count()} load1 before/after={load0[0]:.1f}/{load1[0]:.1f} "
        f"wall={time.monotonic() - t0:.0f}s lowest MemAvailable={_LOWEST[0]:.1f} GiB "
        f"(of {_mem_available_gib():.1f} after)"
    )
    for k, v in times.items():
        print(
            f"{k:7s} round seconds {[round(x, 1) for x in v]}  median (after the first) {med[k]:.1f}"
        )
    for st, v in sorted(stages.get("secure", {}).items()):
        print(f"  SecAgg+ stage {st}: seconds per round {[round(x, 1) for x in v]}")
    if len(med) == 2:
        ratio = med["secure"] / med["plain"]
        print(
            f"ratio secure(TLS+auth+SecAgg+)/plain = {ratio:.2f}x (target <= 2x at 10 clients) -> "
            f"{'OK' if ratio <= 2.0 else 'OVER'}"
        )


if __name__ == "__main__":
    main()
