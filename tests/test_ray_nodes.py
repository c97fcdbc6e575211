"""The two-node test fixture restarts a `ray start` that exits during start-up (CI saw a
raylet miss Ray's fixed 30 s registration wait on a busy 2-core machine)."""

from __future__ import annotations

import pytest
from ray_nodes import NodeExited, TwoNodes, fresh_auth_token


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_node_whose_ray_start_exits_is_started_again(tmp_path, monkeypatch):
    calls = []
    real = TwoNodes._head_args

    def head_args(self, cpus):
        calls.append(cpus)
        args = real(self, cpus)
        # the first start fails as a timed-out one does: `ray start` exits non-zero
        return [*args, "--no-such-flag"] if len(calls) == 1 else args

    monkeypatch.setattr(TwoNodes, "_head_args", head_args)
    with fresh_auth_token():
        cluster = TwoNodes(tmp_path, head_cpus=1, worker_cpus=1)
        try:
            assert len(calls) == 2
            assert "no-such-flag" in (tmp_path / "head.1.log").read_text()
            assert len(cluster.alive_nodes()) == 2 and len(cluster.nodes) == 2
            assert cluster.node_id("head") != cluster.node_id("worker")
        finally:
            cluster.close()


def test_a_node_that_keeps_exiting_fails_with_its_log(tmp_path, monkeypatch):
    monkeypatch.setattr(TwoNodes, "_head_args", lambda self, cpus: ["--no-such-flag"])
    with pytest.raises(NodeExited, match="no-such-flag"):
        TwoNodes(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("head.*.log")) == [
        "head.1.log",
        "head.2.log",
        "head.3.log",
    ]
