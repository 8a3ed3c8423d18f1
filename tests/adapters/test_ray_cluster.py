"""The Ray env backend on a two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head node and a
second raylet, both on 127.0.0.1): the env actors spread over both nodes, and a node removed in the middle of a
rollout ends only the episodes whose envs it held, with ``env_error``; the other episodes play to their end, and the
lost actor starts again on the node that is left."""

from __future__ import annotations

import time

import pytest

from agentgym_r1.adapters import Prompt, RolloutConfig, RolloutEngine, SamplingParams
from tests.adapters.scripted import ScriptedBackend

GSM8K = {"source": "synthetic"}
# A lost node is noticed after 4 missed health checks 0.5 s apart (Ray's default: 5 missed checks 3 s apart); the
# raylets start no idle workers ahead of time (each would import Ray on a 2-core machine for nothing); and the env
# actors' processes keep this process's priority (Ray's default raises their niceness to 19, where on a busy machine
# an actor took half a minute to start).
SYSTEM_CONFIG = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 4,
    "enable_worker_prestart": False,
    "prestart_worker_first_driver": False,
    "worker_niceness": 0,
}


@pytest.fixture
def cluster(monkeypatch):
    """A head node (4 logical CPUs: Ray's default policy would put both env actors there, and they fit there once
    the other node is gone) and a second node (1) as two raylets on 127.0.0.1, this process their driver; every Ray
    process is stopped at the end."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    if ray.is_initialized():
        ray.shutdown()  # another module's local instance (module-scoped there, finished by now)
    # ray.init rewrites a 127.0.0.1 address into this machine's network address (ray/_private/worker.py, init:
    # services.canonicalize_bootstrap_address -> resolve_ip_for_localhost -> get_node_ip_address), where a cluster
    # bound to 127.0.0.1 does not listen: the driver then waits for a GCS that never answers until Ray gives up.
    # get_node_ip_address keeps the loopback address when ray_constants.ENABLE_RAY_CLUSTER is false (what Ray does
    # on macOS and Windows, env RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, read once at import: hence the attribute).
    monkeypatch.setattr(ray._private.ray_constants, "ENABLE_RAY_CLUSTER", False)
    cluster = cluster_utils.Cluster()
    try:
        head = cluster.add_node(
            num_cpus=4,
            node_ip_address="127.0.0.1",
            include_dashboard=False,
            no_monitor=True,  # no autoscaler
            include_log_monitor=False,  # the actors' output stays in their log files
            _system_config=SYSTEM_CONFIG,
        )
        second = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")  # each add waits for its node (30 s)
        ray.init(address=cluster.address, logging_level="WARNING")
        cluster.wait_for_nodes(timeout=30)
        yield ray, cluster, head, second
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_env_actors_spread_over_both_nodes_and_a_lost_node_ends_only_its_episodes(cluster, chat):
    ray, nodes, head, second = cluster
    seen: dict[str, object] = {}

    def act(context, turn):
        """At turn 1 (every env has taken its first step) the second node goes, with the env actor on it; this turn
        lasts until Ray has found the node dead, as a model's turn of a few seconds would."""
        if turn == 1 and not seen:
            seen["nodes"], seen["where"] = engine.envs.nodes(), dict(engine.envs.where)
            nodes.remove_node(second, allow_graceful=False)
            seen["dead"] = wait_until_dead(ray, second.node_id)
        return "just thinking", False

    config = RolloutConfig(
        max_turns=3, env_backend="ray", env_workers=2, env_timeout=60, sampling=SamplingParams(max_new_tokens=40)
    )
    engine = RolloutEngine(ScriptedBackend(chat, act), chat, config)
    try:
        batch = engine.rollout([Prompt("AgentR1/GSM8K-v0", GSM8K, seed=s) for s in range(4)])
        assert seen["dead"], "Ray did not find the removed node dead within 30 s"
        assert sorted(seen["nodes"]) == sorted([head.node_id, second.node_id])  # one actor on each node
        lost = {slot for slot, w in seen["where"].items() if seen["nodes"][w] == second.node_id}
        assert len(lost) == 2  # the resets went to the least busy actor: two episodes each
        ends = [e.end_reason for e in batch.episodes]
        assert ends == ["env_error" if i in lost else "max_turns" for i in range(4)], [e.error for e in batch.episodes]
        for i in lost:
            error = batch.episodes[i].error
            assert "died" in error and second.node_id in error, error  # Ray's ActorDiedError names the lost node
            assert len(batch.episodes[i].turns) == 2  # what it played before the node went is kept
        # the lost actor started again on the head node; the next rollout plays every episode there
        assert engine.envs.nodes() == [head.node_id] * 2
        again = engine.rollout([Prompt("AgentR1/GSM8K-v0", GSM8K, seed=s) for s in range(4)])
        assert [e.end_reason for e in again.episodes] == ["max_turns"] * 4
    finally:
        engine.close()


def wait_until_dead(ray, node_id: str, timeout: float = 30.0) -> bool:
    """Whether the GCS marks the node dead within ``timeout`` s. A removed node's worker processes go on answering
    calls for a moment, until they find their raylet gone (a lost machine's would not answer at all); once the node
    is dead, so are its actors, and a call to one raises ``RayActorError``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(n["Alive"] for n in ray.nodes() if n["NodeID"] == node_id):
            return True
        time.sleep(0.1)
    return False
