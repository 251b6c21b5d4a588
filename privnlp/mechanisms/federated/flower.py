"""Real Flower deployment (flwr >= 1.41 Message API): the same FedAvg / DP-FedAvg as a ServerApp + ClientApp.

Paper: ``../shared/papers/unintended-memorization-under-fl.txt`` (DP-FedAvg, Algorithm 1). DP lives on
the *server* (the ServerApp clips every reply to S, averages with uniform weights over the fixed
denominator m, adds N(0, (zS/m)^2) once and fails closed when a selected node does not reply); the
clients also clip (Algorithm 1's ``UserUpdate``) but are not trusted to. Flower's own DP strategies
weight by ``num-examples`` and tolerate missing replies, so they are not used.

Processes (on 127.0.0.1 in the tests; across machines see the README section):

* ``flower-superlink --ssl-certfile ... --ssl-keyfile ... --ssl-ca-certfile ... [--enable-supernode-auth] --port P``
  (Fleet + Control + runtime HTTP API on one port in 1.41; ``--insecure`` only on loopback or when the caller
  explicitly allows it, issue #33; with authentication every key of the list is registered first,
  :func:`register_nodes`),
* ``flower-supernode --root-certificates CA [--auth-supernode-private-key KEY] --superlink HOST:P --port Q_i
  --node-config "partition-id=i num-partitions=n" --isolation process`` and its SuperExec, privnlp's fork-server
  (:mod:`.flower_exec`: every ClientApp message runs in a fork of a process that imported flwr once),
* ``flwr run APP_DIR local`` with ``FLWR_HOME`` holding ``config.toml`` that names the SuperLink; the
  generated ``APP_DIR`` (:func:`write_app`) holds a ``pyproject.toml`` whose components point at
  :data:`server_app` / :data:`client_app` below (privnlp must be importable by the SuperLink's and the
  SuperNodes' Python).

Faults (issue #20): users are partitions, mapped to live SuperNodes by a ``query`` probe (a restarted
SuperNode rejoins under a new node id); a selected node that does not reply within ``round-timeout`` fails the
DP-FedAvg round closed (``round-retries`` re-runs it with the same selected users after waiting ``node-wait`` for
a replacement; client-DP replies of the discarded attempt are charged); the server checkpoints round, model and
ledger to ``out-dir/server_checkpoint.pt`` before each new model leaves it, and a restarted ServerApp resumes from
there (epsilon continues; take-over and writes hold one flock, so a stale ServerApp cannot release a round). Privacy noise and client selection come from OS
entropy; the run-config ``seed`` reaches every SuperNode and seeds only non-private randomness (issue #15).
:class:`LoopbackDeployment` runs the processes on 127.0.0.1 for tests and demos; :func:`stop` ends a process,
its process group and its descendants.

Aggregation (issue #33): ``aggregation = "central"`` (the ServerApp clips, averages and adds the noise: the
guarantee against the server rests on trusting it) or ``"secagg"`` (Flower's SecAggPlusWorkflow +
``secaggplus_mod``; each client adds its share of distributed Skellam noise, :mod:`.secagg`; the server learns only
the noisy sum of the survivors). The transport (TLS, node authentication) is recorded in the result and the claim.

flwr and torch are imported at the top: only ``privnlp fl`` commands, the ServerApp process, the ClientApp of a
torch task and the tests load this module (the generated ClientApp module and :mod:`.flower_exec` do not).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import math
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privnlp.accounting.ledger import DPLedger
from privnlp.core.claims import PrivacyClaim
from privnlp.core.errors import InvalidArgument, MissingDependency, ProtocolError
from privnlp.core.rng import secure_numpy, secure_torch
from privnlp.data import generate_corpus
from privnlp.models import train_bpe_tokenizer

try:
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.common import FitIns as LegacyFitIns
    from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.compat.grid_client_proxy import GridClientProxy
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.strategy import Strategy
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
    from flwr.server.workflow.constant import Key as WorkflowKey
    from flwr.serverapp import ServerApp
except ImportError as e:  # pragma: no cover - the "fl" extra is not installed
    raise MissingDependency("flwr", extra="fl") from e

from .aggregation import ServerOptimizer, global_norm
from .client import (
    ClientData,
    FitIns,
    FitRes,
    Task,
    lm_client_data,
    lm_task,
    local_update,
    trainable_state,
)
from .mechanisms import DPFedAvg, FedAvg, _require_client_dp_metrics
from .partition import partition_natural
from .secagg import (
    SECAGG_ACCOUNTANT,
    SkellamPlan,
    decode_sum,
    secagg_adversary_bounds,
    server_bound,
)
from .simulator import round_seeds, select_clients
from .tls import (
    TlsFiles,
    Transport,
    check_node_key,
    check_root_certificate,
    check_server_tls,
    is_loopback,
    make_certs,
    make_node_keys,
    read_key_list,
)

__all__ = [
    "DEFAULT_RUN_CONFIG",
    "write_app",
    "free_port",
    "flower_env",
    "start_superlink",
    "start_supernode",
    "register_nodes",
    "submit_run",
    "wait_for_result",
    "stop",
    "make_server_app",
    "make_client_app",
    "client_train",
    "run_loopback",
    "load_checkpoint",
    "CHECKPOINT_NAME",
    "LoopbackDeployment",
    "clear_result",
]

DEFAULT_RUN_CONFIG: dict[str, Any] = {
    "mechanism": "dp_fedavg",
    "num-server-rounds": 2,
    "num-clients": 3,
    "clients-per-round": 3,
    "sampling": "fixed",
    "clip-norm": 0.5,
    "noise-multiplier": 1.0,
    "delta": 1e-3,
    "local-epochs": 1.0,
    "batch-size": 8,
    "lr": 0.05,
    "task": "linear",
    "seed": 0,
    "round-timeout": 60.0,
    "node-wait": 60.0,
    "out-dir": "",
    "client-noise-multiplier": -1.0,
    "client-max-grad-norm": 0.0,
    "client-delta": 1e-5,
    "seeded-noise": False,
    "round-retries": 0,
    "resume": True,
    # issue #33: "central" = the server adds the noise (trusted); "secagg" = distributed Skellam over SecAgg+
    "aggregation": "central",
    "secagg-levels": 1024,
    "secagg-bits": 32,
    "secagg-min-survivors": 0,
    # recorded in the result and the claim (set by the launcher; the ServerApp cannot see the sockets)
    "transport-tls": False,
    "transport-node-auth": False,
    "transport-authenticated-nodes": 0,
    "transport-host": "127.0.0.1",
    # tests / audits: write every reply the ServerApp receives to out-dir/server_view.pkl (what the server sees)
    "record-server-view": False,
}

# Run-config keys a checkpoint must agree with before a server resumes from it (everything that changes the
# mechanism, the population or the accounting; ``num-server-rounds`` may grow, timeouts may change).
_CHECKPOINT_KEYS = (
    "mechanism",
    "num-clients",
    "clients-per-round",
    "sampling",
    "clip-norm",
    "noise-multiplier",
    "delta",
    "local-epochs",
    "batch-size",
    "lr",
    "task",
    "seed",
    "client-noise-multiplier",
    "client-max-grad-norm",
    "client-delta",
    "seeded-noise",
    "aggregation",
    "secagg-levels",
    "secagg-bits",
    "secagg-min-survivors",
)
CHECKPOINT_NAME = "server_checkpoint.pt"

_APP_MODULE = '''"""Generated by privnlp: the Flower ServerApp of privnlp's FedAvg / DP-FedAvg."""
from privnlp.mechanisms.federated.flower import make_server_app

server_app = make_server_app()
'''

# The ClientApp module imports neither torch nor privnlp at module level: Flower 1.41 starts a fresh
# `flwr-clientapp` process for every message, and importing torch + privnlp costs ~6 s of CPU per process
# (3 nodes x 2 rounds on 2 shared cores dominated the loopback test). The ``linear`` smoke-test task runs
# plain minibatch SGD on least squares in numpy; every other task (``lm``) and client DP-SGD go through
# privnlp's ``local_update`` (torch), imported on demand.
_CLIENT_MODULE = '''"""Generated by privnlp: the Flower ClientApp (light imports; see privnlp.mechanisms.federated.flower)."""
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

SECAGG_KEY = "secaggplus_configs"


def secagg_when_asked(msg, ctxt, call_next):
    """SecAgg+ (issue #33) for the messages of a SecAgg+ round; the central mode's messages pass through."""
    if msg.metadata.message_type == "train" and SECAGG_KEY in msg.content.config_records:
        from flwr.client.mod import secaggplus_mod  # only in SecAgg+ rounds: every message is a new process

        return secaggplus_mod(msg, ctxt, call_next)
    return call_next(msg, ctxt)


client_app = ClientApp(mods=[secagg_when_asked])


