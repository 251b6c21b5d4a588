"""privnlp's fork-server SuperExec (issue #33 item 6): a ClientApp task runs in a fork of a process that imported
flwr once. Plays the adversary of the fork: a child must not inherit the parent's random state (numpy's global
generator is not reseeded by ``fork``), and privnlp's secure generator must differ between children; the parent
reaps its children; a task type other than the ClientApp goes to Flower's subprocess executor. No Flower
processes: ``run_clientapp`` is replaced by a probe that writes what the child drew."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from flwr.supercore.superexec import run_superexec as rs

from privnlp.core.rng import secure_numpy
from privnlp.mechanisms.federated import flower_exec
from privnlp.mechanisms.federated.flower import LoopbackDeployment
from privnlp.mechanisms.federated.flower_exec import ExecutionSpec, ForkExecutor, TaskType


def _spec(token: str, task_type: TaskType = TaskType.CLIENT_APP) -> ExecutionSpec:
    return ExecutionSpec(
        task_type=task_type,
        runtime_api_address="127.0.0.1:1",
        token=token,
        insecure=True,
        root_certificates_path=None,
        runtime_dependency_install=False,
        parent_pid=None,
        suppress_output=True,
        task_id=1,
    )


def _wait_reaped(ex: ForkExecutor, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while ex.children and time.monotonic() < end:
        ex.reconcile()
        time.sleep(0.05)
    assert not ex.children, "children not reaped"


def test_forked_clientapps_do_not_share_random_state(tmp_path, monkeypatch):
    def probe(*, runtime_api_address, token, insecure, certificates, parent_pid, **_):
        (tmp_path / f"{token}.json").write_text(
            json.dumps(
                {
                    "global": np.random.random(4).tolist(),
                    "secure": secure_numpy().random(4).tolist(),
                    "token": token,
                    "insecure": insecure,
                    "pid": os.getpid(),
                }
            )
        )

    monkeypatch.setattr(flower_exec, "run_clientapp", probe)
    np.random.seed(1234)  # the parent's state: what a careless fork server would hand every child
    parent_next = np.random.random(4).tolist()
    np.random.seed(1234)
    ex = ForkExecutor()
    for t in ("a", "b", "c"):
        res = ex.launch(_spec(t))
        assert res.status == "accepted"
    _wait_reaped(ex)
    got = [json.loads((tmp_path / f"{t}.json").read_text()) for t in ("a", "b", "c")]
    assert {g["token"] for g in got} == {"a", "b", "c"} and all(g["insecure"] for g in got)
    assert len({g["pid"] for g in got} | {os.getpid()}) == 4  # three children, none is the parent
    for g in got:
        assert g["global"] != parent_next  # reseeded from OS entropy, not the parent's state
    assert len({tuple(g["global"]) for g in got}) == 3
    assert len({tuple(g["secure"]) for g in got}) == 3
    assert np.random.random(4).tolist() == parent_next  # the parent's own state untouched


def test_child_exit_code_and_other_task_types(tmp_path, monkeypatch):
    def boom(**_):
        raise SystemExit(7)

    monkeypatch.setattr(flower_exec, "run_clientapp", boom)
    ex = ForkExecutor()
    ex.launch(_spec("x"))
    (pid,) = tuple(ex.children)
    _, status = os.waitpid(
        pid, 0
    )  # the child's own exit status: the task failed, the loop lives on
    assert os.waitstatus_to_exitcode(status) == 7
    ex.reconcile()
    assert not ex.children

    calls = []
    monkeypatch.setattr(
        flower_exec.SubprocessExecutor, "launch", lambda self, spec: calls.append(spec) or "sub"
    )
    assert ex.launch(_spec("y", TaskType.SERVER_APP)) == "sub"
    assert [c.token for c in calls] == ["y"] and not ex.children


def test_poll_interval_is_the_env_flower_reads(monkeypatch):
    """privnlp's 0.2 s default goes through Flower's own FLWR_SUPEREXEC_TASK_POLL_INTERVAL (fails if Flower renames
    or stops reading it)."""
    monkeypatch.setenv("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", flower_exec.DEFAULT_TASK_POLL_INTERVAL)
    assert rs._get_task_poll_interval() == pytest.approx(0.2)


class _FakeNode:
    """A Popen stand-in: ``rc`` None = running."""

    def __init__(self, rc):
        self.rc, self.pid = rc, 2**22 + 1

    def poll(self):
        return self.rc

    def wait(self, timeout=None):
        return self.rc


def test_ensure_nodes_restarts_a_node_that_lost_its_port(tmp_path, monkeypatch):
    """N SuperNodes pick free ports at once; one whose port was taken exits (Errno 98): ensure_nodes starts it
    again on a new port and waits until every node has a node id in its log."""
    dep = LoopbackDeployment(tmp_path, 2)
    dep.nodes = {0: _FakeNode(None), 1: _FakeNode(1)}
    (tmp_path / "supernode0.log").write_bytes(b"INFO SuperNode ID: 11\n")
    started = []

    def fake_start(i, *, log_name=None, **_):
        started.append((i, log_name))
        (tmp_path / log_name).write_bytes(b"INFO SuperNode ID: 12\n")
        dep.nodes[i] = _FakeNode(None)

    monkeypatch.setattr(dep, "start_node", fake_start)
    assert dep.ensure_nodes(10.0) == [1]
    assert started == [(1, "supernode1.restart0.log")]
    dep.nodes = {0: _FakeNode(None)}
    (tmp_path / "supernode0.log").write_bytes(b"starting\n")  # never gets an id
    with pytest.raises(TimeoutError, match="1 SuperNodes have no node id"):
        dep.ensure_nodes(1.0)
