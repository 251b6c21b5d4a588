"""A fork-server SuperExec for privnlp's SuperNodes (issue #33 item 6: the round time of the secure deployment).

Flower's SuperNode hands every message to a fresh ``flwr-clientapp`` process (its SuperExec's subprocess
executor: ``Popen(["flwr-clientapp", "--token", ...])``). Each such process imports flwr (~1 s of CPU on an idle
core), and a SecAgg+ round sends four messages per node instead of one: on 2 shared cores, 10 nodes' imports
alone took ~12 s of wall time per stage, most of a SecAgg+ round. This module is the SuperExec of a SuperNode
started with ``--isolation process``: the same loop as ``flower-superexec`` (Flower's
:func:`~flwr.supercore.superexec.run_superexec.run_superexec`: acquire a task from the SuperNode's Runtime API,
launch it), with an executor that launches a ClientApp task by ``os.fork()`` of this process, which imported
flwr, the SecAgg+ mod, numpy and ``cryptography`` once. The child runs Flower's own
:func:`~flwr.supernode.runtime.run_clientapp.run_clientapp` with the task's token, exactly what
``flwr-clientapp`` runs, then exits: one process per message as before (no state survives a message, the
ClientApp module is loaded per message), only the interpreter start-up and imports are shared.

Randomness after ``fork``: a child inherits its parent's memory. Python's ``random`` reseeds itself in a forked
child; numpy's global generator does not, so the child reseeds it from OS entropy (a fresh ``flwr-clientapp``
seeds it from OS entropy too; Flower's SecAgg+ quantiser draws from it, privnlp makes that quantiser the identity,
see flower.py). privnlp's noise comes from :func:`privnlp.core.rng.secure_numpy` (OS entropy at every call) and
Flower's keys from ``cryptography`` (OS entropy): nothing secret is drawn in the parent.

Any other task type (none reaches a SuperNode today) goes to Flower's subprocess executor. The poll interval of
the task loop is Flower's ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL`` (privnlp's launcher sets 0.2 s; Flower's default
is 1 s).

    python privnlp/mechanisms/federated/flower_exec.py --runtime-api-address 127.0.0.1:PORT --insecure \
        --parent-pid SUPERNODE_PID

(:func:`~privnlp.mechanisms.federated.flower.start_supernode` runs this file by path, so that its package, which
imports torch, is not loaded.) flwr is imported at the top: only this process and the tests load this module;
it imports nothing from privnlp.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sys
import time

import flwr.client.mod  # noqa: F401  (pre-imported for the children: secaggplus_mod)
import flwr.compat.common.recorddict_compat  # noqa: F401  (the ClientApp's SecAgg+ layout)
import numpy as np
from flwr.supercore.constant import ExecutorType, TaskType
from flwr.supercore.superexec import run_superexec as _rs
from flwr.supercore.superexec.executor import LaunchResult
from flwr.supercore.superexec.executor.subprocess_executor import SubprocessExecutor
from flwr.supercore.superexec.executor.types import ExecutionSpec
from flwr.supercore.tls import validate_and_resolve_root_certificates
from flwr.supernode import start_client_internal as _sci
from flwr.supernode.cli.flower_supernode import flower_supernode
from flwr.supernode.runtime.run_clientapp import run_clientapp

__all__ = ["ForkExecutor", "main", "run_node", "DEFAULT_TASK_POLL_INTERVAL"]

DEFAULT_TASK_POLL_INTERVAL = "0.2"  # seconds between AcquireTask calls (Flower's default: 1 s)


class ForkExecutor(SubprocessExecutor):
    """Flower's subprocess executor, except that a ClientApp task runs in a ``fork`` of this process."""

    def __init__(self) -> None:
        self.children: set[int] = set()

    def launch(self, spec: ExecutionSpec) -> LaunchResult:
        if spec.task_type != TaskType.CLIENT_APP:
            return super().launch(spec)
        certificates = validate_and_resolve_root_certificates(
            spec.root_certificates_path, spec.insecure
        )
        pid = os.fork()
        if pid == 0:  # the child: exactly what `flwr-clientapp --token ...` runs, then exit
            code = 0
            t0 = time.perf_counter()
            try:
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
                    signal.signal(sig, signal.SIG_DFL)
                np.random.seed(int.from_bytes(os.urandom(4), "little"))  # not the parent's state
                run_clientapp(
                    runtime_api_address=spec.runtime_api_address,
                    token=spec.token,
                    insecure=spec.insecure,
                    certificates=certificates,
                    parent_pid=spec.parent_pid,
                    runtime_dependency_install=spec.runtime_dependency_install,
                )
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:  # noqa: BLE001 - the child must never return into the parent's loop
                code = 1
            finally:
                ru = resource.getrusage(resource.RUSAGE_SELF)
                print(  # one line per message in the SuperNode's log: where a round's time goes
                    f"privnlp fork-exec: task {spec.task_id} exit {code} wall "
                    f"{time.perf_counter() - t0:.2f}s cpu {ru.ru_utime + ru.ru_stime:.2f}s",
                    flush=True,
                )
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self.children.add(pid)
        return LaunchResult.accepted()

    def reconcile(self) -> None:
        """Reap finished children (called by the task loop before every poll)."""
        for pid in list(self.children):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.children.discard(pid)


