"""The Ray env backend on a two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head node and a
second raylet, each with its own logical CPUs): the env actors spread over both nodes, and a node removed in the
middle of a rollout ends only the episodes whose envs it held, with ``env_error``; the rollout goes on, and the next
one runs on the node that is left."""

from __future__ import annotations

import pytest

from agentgym_r1.adapters import Prompt, RolloutConfig, RolloutEngine, SamplingParams
from tests.adapters.scripted import ScriptedBackend

GSM8K = {"source": "synthetic"}


@pytest.fixture
def cluster():
    """A head node (4 logical CPUs) and a worker node (2) as two raylets on 127.0.0.1, this process its driver."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    if ray.is_initialized():
        ray.shutdown()  # another module's local instance (module-scoped there, finished by now)
    cluster = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 4,
            "include_dashboard": False,
            "node_ip_address": "127.0.0.1",
            # a lost node is noticed within ~2 s (Ray's default: 5 missed checks 3 s apart)
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 4},
        },
    )
    try:
        worker = cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1")
        ray.init(address=cluster.address, logging_level="WARNING")
        cluster.wait_for_nodes(timeout=60)
        yield cluster, worker, ray
    finally:
        ray.shutdown()
        cluster.shutdown()


def engine_on(backend):
    config = RolloutConfig(
        max_turns=3, env_backend="ray", env_workers=2, env_timeout=60, sampling=SamplingParams(max_new_tokens=40)
    )
    return RolloutEngine(backend, backend.chat, config)


def test_env_actors_spread_over_both_nodes(cluster, chat):
    _, worker, ray = cluster
    engine = engine_on(ScriptedBackend(chat, lambda c, t: ("<answer>1</answer>", True)))
    try:
        batch = engine.rollout([Prompt("AgentR1/GSM8K-v0", GSM8K, seed=s) for s in range(4)])
        assert [e.error for e in batch.episodes] == [None] * 4
        nodes = engine.envs.nodes()
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert len(alive) == 2 and set(nodes) == alive  # one actor on each node
        assert worker.node_id in nodes
    finally:
        engine.close()


def test_a_node_removed_mid_rollout_ends_only_its_episodes(cluster, chat):
    nodes, worker, _ = cluster
    removed = {}

    def act(context, turn):
        """At turn 1 (after every env's first step) the worker node goes, with the actor on it."""
        if turn == 1 and not removed:
            removed["slots"] = [i for i, n in enumerate(engine.envs.nodes()) if n == worker.node_id]
            nodes.remove_node(worker, allow_graceful=False)
        return "<answer>1</answer>" if turn > 5 else "just thinking", False

    engine = engine_on(ScriptedBackend(chat, act))
    try:
        batch = engine.rollout([Prompt("AgentR1/GSM8K-v0", GSM8K, seed=s) for s in range(4)])
        assert len(removed["slots"]) == 1
        lost = removed["slots"][0]  # resets went to the least busy actor: episodes w and w + 2 on actor w
        ends = [e.end_reason for e in batch.episodes]
        expected = ["env_error" if i % 2 == lost else "max_turns" for i in range(4)]
        assert ends == expected, [e.error for e in batch.episodes]
        assert all("died" in e.error for e in batch.episodes if e.end_reason == "env_error")
        assert len(batch.episodes[lost].turns) == 2  # the episode kept what it played before the node went
        # the lost actor was replaced on the head node; the next rollout plays every episode there
        assert worker.node_id not in engine.envs.nodes()
        again = engine.rollout([Prompt("AgentR1/GSM8K-v0", GSM8K, seed=s) for s in range(4)])
        assert [e.end_reason for e in again.episodes] == ["max_turns"] * 4
    finally:
        engine.close()