def _secagg_module():
    """privnlp/mechanisms/federated/secagg.py loaded by path: importing it through its package would import
    torch (~3 s per ClientApp process); the file itself needs numpy and privnlp.core only."""
    import importlib.util
    import os
    import sys

    import privnlp

    name = "privnlp_secagg_light"
    if name not in sys.modules:
        path = os.path.join(os.path.dirname(privnlp.__file__), "mechanisms", "federated", "secagg.py")
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def _linear_delta(cfg, pid, start, ins):
    import numpy as np

    g = np.random.default_rng([int(cfg.get("seed", 0)), pid])
    x = g.standard_normal((16, 8)).astype(np.float32)
    y = x @ np.linspace(-1, 1, 8, dtype=np.float32)
    w, b = start["weight"].copy(), start["bias"].copy()
    lr, bs = float(ins.get("lr", 0.05)), int(ins.get("batch-size", 8))
    steps = max(1, int(round(float(ins.get("local-epochs", 1.0)) * -(-len(x) // bs))))
    rs = np.random.default_rng(int(ins.get("seed", 0)))
    losses = []
    for _ in range(steps):
        i = rs.choice(len(x), size=min(bs, len(x)), replace=False)
        err = x[i] @ w[0] + b[0] - y[i]
        losses.append(float(np.mean(err ** 2)))
        w[0] -= lr * (2.0 / len(i)) * (err @ x[i])
        b[0] -= lr * 2.0 * float(np.mean(err))
    delta = {"weight": (w - start["weight"]).astype(np.float32), "bias": (b - start["bias"]).astype(np.float32)}
    return delta, {"num-examples": float(len(x)), "loss": float(np.mean(losses)), "local-steps": float(steps)}


@client_app.train()
def train(msg, context):
    import numpy as np

    cfg = dict(context.run_config)
    if "fitins.parameters" in msg.content.array_records:  # SecAgg+ round (legacy FitIns inside secaggplus_mod)
        from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
        from flwr.compat.common import recorddict_compat as compat

        fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
        ins = dict(fitins.config)
        names = str(ins["param-names"]).split(",")
        start = {k: np.asarray(v, dtype=np.float32) for k, v in zip(names, parameters_to_ndarrays(fitins.parameters))}
        if cfg.get("task", "linear") == "linear" and float(ins.get("dp-max-grad-norm", 0) or 0) <= 0:
            delta, _ = _linear_delta(cfg, int(context.node_config.get("partition-id", 0)), start, ins)
        else:
            from privnlp.mechanisms.federated.flower import client_delta

            delta, _ = client_delta(start, ins, context)
        from privnlp.core.rng import secure_numpy

        sa = _secagg_module()
        enc = sa.encode_update([delta[k] for k in names], sa.SkellamPlan.from_config(ins), rng=secure_numpy())
        # no metrics: a client's loss describes its own data, and the server must see only the sum
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(enc), 1, {})
        return Message(content=compat.fitres_to_recorddict(res, keep_input=False), reply_to=msg)
    ins = dict(msg.content["config"])
    if cfg.get("task", "linear") != "linear" or float(ins.get("dp-max-grad-norm", 0) or 0) > 0:
        from privnlp.mechanisms.federated.flower import client_train

        return client_train(msg, context)
    pid = int(context.node_config.get("partition-id", 0))
    start = {k: np.asarray(v.numpy(), dtype=np.float32) for k, v in msg.content["arrays"].items()}
    delta, metrics = _linear_delta(cfg, pid, start, ins)
    content = RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in delta.items()}),
                          "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


@client_app.query()
def query(msg, context):
    """Discovery: which user (partition) this SuperNode serves; the ServerApp maps users to live nodes."""
    from flwr.app import ConfigRecord

    nc = context.node_config
    rec = ConfigRecord({"partition-id": int(nc.get("partition-id", -1)), "num-partitions": int(nc.get("num-partitions", 0))})
    return Message(content=RecordDict({"config": rec}), reply_to=msg)
'''


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(float(v)) if isinstance(v, float) else str(v)
    return json.dumps(str(v))


def write_app(app_dir: str | os.PathLike, run_config: Mapping[str, Any] | None = None) -> Path:
    """Write a Flower App folder (``pyproject.toml`` + ``privnlp_flower_app.py``) for ``flwr run``."""
    d = Path(app_dir)
    d.mkdir(parents=True, exist_ok=True)
    cfg = dict(DEFAULT_RUN_CONFIG)
    for k, v in (run_config or {}).items():
        if k not in DEFAULT_RUN_CONFIG:
            raise InvalidArgument(
                f"run_config: unknown key {k!r}; known: {sorted(DEFAULT_RUN_CONFIG)}"
            )
        cfg[k] = v
    lines = [
        "[build-system]",
        'requires = ["hatchling"]',
        'build-backend = "hatchling.build"',
        "",
        "[project]",
        'name = "privnlp-fl"',
        'version = "1.0.0"',
        'description = "privnlp FedAvg / DP-FedAvg"',
        'license = "Apache-2.0"',
        "dependencies = []",
        "",
        "[tool.hatch.build.targets.wheel]",
        'packages = ["."]',
        "",
        "[tool.flwr.app]",
        'publisher = "privnlp"',
        "",
        "[tool.flwr.app.components]",
        'serverapp = "privnlp_flower_app:server_app"',
        'clientapp = "privnlp_flower_client:client_app"',
        "",
        "[tool.flwr.app.config]",
    ]
    lines += [f"{k} = {_toml_value(v)}" for k, v in cfg.items()]
    (d / "pyproject.toml").write_text("\n".join(lines) + "\n")
    (d / "privnlp_flower_app.py").write_text(_APP_MODULE)
    (d / "privnlp_flower_client.py").write_text(_CLIENT_MODULE)
    return d


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def flower_env(
    flwr_home: str | os.PathLike,
    superlink: str | None = None,
    *,
    root_certificates: str | os.PathLike | None = None,
) -> dict[str, str]:
    """Environment for Flower processes: telemetry off, offline, ``FLWR_HOME`` with a ``config.toml``
    naming the SuperLink connection ``local``: TLS checked against ``root_certificates`` (the CA), or
    ``insecure = true`` without it (loopback / the labelled demo only: :func:`start_superlink` refuses
    anything else)."""
    home = Path(flwr_home)
    home.mkdir(parents=True, exist_ok=True)
    if superlink is not None:
        sec = (
            f"root-certificates = {json.dumps(str(Path(root_certificates).resolve()))}\n"
            if root_certificates is not None
            else "insecure = true\n"
        )
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "{superlink}"\n{sec}'
        )
    env = dict(
        os.environ,
        FLWR_HOME=str(home),
        FLWR_TELEMETRY_ENABLED="0",
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
        PYTHONUNBUFFERED="1",
    )
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return env


def _exe(name: str) -> str:
    p = Path(sys.executable).parent / name
    if p.exists():
        return str(p)
    found = shutil.which(name)
    if not found:
        raise MissingDependency("flwr", extra="fl", hint=f"the `{name}` executable was not found")
    return found


def _host_of(address: str) -> str:
    host, sep, _ = address.rpartition(":")
    return host if sep else address


def _refuse_insecure(host: str, allow_insecure: bool, what: str) -> None:
    if not allow_insecure and not is_loopback(host):
        raise InvalidArgument(
            f"{what}: {host!r} is not a loopback address and no TLS certificates were given; an "
            "eavesdropper on the network would read every model update. Pass the certificates (make test "
            "ones with `privnlp fl certs DIR`) or, knowingly, --allow-insecure-network"
        )


def start_superlink(
    port: int,
    *,
    env: Mapping[str, str],
    host: str = "127.0.0.1",
    log: Any = None,
    extra: tuple | list = (),
    tls: TlsFiles | None = None,
    node_auth: bool = False,
    allow_insecure: bool = False,
) -> subprocess.Popen:
    """``flower-superlink`` on ``host:port``: with TLS (``tls``, checked first: present, matching, signed by the
    CA, not expired, naming ``host``) or ``--insecure`` (refused on a non-loopback ``host`` unless
    ``allow_insecure``); ``node_auth`` turns on SuperNode authentication (needs TLS; register the keys with
    :func:`register_nodes`). No runtime dependency installation; ``extra`` flags."""
    if tls is None:
        if node_auth:
            raise InvalidArgument("node_auth: SuperNode authentication needs TLS certificates")
        _refuse_insecure(host, allow_insecure, "host")
        sec = ["--insecure"]
    else:
        check_server_tls(tls, None if host in ("0.0.0.0", "::") else host)
        sec = [
            "--ssl-certfile",
            str(tls.certfile),
            "--ssl-keyfile",
            str(tls.keyfile),
            "--ssl-ca-certfile",
            str(tls.ca_certfile),
        ]
        if node_auth:
            sec.append("--enable-supernode-auth")
    return subprocess.Popen(
        [
            _exe("flower-superlink"),
            *sec,
            "--host",
            host,
            "--port",
            str(port),
            "--disable-runtime-dependency-installation",
            *extra,
        ],
        env=dict(env),
        stdout=log or subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def start_supernode(
    superlink: str,
    partition_id: int,
    num_partitions: int,
    port: int,
    *,
    env: Mapping[str, str],
    host: str = "127.0.0.1",
    log: Any = None,
    root_certificates: str | os.PathLike | None = None,
    auth_key: str | os.PathLike | None = None,
    allow_insecure: bool = False,
    fork_exec: bool = True,
    node_poll: float | None = None,
) -> subprocess.Popen:
    """``flower-supernode`` connected to ``superlink`` serving partition ``partition_id``: TLS checked against
    ``root_certificates`` (the CA), or ``--insecure`` (refused for a non-loopback SuperLink unless
    ``allow_insecure``); ``auth_key``: the node's OpenSSH EC private key (SuperNode authentication).

    ``fork_exec`` (default): the SuperNode runs with ``--isolation process`` and privnlp's fork-server SuperExec
    (:mod:`.flower_exec`; exits with the node; :func:`stop` of the node stops it) launches every ClientApp message as a
    ``fork`` of a process that imported flwr once, instead of Flower's fresh ``flwr-clientapp`` process per
    message; ``False``: Flower's own SuperExec (subprocess isolation).
    ``node_poll`` (seconds, opt-in, benchmark diagnosis): the SuperNode's hard-coded 3 s idle poll shortened by
    :func:`.flower_exec.run_node` (patches Flower's private loop; ``None``: Flower's loop as shipped)."""
    if root_certificates is None:
        if auth_key is not None:
            raise InvalidArgument(
                "auth_key: SuperNode authentication needs TLS (root certificates)"
            )
        _refuse_insecure(_host_of(superlink), allow_insecure, "superlink")
        sec = ["--insecure"]
    else:
        sec = ["--root-certificates", str(check_root_certificate(root_certificates))]
        if auth_key is not None:
            sec += ["--auth-supernode-private-key", str(check_node_key(auth_key))]
    exe = (
        [_exe("flower-supernode")]
        if node_poll is None
        else [
            sys.executable,
            "-c",
            _RUN_BY_PATH,
            _FLOWER_EXEC,
            "node",
            "--poll",
            str(node_poll),
            "--",
        ]
    )
    node = subprocess.Popen(
        [
            *exe,
            *sec,
            "--superlink",
            superlink,
            "--host",
            host,
            "--port",
            str(port),
            "--node-config",
            f"partition-id={int(partition_id)} num-partitions={int(num_partitions)}",
            *(["--isolation", "process"] if fork_exec else []),
        ],
        env=dict(env),
        stdout=log or subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    if fork_exec:
        # the Runtime API between a SuperNode and its SuperExec is local plain HTTP, as Flower's own SuperExec
        # uses it in subprocess isolation; stop() ends it (and its children) with the node, and it exits by
        # itself when the node dies (--parent-pid)
        try:
            node.superexec = subprocess.Popen(  # type: ignore[attr-defined]  # stop() waits for it too
                [
                    sys.executable,
                    "-c",
                    _RUN_BY_PATH,
                    _FLOWER_EXEC,
                    "--runtime-api-address",
                    f"{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{int(port)}",
                    "--insecure",
                    "--parent-pid",
                    str(node.pid),
                ],
                env=dict(env),
                stdout=log or subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except BaseException:
            stop([node], grace=1.0)
            raise
    return node


# runs a file as __main__ without importing its package (privnlp.mechanisms.federated's __init__ imports torch:
# ~3 s and ~250 MB per SuperNode's SuperExec for nothing; flower_exec.py needs only flwr and numpy)
_RUN_BY_PATH = (
    "import runpy, sys; path = sys.argv[1]; sys.argv = [path, *sys.argv[2:]]; "
    "runpy.run_path(path, run_name='__main__')"
)
_FLOWER_EXEC = str(Path(__file__).with_name("flower_exec.py"))


def register_nodes(
    keys: list[str], *, env: Mapping[str, str], work_dir: str | os.PathLike, timeout: float = 60.0
) -> list[int]:
    """Register every public key (OpenSSH lines, :func:`~.tls.read_key_list`) with the SuperLink of ``env``'s
    ``local`` connection (``flwr supernode register``); only these SuperNodes can then activate. Returns the
    node ids."""
    d = Path(work_dir) / "registered_keys"
    d.mkdir(parents=True, exist_ok=True)
    ids = []
    for i, key in enumerate(keys):
        f = d / f"key-{i}.pub"
        f.write_text(key + "\n")
        r = subprocess.run(
            [_exe("flwr"), "supernode", "register", str(f), "local", "--format", "json"],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if r.returncode != 0:
            raise ProtocolError(
                f"flwr supernode register failed for key {i} of the list (rc={r.returncode}): "
                f"{(r.stdout + r.stderr)[-1000:]}"
            )
        try:
            ids.append(int(json.loads(r.stdout).get("node-id", 0)))
        except (ValueError, AttributeError):
            ids.append(0)
    return ids


def submit_run(
    app_dir: str | os.PathLike,
    *,
    env: Mapping[str, str],
    run_config: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess:
    """``flwr run APP_DIR local`` (returns once the run is submitted; the ServerApp writes ``out-dir``)."""
    cmd = [_exe("flwr"), "run", str(app_dir), "local"]
    if run_config:
        cmd += ["--run-config", " ".join(f"{k}={_toml_value(v)}" for k, v in run_config.items())]
    return subprocess.run(cmd, env=dict(env), capture_output=True, text=True, timeout=timeout)


def wait_for_result(
    out_dir: str | os.PathLike, *, timeout: float, procs: tuple = ()
) -> dict[str, Any]:
    """Wait for the ServerApp's ``result.json`` (or ``error.json``) in ``out_dir``."""
    out = Path(out_dir)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in ("result.json", "error.json"):
            p = out / name
            if p.exists():
                return json.loads(p.read_text())
        for pr in procs:
            if pr.poll() is not None:
                raise ProtocolError(
                    f"a Flower process exited early (rc={pr.returncode}): {pr.args}"
                )
        time.sleep(0.25)
    raise TimeoutError(f"no result in {out} after {timeout:.0f}s")


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from ``/proc``; psutil elsewhere). Flower 1.41/1.42 starts ``flower-superexec``
    in a session of its own, so killing the SuperLink's process group misses it and its ``flwr-serverapp``."""
    proc = Path("/proc")
    if not proc.is_dir():  # pragma: no cover - not Linux
        try:
            import psutil

            return [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except Exception:  # noqa: BLE001
            return []
    kids: dict[int, list[int]] = {}
    for d in proc.iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphaned zombie is never reaped where PID 1 is not an init)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return not Path("/proc").is_dir()


def stop(procs: Any, grace: float = 3.0, sig: int = signal.SIGTERM) -> None:
    """Stop processes, their process groups and every descendant (SuperLink/SuperNode spawn SuperExec, ServerApp
    and ClientApp processes): ``sig`` first, SIGKILL to whatever still runs after ``grace`` seconds; bounded."""
    procs = [p for p in procs if p is not None]
    procs += [p.superexec for p in procs if getattr(p, "superexec", None) is not None]
    tree = {d for p in procs if p.poll() is None for d in _descendants(p.pid)}
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, sig)
    for d in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(d, sig)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)
    while tree and time.monotonic() < deadline:
        tree = {d for d in tree if _running(d)}
        time.sleep(0.05)
    for d in tree:
        if _running(d):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(d, signal.SIGKILL)


# ============================================================================ tasks shared by both apps
def _task_and_data(
    cfg: Mapping[str, Any], partition_id: int, num_partitions: int
) -> tuple[Any, Any]:

    seed = int(cfg.get("seed", 0))
    if cfg.get("task", "linear") == "linear":

        def factory() -> Any:
            g = torch.Generator().manual_seed(seed)
            m = torch.nn.Linear(8, 1)
            with torch.no_grad():
                m.weight.copy_(torch.randn(m.weight.shape, generator=g))
                m.bias.zero_()
            return m

        def loss(model: Any, batch: Any) -> Any:
            return (model(batch[0]).squeeze(-1) - batch[1]) ** 2

        g = torch.Generator().manual_seed(seed * 1000 + partition_id + 1)
        w = torch.linspace(-1, 1, 8)
        x = torch.randn(16, 8, generator=g)
        return Task(factory, loss), ClientData((x, x @ w))
    if cfg.get("task") == "lm":
        corpus = generate_corpus(n_users=num_partitions, records_per_user=8, seed=seed)
        tok = train_bpe_tokenizer(corpus.texts(), vocab_size=300)
        part = partition_natural(corpus.records)
        cid = list(part.clients)[partition_id % len(part.clients)]
        data = lm_client_data(tok, {cid: [r.text for r in part.clients[cid]]}, max_length=32)[cid]
        return lm_task(tok), data
    if (
        cfg.get("task") == "pii_tagger"
    ):  # the PII tagger (issue #19): privnlp.mechanisms.pii.federated
        from privnlp.mechanisms.pii.federated import flower_task_and_data

        return flower_task_and_data(cfg, partition_id, num_partitions)
    raise InvalidArgument(
        f"run config task must be 'linear', 'lm' or 'pii_tagger'; got {cfg.get('task')!r}"
    )


def _mechanism(cfg: Mapping[str, Any]) -> Any:

    common = dict(
        clients_per_round=int(cfg["clients-per-round"])
        if cfg.get("sampling", "fixed") == "fixed"
        else float(cfg["clients-per-round"]),
        sampling=str(cfg.get("sampling", "fixed")),
        local_epochs=float(cfg["local-epochs"]),
        local_batch_size=int(cfg["batch-size"]),
        local_lr=float(cfg["lr"]),
    )
    if (
        float(cfg.get("client-max-grad-norm", 0.0)) > 0
    ):  # client DP-SGD (record level): privnlp's local_update
        common.update(
            client_noise_multiplier=float(cfg["client-noise-multiplier"]),
            client_max_grad_norm=float(cfg["client-max-grad-norm"]),
            client_delta=float(cfg.get("client-delta", 1e-5)),
        )
    if cfg.get("mechanism") == "fedavg":
        return FedAvg(**common)
    if cfg.get("mechanism") == "dp_fedavg":
        return DPFedAvg(
            clip_norm=float(cfg["clip-norm"]),
            noise_multiplier=float(cfg["noise-multiplier"]),
            delta=float(cfg["delta"]),
            **common,
        )
    raise InvalidArgument(
        f"run config mechanism must be 'fedavg' or 'dp_fedavg'; got {cfg.get('mechanism')!r}"
    )


def _exchange(grid: Any, msgs: list, timeout: float, poll: float = 0.25) -> list:
    """Push ``msgs`` and pull their replies until all came back or ``timeout`` passed.

    Like ``grid.send_and_receive`` but polling every ``poll`` s (Flower's polls every 3 s, which alone made a
    round of the tiny smoke task take ~6 s)."""
    if not msgs:
        return []
    pending = set(grid.push_messages(msgs))
    end = time.monotonic() + timeout
    out: list = []
    while pending:
        got = list(grid.pull_messages(list(pending)))
        out.extend(got)
        pending.difference_update(m.metadata.reply_to_message_id for m in got)
        if not pending or time.monotonic() >= end:
            break
        time.sleep(poll)
    return out


class _Nodes:
    """The ServerApp's view of the SuperNodes of one run: partition of each probed node, pending probes,
    nodes excluded for the rest of the run (they missed a round, or answered with an error)."""

    def __init__(self) -> None:
        self.known: dict[int, tuple[int, float]] = {}
        self.probed: set[int] = set()
        self.pending: dict[str, int] = {}  # probe message id -> node id
        self.excluded: set[int] = set()

    def exclude(self, nid: int) -> None:
        self.excluded.add(nid)
        self.known.pop(nid, None)


def _discover(
    grid: Any, cfg: Mapping[str, Any], n: int, nodes: _Nodes, *, deadline: float, log: Any
) -> dict[int, int]:
    """Map every user (partition ``0..n-1``) to a live SuperNode; wait (until ``deadline``) for missing ones.

    Every new node id gets a ``query`` message (the ClientApp answers its ``partition-id``); answers are
    pulled as they come, so a silent node (dead, or a killed node that the SuperLink lists as online until its
    heartbeats expire, ~60 s in Flower 1.42) delays nothing as long as every partition has a live node. A
    restarted SuperNode registers under a new node id and is probed afresh. Two live nodes claiming the same
    partition: the most recent answer serves it (a user counts once).
    """

    while True:
        online = {int(x) for x in grid.get_node_ids()}
        for nid in [
            k for k in nodes.probed if k not in online
        ]:  # went offline: probe again if it comes back
            nodes.known.pop(nid, None)
            nodes.probed.discard(nid)
        new = sorted(online - nodes.probed - nodes.excluded)
        if new:
            msgs = [
                Message(
                    content=RecordDict({"config": ConfigRecord({"probe": 1})}),
                    dst_node_id=nid,
                    message_type="query",
                )
                for nid in new
            ]
            nodes.pending.update(
                zip(grid.push_messages(msgs), new)
            )  # ids come back in the messages' order
            nodes.probed.update(new)
            log(f"probing new nodes {new}")
        if nodes.pending:
            for m in grid.pull_messages(list(nodes.pending)):
                # an error reply comes from the SuperLink (src_node_id 1), not from the probed node
                nid = nodes.pending.pop(m.metadata.reply_to_message_id, int(m.metadata.src_node_id))
                if m.has_error():
                    log(f"node {nid}: probe error {m.error}; excluded")
                    nodes.exclude(nid)
                    continue
                c = m.content["config"]
                pid, parts = int(c["partition-id"]), int(c["num-partitions"])
                if parts != n or not 0 <= pid < n:
                    log(
                        f"node {nid}: partition {pid} of {parts} does not fit num-clients={n}; excluded"
                    )
                    nodes.exclude(nid)
                    continue
                if nid not in nodes.excluded:
                    nodes.known[nid] = (pid, time.monotonic())
                    log(f"node {nid} serves partition {pid}")
        mapping: dict[int, int] = {}
        for nid, (pid, t) in nodes.known.items():
            if pid not in mapping or t > nodes.known[mapping[pid]][1]:
                mapping[pid] = nid
        if len(mapping) == n:
            return mapping
        if time.monotonic() >= deadline:
            raise ProtocolError(
                f"users (partitions) {sorted(set(range(n)) - set(mapping))} of 0..{n - 1} have no live "
                f"SuperNode after waiting node-wait={cfg['node-wait']}s; start them with "
                f"`privnlp fl client --partition-id i --num-partitions {n}`"
            )
        time.sleep(0.25)


def _fingerprint(cfg: Mapping[str, Any]) -> dict[str, str]:
    return {k: repr(cfg.get(k)) for k in _CHECKPOINT_KEYS}


def _save_checkpoint(path: Path, state: dict[str, Any]) -> None:

    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The ServerApp's checkpoint (``out-dir/server_checkpoint.pt``): ``round`` (the last completed round),
    ``params``, ``init``, ``ledger`` (a :class:`privnlp.accounting.DPLedger` dict), ``history``, ``server_opt``, ``config``."""

    ck = torch.load(path, map_location="cpu", weights_only=True)
    if ck.get("format") != "privnlp.flower_checkpoint/1":
        raise InvalidArgument(
            f"{path}: not a privnlp Flower server checkpoint (format {ck.get('format')!r})"
        )
    ck = dict(ck)
    for k in ("ledger", "history", "config"):
        ck[k] = json.loads(ck[k])
    return ck


# ============================================================================ SecAgg+ with distributed DP (#33)
def _transport(cfg: Mapping[str, Any]) -> Transport:
    return Transport(
        tls=bool(cfg.get("transport-tls", False)),
        node_auth=bool(cfg.get("transport-node-auth", False)),
        authenticated_nodes=int(cfg.get("transport-authenticated-nodes", 0)),
        host=str(cfg.get("transport-host", "127.0.0.1")),
    )


def secagg_plan(cfg: Mapping[str, Any], sizes: Mapping[str, int]) -> SkellamPlan | None:
    """The :class:`~.secagg.SkellamPlan` of a run config (``aggregation = "secagg"``), ``None`` for the central
    mode; every bad setting (a threshold the selected clients cannot meet, a modulus too small for the clipped,
    quantised sum, a mechanism other than DP-FedAvg, Poisson sampling, seeded noise) is an
    :class:`~privnlp.core.errors.InvalidArgument` naming the parameter, raised before the first round."""
    mode = str(cfg.get("aggregation", "central"))
    if mode == "central":
        return None
    if mode != "secagg":
        raise InvalidArgument(f"aggregation must be 'central' or 'secagg'; got {mode!r}")
    if cfg.get("mechanism") != "dp_fedavg":
        raise InvalidArgument(
            f"aggregation='secagg' needs mechanism 'dp_fedavg'; got {cfg.get('mechanism')!r}"
        )
    if str(cfg.get("sampling", "fixed")) != "fixed":
        raise InvalidArgument(
            "sampling must be 'fixed' with aggregation='secagg' (each share of the noise is sized for a "
            "fixed number of selected clients)"
        )
    if bool(cfg.get("seeded-noise", False)):
        raise InvalidArgument(
            "seeded-noise: the clients' noise shares always come from OS entropy with aggregation='secagg'"
        )
    m = int(cfg["clients-per-round"])
    if m > int(cfg["num-clients"]):
        raise InvalidArgument(f"clients-per-round={m} exceeds num-clients={cfg['num-clients']}")
    t = int(cfg.get("secagg-min-survivors", 0)) or m
    return SkellamPlan(
        clip_norm=float(cfg["clip-norm"]),
        levels=int(cfg.get("secagg-levels", 1024)),
        dim=int(sum(sizes.values())),
        clients=m,
        min_survivors=t,
        noise_multiplier=float(cfg["noise-multiplier"]),
        modulus_bits=int(cfg.get("secagg-bits", 32)),
    )


def validate_run_config(run_config: Mapping[str, Any]) -> SkellamPlan | None:
    """Check a run config before any process starts (the ServerApp checks again before its first round):
    the mechanism and, with ``aggregation = "secagg"``, the SecAgg+ plan (needs the model's size: builds the
    task's model once). Returns the plan (``None`` in the central mode)."""

    cfg = dict(DEFAULT_RUN_CONFIG, **dict(run_config))
    _mechanism(cfg)
    if str(cfg.get("aggregation", "central")) == "central":
        return None
    task, _ = _task_and_data(cfg, 0, int(cfg["num-clients"]))
    params = trainable_state(task.model_factory())
    return secagg_plan(cfg, {k: int(v.numel()) for k, v in params.items()})


class _ServerView:
    """Records every reply the ServerApp pulls (arrays, config values, metrics) to ``out/server_view.pkl``:
    the server's whole view of the clients, for the adversary tests (``record-server-view = true``)."""

    def __init__(self, grid: Any, path: Path) -> None:
        self._grid = grid
        self._path = path
        self.seen: list[dict[str, Any]] = []

    def pull_messages(self, ids: Any) -> list:
        got = list(self._grid.pull_messages(ids))
        for m in got:
            if m.has_error():
                continue
            c = m.content
            self.seen.append(
                {
                    "src": int(m.metadata.src_node_id),
                    "arrays": {
                        f"{rk}/{k}": np.asarray(a.numpy())
                        for rk, rec in c.array_records.items()
                        for k, a in rec.items()
                    },
                    "configs": {
                        f"{rk}/{k}": v
                        for rk, rec in c.config_records.items()
                        for k, v in rec.items()
                    },
                    "metrics": {
                        f"{rk}/{k}": v
                        for rk, rec in c.metric_records.items()
                        for k, v in rec.items()
                    },
                }
            )
        if got:
            tmp = self._path.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(self.seen))
            os.replace(tmp, self._path)
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)


class _FastGrid:
    """The Grid for SecAggPlusWorkflow with :func:`_exchange`'s 0.25 s polling (Flower's own
    ``send_and_receive`` polls every 3 s: 4 stages would cost >= 12 s a round)."""

    def __init__(self, grid: Any) -> None:
        self._grid = grid

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> list:
        return _exchange(self._grid, list(messages), 3600.0 if timeout is None else float(timeout))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)


def _secagg_round(
    grid: Any,
    context: Any,
    params: Mapping[str, Any],
    names: list[str],
    fit_cfgs: Mapping[int, Mapping[str, Any]],
    plan: SkellamPlan,
    rnd: int,
    timeout: float,
    log_path: Path | None = None,
) -> tuple[int, list] | None:
    """One SecAgg+ round (Flower's ``SecAggPlusWorkflow``) over the nodes of ``fit_cfgs``: returns (number of
    survivors, the exact integer sum of their encoded updates) or ``None`` when SecAgg+ halted (fewer than
    ``plan.min_survivors`` in a stage: nothing unmasked). The workflow's quantiser is set to the identity on
    the clients' integers (quantization range 2c over clipping range c: scale 1, nothing to round)."""

    arrays = [np.asarray(params[k].detach().cpu().numpy(), dtype=np.float32) for k in names]
    got: dict[str, Any] = {}

    class _Fixed(Strategy):
        """Selection is privnlp's (fixed-size, accounted); the workflow only runs the protocol."""

        def initialize_parameters(self, client_manager: Any) -> Any:
            return None

        def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> list:
            p = ndarrays_to_parameters(arrays)
            return [
                (GridClientProxy(nid, grid, context.run_id), LegacyFitIns(p, dict(c)))
                for nid, c in fit_cfgs.items()
            ]

        def aggregate_fit(self, server_round: int, results: list, failures: list) -> tuple:
            if results:
                got["survivors"] = len(results)
                got["mean"] = parameters_to_ndarrays(results[0][1].parameters)
            return None, {}

        def configure_evaluate(self, *a: Any) -> list:
            return []

        def aggregate_evaluate(self, *a: Any) -> tuple:
            return None, {}

        def evaluate(self, *a: Any) -> None:
            return None

    legacy = LegacyContext(context, strategy=_Fixed())
    legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord(
        {WorkflowKey.CURRENT_ROUND: rnd}
    )
    legacy.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord(arrays)
    c = plan.coord_bound
    # the workflow reports through Flower's logger (stage counts, "Insufficient available nodes"): keep it
    handler = logging.FileHandler(log_path) if log_path is not None else None
    flwr_logger = logging.getLogger("flwr")
    if handler is not None:
        handler.setFormatter(logging.Formatter("%(asctime)s [flwr] %(levelname)s %(message)s"))
        flwr_logger.addHandler(handler)

    class _Workflow(SecAggPlusWorkflow):
        """Flower 1.42's SecAgg+ keeps a node that dropped before sharing its keys (stage 0 or 1) among the
        sampled nodes and its neighbours: the unmask stage then asks the survivors for key shares they never
        received (KeyError on every client) and the round halts although enough clients survived. No mask
        was ever derived with such a node, so after stage 1 it is dropped from the protocol's state."""

        def share_keys_stage(self, grid: Any, context: Any, state: Any) -> bool:
            ok = super().share_keys_stage(grid, context, state)
            alive = set(state.active_node_ids)
            state.sampled_node_ids = set(alive)
            state.nid_to_neighbours = {
                nid: set(nb) & alive for nid, nb in state.nid_to_neighbours.items() if nid in alive
            }
            return ok

    try:
        _Workflow(
            num_shares=1.0,  # every selected client is every other's neighbour
            reconstruction_threshold=plan.min_survivors,
            max_weight=1.0,  # clients report weight 1: the workflow's weight factor is 2c per survivor
            clipping_range=float(c),
            quantization_range=2 * c,
            modulus_range=2**plan.modulus_bits,
            timeout=float(timeout),
        )(_FastGrid(grid), legacy)
    finally:
        if handler is not None:
            flwr_logger.removeHandler(handler)
            handler.close()
    if "mean" not in got:
        return None
    k = int(got["survivors"])
    if (
        k < plan.min_survivors
    ):  # the workflow checks its threshold; this never releases below ours either
        return None
    # the workflow divides the sum by the total weight (k); undo it exactly (integers below 2^32)
    return k, [np.rint(np.asarray(a, dtype=np.float64) * k) for a in got["mean"]]


def secagg_claim(cfg: Mapping[str, Any], plan: SkellamPlan, *, rounds: int, population: int) -> Any:
    """The per-adversary claim of the SecAgg+ mode (user level, zero-out neighbours, N public)."""

    delta = float(cfg["delta"])
    tr = _transport(cfg)
    sb = server_bound(plan, rounds=rounds, population=population, delta=delta)
    acc = SECAGG_ACCOUNTANT
    advs = secagg_adversary_bounds(
        plan, rounds=rounds, population=population, delta=delta, tls=tr.tls
    )
    notes = (
        "distributed DP over SecAgg+: each selected client clips to S, rounds to integers (conditional "
        "randomized rounding) and adds its Skellam share from OS entropy; the server learns only the sum of "
        f"at least {plan.min_survivors} survivors (SecAgg+ refuses to unmask fewer); nothing is trusted to "
        "the server except following the protocol (honest-but-curious)",
        f"quantisation: step gamma = S/{plan.levels} = {plan.gamma:.4g}; decoded sum within "
        f"sqrt(d) * gamma = {plan.quantisation_error_bound(1):.3g} per survivor (L2) of the clipped sum, "
        "before noise",
        f"modulus 2^{plan.modulus_bits}: per-client integers in [-{plan.coord_bound}, {plan.coord_bound}], "
        "no wrap-around for the sum of the selected clients; overflow drop-out probability in delta",
        "dropped clients: their noise shares are missing from the sum; the noise is sized for the minimum "
        f"{plan.min_survivors} survivors, so every released sum carries at least the accounted noise",
        tr.describe(),
    )
    return PrivacyClaim.dp(
        sb.epsilon,
        sb.delta,
        "user",
        neighbouring="zero-out: one user's update replaced by zero (N public)",
        accountant=acc,
        notes=notes,
        adversaries=advs,
        extra={
            "aggregation": "secagg",
            "transport": tr.to_dict(),
            "secagg": {
                **plan.to_config(),
                "mu": plan.mu,
                "mu_client": plan.mu_client,
                "l2_bound": plan.l2_bound,
                "l1_bound": plan.l1_bound,
                "gamma": plan.gamma,
                "coord_bound": plan.coord_bound,
                "participations": sb.participations,
                "delta_tail": sb.delta_tail,
                "delta_overflow": sb.delta_overflow,
            },
        },
    )


def _central_claim(claim: Any, cfg: Mapping[str, Any]) -> Any:
    """The central mode's claim with the transport recorded and the trust in the server stated."""

    tr = _transport(cfg)
    notes = (
        *claim.notes,
        "central DP-FedAvg: the server receives every clipped update WITHOUT noise and adds the noise "
        "itself; the guarantee against the server rests on trusting it (use aggregation='secagg' to "
        "trust it only to follow the protocol)",
        tr.describe(),
    )
    extra = {**dict(claim.extra), "aggregation": "central", "transport": tr.to_dict()}
    if tr.tls or is_loopback(tr.host) or not claim.adversaries:
        return dataclasses.replace(claim, notes=notes, extra=extra)
    # plain text off loopback (--allow-insecure-network): the eavesdropper reads every clipped update unnoised
    advs = tuple(
        dataclasses.replace(
            a,
            epsilon=math.inf,
            observes="every clipped update in clear (no TLS)",
            note="insecure transport: no guarantee against the eavesdropper",
        )
        if a.adversary == "eavesdropper"
        else a
        for a in claim.adversaries
    )
    return dataclasses.replace(
        claim, epsilon=max(a.epsilon for a in advs), adversaries=advs, notes=notes, extra=extra
    )


def _server_main(grid: Any, context: Any) -> None:

    cfg = dict(DEFAULT_RUN_CONFIG, **dict(context.run_config))
    out = Path(str(cfg["out-dir"]) or ".")
    out.mkdir(parents=True, exist_ok=True)

    owner = _Owner(out)
    if bool(cfg.get("record-server-view", False)):
        grid = _ServerView(grid, out / "server_view.pkl")

    def log(msg: str) -> None:
        with open(out / "server.log", "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} [{owner.token[:6]}] {msg}\n")

    try:
        ck_path = out / CHECKPOINT_NAME

        def _take_over() -> dict[str, Any] | None:
            clear_result(out)  # a previous run's result must not be read as this run's
            if not ck_path.exists():
                return None
            if not bool(cfg.get("resume", True)):
                raise ProtocolError(
                    f"{ck_path} holds the checkpoint (and the spent privacy budget) of an earlier "
                    "run; resume it (resume=true) or use a fresh out-dir: a private run never "
                    "restarts its accounting at epsilon 0"
                )
            return load_checkpoint(ck_path)

        # the newest ServerApp of an out-dir owns it from here on; the checkpoint is read under the same lock as an
        # older ServerApp's commits (see _Owner): no round can be released that this one did not load
        ck = owner.take_over(_take_over)
        log("server app started")
        mech = _mechanism(cfg)
        n = int(cfg["num-clients"])
        rounds = int(cfg["num-server-rounds"])
        users = [
            str(i) for i in range(n)
        ]  # a user is a partition; the node serving it may change (restarts)
        task, _ = _task_and_data(cfg, 0, n)
        model = task.model_factory()
        params = trainable_state(model)
        init = {k: v.clone() for k, v in params.items()}
        plan = mech.plan(n, rounds)
        names = sorted(params)
        sa_plan = secagg_plan(cfg, {k: int(v.numel()) for k, v in params.items()})
        ledger = DPLedger()
        server = ServerOptimizer(mech.server_lr, mech.server_momentum)
        history: list[dict[str, Any]] = []
        start = 1
        if ck is not None:
            diff = sorted(k for k, v in _fingerprint(cfg).items() if ck["config"].get(k) != v)
            if diff:
                raise ProtocolError(
                    f"{ck_path} was written with a different run config ({diff}); resume with the "
                    "same settings or use a fresh out-dir"
                )
            params, init = dict(ck["params"]), dict(ck["init"])
            ledger = DPLedger.from_dict(ck["ledger"])
            server.load_state_dict(ck["server_opt"])
            history = list(ck["history"])
            start = int(ck["round"]) + 1
            log(
                f"resumed from {ck_path.name} after round {ck['round']} (ledger: {ledger.rounds} rounds)"
            )
        nodes = _Nodes()
        node_of = _discover(
            grid, cfg, n, nodes, deadline=time.monotonic() + float(cfg["node-wait"]), log=log
        )

        def checkpoint(done: int) -> None:
            with owner.commit():
                _save_checkpoint(
                    ck_path,
                    {
                        "format": "privnlp.flower_checkpoint/1",
                        "round": done,
                        "params": params,
                        "init": init,
                        "server_opt": server.state_dict(),
                        "ledger": json.dumps(ledger.to_dict()),
                        "history": json.dumps(history),
                        "config": json.dumps(_fingerprint(cfg)),
                    },
                )

        def charge_clients(ok: list) -> None:
            """Record-level ledger of client DP-SGD: every reply the server received is charged, the replies of a
            discarded attempt included (the server saw them; against it, that is what client DP protects)."""
            _require_client_dp_metrics(mech, [f for _, f in ok])
            for u, f in ok:
                if "dp-steps" in f.metrics:
                    ledger.record_client_steps(
                        u,
                        f.metrics["dp-noise-multiplier"],
                        f.metrics["dp-sample-rate"],
                        int(f.metrics["dp-steps"]),
                    )

        r, attempt, selected = start, 0, None
        while r <= rounds:
            if attempt == 0:
                t_round = time.monotonic()
            mech.account(ledger, plan, n, check=True)
            g_sel, cseed, nseed = round_seeds(int(cfg["seed"]), r)
            if selected is None:
                # drawn once per round: a retry re-asks the same users. Re-drawing after a failure would release the
                # first draw that succeeded, a sample conditioned on who failed (a node that refuses whenever it is
                # selected would bias every user's inclusion probability away from the accounted m/N).
                selected = select_clients(
                    users, mech.clients_per_round, mech.sampling, _selection_generator(cfg, g_sel)
                )
            user_of = {node_of[int(u)]: u for u in selected}
            if (
                sa_plan is not None
            ):  # distributed DP over SecAgg+ (issue #33): the server sees only the sum
                log(
                    f"round {r} (attempt {attempt + 1}): SecAgg+ with users {selected} "
                    f"(nodes {sorted(user_of)})"
                )
                fit_cfgs = {
                    node_of[int(u)]: dict(
                        mech.client_config(r, (cseed + j) % (2**31 - 1)),
                        **sa_plan.to_config(),
                        **{"param-names": ",".join(names)},
                    )
                    for j, u in enumerate(selected)
                }
                agg = _secagg_round(
                    grid,
                    context,
                    params,
                    names,
                    fit_cfgs,
                    sa_plan,
                    r,
                    cfg["round-timeout"],
                    out / "server.log",
                )
                if agg is None:
                    msg = (
                        f"round {r}: SecAgg+ halted (fewer than secagg-min-survivors="
                        f"{sa_plan.min_survivors} of {len(selected)} selected users took part in every "
                        "stage); nothing was unmasked or released"
                    )
                    if attempt < int(cfg["round-retries"]):
                        attempt += 1
                        log(msg + f"; retry {attempt} of {cfg['round-retries']}")
                        node_of = _discover(
                            grid,
                            cfg,
                            n,
                            nodes,
                            deadline=time.monotonic() + float(cfg["node-wait"]),
                            log=log,
                        )
                        continue
                    raise ProtocolError(msg + f" (round-retries={cfg['round-retries']} exhausted)")
                survivors, int_sum = agg
                decoded = decode_sum(int_sum, sa_plan)
                m = len(selected)  # the fixed denominator
                update = {
                    k: torch.as_tensor(v / m, dtype=params[k].dtype).reshape(params[k].shape)
                    for k, v in zip(names, decoded)
                }
                params = server.step(params, update)
                mech.account(ledger, plan, n, check=False)
                history.append(
                    {
                        "round": r,
                        "selected": selected,
                        "replies": survivors,
                        "survivors": survivors,
                        "attempts": attempt + 1,
                        "quantisation_error_bound": sa_plan.quantisation_error_bound(survivors) / m,
                        "seconds": time.monotonic() - t_round,
                    }
                )
                checkpoint(r)
                log(f"round {r} done: SecAgg+ sum of {survivors} survivors; checkpoint written")
                r, attempt, selected = r + 1, 0, None
                continue
            msgs = []
            for j, u in enumerate(selected):
                content = RecordDict(
                    {
                        "arrays": ArrayRecord(
                            torch_state_dict={k: v.clone() for k, v in params.items()}
                        ),
                        "config": ConfigRecord(mech.client_config(r, (cseed + j) % (2**31 - 1))),
                    }
                )
                msgs.append(
                    Message(content=content, dst_node_id=node_of[int(u)], message_type="train")
                )
            log(
                f"round {r} (attempt {attempt + 1}): sending to users {selected} (nodes {sorted(user_of)})"
            )
            replies = _exchange(grid, msgs, float(cfg["round-timeout"]))
            log(
                f"round {r}: {len(replies)} replies, errors: {[str(m.error) for m in replies if m.has_error()]}"
            )
            ok = []
            for m in replies:
                src = int(m.metadata.src_node_id)
                if m.has_error() or src not in user_of:
                    continue
                arrays = m.content["arrays"].to_torch_state_dict()
                metrics = {k: float(v) for k, v in m.content["metrics"].items()}
                ok.append((user_of.pop(src), FitRes(arrays, metrics)))
            if mech.require_all_replies() and len(ok) < len(selected):
                missing = sorted(user_of.values(), key=int)
                for (
                    nid
                ) in user_of:  # a node that missed a round is not trusted to serve this run again
                    nodes.exclude(nid)
                msg = (
                    f"round {r}: {len(ok)} of {len(selected)} selected users replied within round-timeout="
                    f"{cfg['round-timeout']}s (missing users {missing}); DP-FedAvg fails closed: no round with "
                    "fewer clients and the same noise"
                )
                charge_clients(
                    ok
                )  # their (client-DP) updates reached the server although the round is discarded
                checkpoint(r - 1)  # ... and that charge survives a server restart
                if attempt < int(cfg["round-retries"]):
                    attempt += 1
                    log(
                        msg
                        + f"; discarded (nothing released), waiting up to node-wait={cfg['node-wait']}s for "
                        f"replacement SuperNodes, then retry {attempt} of {cfg['round-retries']} with the same "
                        f"selected users {selected}"
                    )
                    node_of = _discover(
                        grid,
                        cfg,
                        n,
                        nodes,
                        deadline=time.monotonic() + float(cfg["node-wait"]),
                        log=log,
                    )
                    continue
                raise ProtocolError(
                    msg
                    + f" (round-retries={cfg['round-retries']} exhausted); the checkpoint keeps "
                    f"the {ledger.rounds} accounted rounds: restart with the same out-dir to resume"
                )
            if ok or mech.require_all_replies():
                update, info = mech.aggregate(
                    params,
                    [f for _, f in ok],
                    num_selected=len(selected),
                    plan=plan,
                    generator=_server_noise_generator(cfg, nseed),
                )
                params = server.step(params, update)
            mech.account(ledger, plan, n, check=False)
            charge_clients(ok)
            history.append(
                {
                    "round": r,
                    "selected": selected,
                    "replies": len(ok),
                    "attempts": attempt + 1,
                    "loss": float(sum(f.metrics.get("loss", 0.0) for _, f in ok) / max(1, len(ok))),
                    "seconds": time.monotonic() - t_round,
                }
            )
            # checkpoint (ledger first-class) *before* the new model is released (next round's messages / result)
            checkpoint(r)
            log(f"round {r} done; checkpoint written (ledger: {ledger.rounds} rounds)")
            r, attempt, selected = r + 1, 0, None
        log("computing the claim")
        claim = (
            secagg_claim(cfg, sa_plan, rounds=ledger.rounds, population=n)
            if sa_plan is not None
            else _central_claim(mech.claim_for(ledger, n, plan), cfg)
        )
        if bool(cfg.get("seeded-noise", False)) and getattr(claim, "kind", None) is not None:
            if "noise_seeded" in {f.name for f in dataclasses.fields(claim)}:
                claim = dataclasses.replace(claim, noise_seeded=True)
        result = {
            "claim": claim.to_dict(),
            "history": history,
            "ledger": ledger.to_dict(),
            "model_change": global_norm({k: params[k] - init[k] for k in params}),
            "nodes": {u: node_of.get(int(u)) for u in users},
            "resumed_from_round": start - 1,
            "transport": _transport(cfg).to_dict(),
            "aggregation": str(cfg.get("aggregation", "central")),
        }
        with owner.commit():
            torch.save(params, out / "final.pt")
            tmp = out / ".result.json.tmp"
            tmp.write_text(json.dumps(result, default=str))
            os.replace(tmp, out / "result.json")
    except _Superseded as e:
        log(str(e))
        raise
    except Exception as e:  # noqa: BLE001 - report the failure to the launcher, then re-raise
        log(f"failed: {type(e).__name__}: {e}")
        if owner.owned():
            tmp = out / ".error.json.tmp"
            tmp.write_text(json.dumps({"error": f"{type(e).__name__}: {e}"}))
            os.replace(tmp, out / "error.json")
        raise


class _Superseded(ProtocolError):
    """A newer ServerApp resumed this out-dir."""


class _Owner:
    """Only the newest ServerApp of an out-dir writes there: an older one (orphaned when its SuperLink died, or
    still running when the run was resubmitted) must never write a checkpoint or a result, and so never release
    a model (a new model leaves the server only after its checkpoint is committed).

    :meth:`take_over` (write this server's token, read the checkpoint) and :meth:`commit` (check the token, write)
    hold one ``flock`` on ``out-dir/.owner.lock``: without it an older server could pass its token check, the newer
    one take over and load checkpoint r-1, and the older one then write checkpoint r and release round r's model;
    the newer one would re-run round r with new noise, and its ledger would miss a released round.
    """

    def __init__(self, out: Path) -> None:
        self.out = out
        self.token = os.urandom(8).hex()

    @contextlib.contextmanager
    def _locked(self) -> Any:

        with open(self.out / ".owner.lock", "a") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def take_over(self, load: Any) -> Any:
        with self._locked():
            (self.out / ".owner").write_text(self.token)
            return load()

    def owned(self) -> bool:
        try:
            return (self.out / ".owner").read_text() == self.token
        except OSError:
            return False

    @contextlib.contextmanager
    def commit(self) -> Any:
        with self._locked():
            if not self.owned():
                raise _Superseded(
                    f"{self.out} was taken over by a newer ServerApp; this one stops without writing"
                )
            yield


def _selection_generator(cfg: Mapping[str, Any], seeded: Any) -> Any:
    """The generator of the client selection (issue #15).

    Fixed-size / Poisson selection is the sampling the accountant's amplification rests on, and amplification
    assumes the adversary does not know who was sampled; the run-config seed reaches every SuperNode, so a
    participant could predict the selection from it. Conservative and cheap: selection comes from OS entropy
    like the noise, unless ``seeded-noise = true`` (reproducible simulation).
    """

    return seeded if bool(cfg.get("seeded-noise", False)) else secure_numpy()


def _server_noise_generator(cfg: Mapping[str, Any], nseed: int) -> torch.Generator:
    """The generator of the DP-FedAvg server noise (issue #15).

    The run config (and so ``cfg["seed"]`` and every seed derived from it) is sent to every SuperNode:
    a seed derived from it must never seed privacy noise, or any participant could recompute the noise and
    subtract it from the released global model. The noise comes from OS entropy unless the run config sets
    ``seeded-noise = true`` for a reproducible simulation (then the claim says "noise seeded").
    """

    if bool(cfg.get("seeded-noise", False)):
        return torch.Generator().manual_seed(nseed)
    return secure_torch()


def make_server_app() -> Any:
    """The ServerApp (``@app.main()`` with the Grid API) running FedAvg / DP-FedAvg from the run config."""
    app = ServerApp()
    app.main()(_server_main)
    return app


def make_client_app() -> Any:
    """The ClientApp (``@app.train()``): local update on the node's partition, replies with the delta."""
    app = ClientApp()
    app.train()(client_train)
    return app


def client_delta(
    start: Mapping[str, Any], ins: Mapping[str, Any], context: Any
) -> tuple[dict, dict]:
    """privnlp's :func:`~.client.local_update` on the node's partition from the model ``start`` (name -> array):
    the model delta (name -> numpy array) and the metrics."""

    cfg = dict(DEFAULT_RUN_CONFIG, **dict(context.run_config))
    pid = int(context.node_config.get("partition-id", 0))
    nparts = int(context.node_config.get("num-partitions", cfg["num-clients"]))
    task, data = _task_and_data(cfg, pid, nparts)
    state = {k: torch.as_tensor(v) for k, v in start.items()}
    res = local_update(task, data, FitIns(state, dict(ins)))
    delta = {k: v.detach().cpu().numpy() for k, v in res.arrays.items()}
    return delta, {k: float(v) for k, v in res.metrics.items()}


def client_train(msg: Any, context: Any) -> Any:
    """The ClientApp's train handler: privnlp's :func:`~.client.local_update` on the node's partition."""

    cfg = dict(DEFAULT_RUN_CONFIG, **dict(context.run_config))
    pid = int(context.node_config.get("partition-id", 0))
    nparts = int(context.node_config.get("num-partitions", cfg["num-clients"]))
    task, data = _task_and_data(cfg, pid, nparts)
    res = local_update(
        task, data, FitIns(msg.content["arrays"].to_torch_state_dict(), dict(msg.content["config"]))
    )
    content = RecordDict(
        {
            "arrays": ArrayRecord(
                torch_state_dict={k: v.contiguous() for k, v in res.arrays.items()}
            ),
            "metrics": MetricRecord({k: float(v) for k, v in res.metrics.items()}),
        }
    )
    return Message(content=content, reply_to=msg)


class LoopbackDeployment:
    """A SuperLink and ``num_nodes`` SuperNodes as separate processes on 127.0.0.1 (free ports), shared by
    several ``flwr run`` submissions; every process is stopped (process groups, bounded waits) by
    :meth:`close` / the ``with`` block. Used by :func:`run_loopback` and the fault-injection tests:
    :meth:`kill_node` (SIGKILL mid-round), :meth:`start_node` (a replacement / restarted SuperNode),
    :meth:`restart_superlink` (the server side dies and comes back on the same port).

    ``database``: a SQLite file for the SuperLink's state (``--database``), so that a restarted SuperLink
    still knows the registered SuperNodes; ``None`` = in memory.
    ``secure``: TLS (a test CA and server certificate made in ``work_dir/certs``) and SuperNode authentication
    (``num_nodes`` key pairs in ``work_dir/keys``, registered before any node starts); ``False`` is the
    labelled insecure loopback demo.
    ``fork_exec``: privnlp's fork-server SuperExec on every SuperNode (:func:`start_supernode`); ``False``:
    Flower's (a fresh ``flwr-clientapp`` process per message). ``node_poll``: see :func:`start_supernode`.
    """

    def __init__(
        self,
        work_dir: str | os.PathLike,
        num_nodes: int = 3,
        *,
        database: bool = False,
        secure: bool = False,
        fork_exec: bool = True,
        node_poll: float | None = None,
    ) -> None:
        self.work_dir = work_dir
        self.fork_exec = fork_exec
        self.node_poll = node_poll
        self.num_nodes = num_nodes
        self.database = database
        self.secure = secure
        self.superlink: subprocess.Popen | None = None
        self.nodes: dict[int, subprocess.Popen] = {}
        self._logs: list[Any] = []
        self._runs = 0
        self.port = 0
        self.env: dict[str, str] = {}
        self.tls: TlsFiles | None = None
        self.keys: list[str] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def transport(self) -> Transport:
        return Transport(self.secure, self.secure, len(self.keys), "127.0.0.1")

    def __enter__(self) -> LoopbackDeployment:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _log(self, name: str) -> Any:
        f = open(Path(self.work_dir) / name, "ab")
        self._logs.append(f)
        return f

    def key_path(self, partition_id: int) -> Path:
        return Path(self.work_dir) / "keys" / f"node-{partition_id}.key"

    def start(self) -> None:
        work = Path(self.work_dir)
        work.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        if self.secure:
            certs = work / "certs"
            self.tls = TlsFiles.in_dir(certs) if (certs / "ca.crt").exists() else make_certs(certs)
            key_list = work / "keys" / "supernode_public_keys.txt"
            if not key_list.exists():
                make_node_keys(work / "keys", self.num_nodes)
            self.keys = read_key_list(key_list)
        self.env = flower_env(
            work / "flwr_home",
            self.address,
            root_certificates=self.tls.ca_certfile if self.tls else None,
        )
        self.start_superlink()
        if self.secure:
            register_nodes(self.keys, env=self.env, work_dir=work)
        for i in range(self.num_nodes):
            self.start_node(i)

    def start_superlink(self, timeout: float = 30.0) -> None:
        extra = ["--database", str(Path(self.work_dir) / "superlink.db")] if self.database else []
        self.superlink = start_superlink(
            self.port,
            env=self.env,
            log=self._log("superlink.log"),
            extra=extra,
            tls=self.tls,
            node_auth=self.secure,
        )
        _wait_port(self.port, timeout, self.superlink)

    def restart_superlink(self, sig: int = signal.SIGKILL) -> None:
        """Kill the SuperLink's process group (its ServerApp included) with ``sig`` and start it again."""
        stop([self.superlink], grace=10.0, sig=sig)
        self.start_superlink()

    def start_node(
        self,
        partition_id: int,
        *,
        auth_key: str | os.PathLike | None = None,
        insecure: bool = False,
        log_name: str | None = None,
    ) -> subprocess.Popen:
        """Start (or restart, if the old one is dead) the SuperNode serving ``partition_id``. In a secure
        deployment it authenticates with ``auth_key`` (default: the registered key of the partition);
        ``insecure`` starts a plain-text node (to test that the SuperLink refuses it)."""
        old = self.nodes.get(partition_id)
        if old is not None and old.poll() is None:
            raise InvalidArgument(
                f"partition_id: the SuperNode of partition {partition_id} is still running"
            )
        tls = self.tls is not None and not insecure
        p = start_supernode(
            self.address,
            partition_id,
            self.num_nodes,
            free_port(),
            env=self.env,
            log=self._log(log_name or f"supernode{partition_id}.log"),
            root_certificates=self.tls.ca_certfile if tls else None,
            auth_key=(auth_key or self.key_path(partition_id)) if tls else None,
            fork_exec=self.fork_exec,
            node_poll=self.node_poll,
        )
        self.nodes[partition_id] = p
        return p

    def ensure_nodes(self, timeout: float = 600.0) -> list[int]:
        """Wait until every SuperNode has a node id (``SuperNode ID`` in its log) and is still running; a node
        that exited meanwhile (e.g. its Runtime API port, picked free by :func:`free_port`, was taken by
        another process before it bound it: Errno 98) is started again on a new port. Returns the restarted
        partitions; raises ``TimeoutError`` after ``timeout`` seconds."""
        restarted: list[int] = []
        logs = {i: Path(self.work_dir) / f"supernode{i}.log" for i in self.nodes}
        end = time.monotonic() + timeout
        while True:
            ready = 0
            for i, p in list(self.nodes.items()):
                if p.poll() is not None:
                    stop([p], grace=1.0)
                    logs[i] = Path(self.work_dir) / f"supernode{i}.restart{len(restarted)}.log"
                    self.start_node(i, log_name=logs[i].name)
                    restarted.append(i)
                elif logs[i].exists() and b"SuperNode ID" in logs[i].read_bytes():
                    ready += 1
            if ready == len(self.nodes):
                return restarted
            if time.monotonic() >= end:
                raise TimeoutError(
                    f"{len(self.nodes) - ready} SuperNodes have no node id after {timeout:.0f}s"
                )
            time.sleep(0.5)

    def kill_node(self, partition_id: int, sig: int = signal.SIGKILL) -> None:
        """Kill the SuperNode of ``partition_id`` and its ClientApp processes (its process group)."""
        stop([self.nodes[partition_id]], grace=10.0, sig=sig)

    def submit(
        self, run_config: Mapping[str, Any], out_dir: str | os.PathLike, timeout: float = 60.0
    ) -> Path:
        """Write an app with ``run_config`` (``out-dir`` set to ``out_dir``), remove a stale result there and
        ``flwr run`` it; returns ``out_dir``."""
        self._runs += 1
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        clear_result(out)
        cfg = dict(run_config)
        cfg.setdefault("num-clients", self.num_nodes)
        cfg.setdefault("clients-per-round", self.num_nodes)
        cfg["out-dir"] = str(out.resolve())
        tr = self.transport
        cfg.update(
            {
                "transport-tls": tr.tls,
                "transport-node-auth": tr.node_auth,
                "transport-authenticated-nodes": tr.authenticated_nodes,
                "transport-host": tr.host,
            }
        )
        validate_run_config(cfg)
        app = write_app(Path(self.work_dir) / f"app{self._runs}", cfg)
        sub = submit_run(app, env=self.env, timeout=timeout)
        if sub.returncode != 0:
            raise ProtocolError(
                f"flwr run failed (rc={sub.returncode}): {sub.stdout[-2000:]} {sub.stderr[-2000:]}"
            )
        return out

    def wait(self, out_dir: str | os.PathLike, timeout: float) -> dict[str, Any]:
        return wait_for_result(
            out_dir, timeout=timeout, procs=(self.superlink,) if self.superlink else ()
        )

    def close(self) -> None:
        stop([self.superlink, *self.nodes.values()])
        for f in self._logs:
            f.close()
        self._logs.clear()


def clear_result(out_dir: str | os.PathLike) -> None:
    """Remove a previous run's ``result.json`` / ``error.json`` before waiting for a new one."""
    for name in ("result.json", "error.json"):
        with contextlib.suppress(FileNotFoundError):
            (Path(out_dir) / name).unlink()


def run_loopback(
    work_dir: str | os.PathLike,
    run_config: Mapping[str, Any] | None = None,
    *,
    num_nodes: int = 3,
    timeout: float = 90.0,
    secure: bool = False,
) -> dict[str, Any]:
    """SuperLink + ``num_nodes`` SuperNodes on 127.0.0.1 (free ports), ``flwr run``, wait for the
    result, then stop every process (in a ``finally``). Returns the ServerApp's ``result.json``."""
    t0 = time.monotonic()
    with LoopbackDeployment(work_dir, num_nodes, secure=secure) as dep:
        out = dep.submit(
            dict(run_config or {}),
            Path(work_dir) / "out",
            timeout=max(5.0, timeout - (time.monotonic() - t0)),
        )
        return dep.wait(out, timeout=max(5.0, timeout - (time.monotonic() - t0)))


def _wait_port(port: int, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ProtocolError(f"flower-superlink exited early (rc={proc.returncode})")
        with contextlib.closing(socket.socket()) as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"flower-superlink did not open port {port} in {timeout:.0f}s")