def _executor(executor_type: ExecutorType, *_: object, **__: object) -> ForkExecutor:
    return ForkExecutor()


class _CappedSleep:
    """``time`` with ``sleep`` capped at ``poll`` seconds (every other attribute is the real module's)."""

    def __init__(self, poll: float) -> None:
        self.poll = float(poll)

    def sleep(self, seconds: float) -> None:
        time.sleep(min(float(seconds), self.poll))

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)


def run_node(poll: float, argv: list[str]) -> None:
    """``flower-supernode ARGV`` with its idle poll shortened to ``poll`` seconds (benchmark diagnosis, opt-in).

    Flower's SuperNode loop sleeps a hard-coded 3 s whenever the SuperLink had no message for it, and 0.5 s
    between checks for a ClientApp's reply (``flwr.supernode.start_client_internal``; no option sets either):
    every round trip of a round can wait up to 3 s before a node even sees its message, and a SecAgg+ round has
    four. This replaces that module's ``time`` by one whose ``sleep`` is capped at ``poll``: more requests to
    the SuperLink (N / poll per second) for less latency. It patches a private loop of Flower, so it is off
    unless asked for (``start_supernode(node_poll=...)``)."""
    if not (0.05 <= poll <= 3.0):
        raise SystemExit(f"--poll must be in [0.05, 3] seconds; got {poll}")
    if not hasattr(
        _sci, "time"
    ):  # Flower changed its loop: refuse rather than silently not patching
        raise SystemExit(
            "flwr.supernode.start_client_internal has no 'time' to patch (Flower changed)"
        )
    _sci.time = _CappedSleep(poll)
    sys.argv = ["flower-supernode", *argv]
    flower_supernode()


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["node"]:  # node --poll SECONDS -- FLOWER-SUPERNODE-ARGS
        ap = argparse.ArgumentParser(description="flower-supernode with a shorter idle poll")
        ap.add_argument("--poll", type=float, required=True)
        a, rest = ap.parse_known_args(argv[1:])
        run_node(a.poll, [x for x in rest if x != "--"])
        return
    ap = argparse.ArgumentParser(
        description="privnlp's fork-server SuperExec for a Flower SuperNode"
    )
    ap.add_argument("--runtime-api-address", required=True)
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--root-certificates", default=None)
    ap.add_argument("--parent-pid", type=int, default=None)
    a = ap.parse_args(argv)
    os.environ.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", DEFAULT_TASK_POLL_INTERVAL)
    # Flower's task loop, with this module's executor (run_superexec looks the factory up by this name)
    _rs.get_executor = _executor
    _rs.run_superexec(
        runtime_api_address=a.runtime_api_address,
        insecure=a.insecure,
        root_certificates_path=a.root_certificates,
        parent_pid=a.parent_pid,
    )


if __name__ == "__main__":
    main()
