"""The Flower ServerApp's round logic without processes (a fake Grid in memory, milliseconds per round):
fail closed on a missing reply, checkpoint + resume of the ledger, refusals of a mismatched / unwanted resume,
retry after a replacement node, one user per partition. The same code runs across real processes in
test_flower_faults (integration)."""
from __future__ import annotations

import itertools
import json
from types import SimpleNamespace

import pytest

pytest.importorskip("flwr")


@pytest.fixture(autouse=True)
def _run_identity(monkeypatch):
    """flwr 1.42 Messages read the run id of the process (set by the ServerApp runtime)."""
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 1)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


class FakeGrid:
    """get_node_ids / push_messages / pull_messages of a Flower Grid; nodes answer at once unless dead."""

    def __init__(self, partitions: dict[int, int]) -> None:
        self.partitions = dict(partitions)  # node id -> partition id
        self.dead: set[int] = set()
        self.replies: dict[str, SimpleNamespace] = {}
        self.ids = itertools.count()
        self.on_train = None  # hook(grid, node_id) called when a train message is pushed
        self.trained: list[int] = []

    def get_node_ids(self):
        return list(self.partitions)

    def push_messages(self, msgs):
        import torch

        out = []
        for m in msgs:
            mid = f"m{next(self.ids)}"
            out.append(mid)
            nid = m.metadata.dst_node_id
            kind = m.metadata.message_type
            if kind == "train" and self.on_train:
                self.on_train(self, nid)
            if nid in self.dead:
                continue
            meta = SimpleNamespace(reply_to_message_id=mid, src_node_id=nid)
            if kind == "query":
                content = {"config": {"partition-id": self.partitions[nid], "num-partitions": 3}}
            else:
                self.trained.append(nid)
                arrays = m.content["arrays"].to_torch_state_dict()
                content = {"arrays": SimpleNamespace(to_torch_state_dict=lambda a=arrays: {k: torch.zeros_like(v)
                                                                                            for k, v in a.items()}),
                           "metrics": {"num-examples": 16.0, "loss": 1.0}}
            self.replies[mid] = SimpleNamespace(metadata=meta, content=content, has_error=lambda: False, error=None)
        return out

    def pull_messages(self, ids):
        return [self.replies.pop(i) for i in list(ids) if i in self.replies]


def _run(out, grid, **cfg):
    from privnlp.mechanisms.federated import flower as fl

    run_config = dict(fl.DEFAULT_RUN_CONFIG, **{"out-dir": str(out), "round-timeout": 0.5, "node-wait": 1.0}, **cfg)
    try:
        fl._server_main(grid, SimpleNamespace(run_config=run_config))
    except Exception:  # noqa: BLE001 - the ServerApp re-raises after writing error.json
        pass
    for name in ("result.json", "error.json"):
        if (out / name).exists():
            return json.loads((out / name).read_text())
    raise AssertionError("no result")


def _grid():
    return FakeGrid({101: 0, 102: 1, 103: 2})


def test_missing_reply_fails_closed_and_checkpoint_keeps_accounted_rounds(tmp_path):
    from privnlp.mechanisms.federated.flower import CHECKPOINT_NAME, load_checkpoint

    g = _grid()
    g.on_train = lambda grid, nid: grid.dead.add(103) if len(grid.trained) >= 3 else None  # dies in round 2
    res = _run(tmp_path, g, **{"num-server-rounds": 3})
    assert "fails closed" in res["error"] and "missing users ['2']" in res["error"]
    ck = load_checkpoint(tmp_path / CHECKPOINT_NAME)
    assert ck["round"] == 1 and ck["ledger"]["runs"][0]["rounds"] == 1


def test_resume_continues_the_ledger(tmp_path):
    from privnlp.mechanisms.federated.accounting import user_epsilon

    first = _run(tmp_path, _grid(), **{"num-server-rounds": 2})
    assert first["resumed_from_round"] == 0 and first["ledger"]["runs"][0]["rounds"] == 2
    res = _run(tmp_path, _grid(), **{"num-server-rounds": 3})
    assert res["resumed_from_round"] == 2
    assert [h["round"] for h in res["history"]] == [1, 2, 3]
    assert res["ledger"]["runs"][0]["rounds"] == 3
    assert float(res["claim"]["epsilon"]) == pytest.approx(user_epsilon("fixed", 3, 3, 1.0, 3, 1e-3), rel=1e-9)


@pytest.mark.parametrize("change, msg", [({"clip-norm": 1.0}, "different run config"),
                                         ({"resume": False}, "never restarts its accounting at epsilon 0")])
def test_resume_refusals(tmp_path, change, msg):
    _run(tmp_path, _grid(), **{"num-server-rounds": 1})
    res = _run(tmp_path, _grid(), **{"num-server-rounds": 2}, **change)
    assert msg in res["error"]


def test_failed_round_is_rerun_after_a_replacement_joins(tmp_path):
    g = _grid()

    def die_and_replace(grid, nid):
        if len(grid.trained) == 3 and 101 not in grid.dead:  # round 2: node 101 (partition 0) dies ...
            grid.dead.add(101)
            grid.partitions[201] = 0  # ... and a replacement for partition 0 registers

    g.on_train = die_and_replace
    res = _run(tmp_path, g, **{"num-server-rounds": 2, "round-retries": 1})
    assert "error" not in res, res
    assert [h["attempts"] for h in res["history"]] == [1, 2]
    assert res["ledger"]["runs"][0]["rounds"] == 2
    assert res["nodes"]["0"] == 201


def test_two_nodes_of_one_partition_count_once(tmp_path):
    g = FakeGrid({101: 0, 102: 1, 103: 2, 104: 2})
    res = _run(tmp_path, g, **{"num-server-rounds": 1})
    assert "error" not in res, res
    assert res["history"][0]["replies"] == 3 and len(g.trained) == 3


def test_selection_is_not_predictable_from_the_run_config():
    from privnlp.core.rng import is_secure
    from privnlp.mechanisms.federated import flower as fl
    from privnlp.mechanisms.federated.simulator import round_seeds

    seeded = round_seeds(0, 1)[0]
    assert is_secure(fl._selection_generator(dict(fl.DEFAULT_RUN_CONFIG), seeded))
    assert fl._selection_generator(dict(fl.DEFAULT_RUN_CONFIG, **{"seeded-noise": True}), seeded) is seeded
