"""``examples/trl_environment_factory.py``: GRPO steps with TRL's own tool loop on a served GSM8K env, tiny model.

The tiny model is taught one calculator call first, so TRL parses real tool calls, the served env answers them, and
the env's reward (0.1 per valid call here) comes back through ``get_reward``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import load_script
from tests.serve.conftest import served, sessions, skip_without_serve

skip_without_serve()
for _module in ("trl", "torch", "transformers", "datasets", "tokenizers"):
    pytest.importorskip(_module, reason='needs the train and hf extras: pip install "agentgym-r1[train,hf]"')

ROOT = Path(__file__).resolve().parents[2]


def test_grpo_with_trl_tool_loop_on_a_served_env(tmp_path, monkeypatch):
    import torch

    torch.set_num_threads(1)
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    example = load_script("examples/trl_environment_factory.py", register=True)
    with served("AgentR1/GSM8K-v0", {"source": "synthetic", "valid_call_reward": 0.1}, max_sessions=8) as url:
        trainer = example.main(["--url", url, "--max-steps", "2", "--output-dir", str(tmp_path)])
        live = sessions(url)["live_envs"]
    logs = [log for log in trainer.state.log_history if "reward" in log]
    assert len(logs) == 2 and trainer.state.global_step == 2
    assert live == len(trainer.environments) == 4  # one served session per rollout, pooled by TRL
    for log in logs:
        assert log["tools/call_frequency"] > 0 and log["tools/failure_frequency"] == 0
        # Every reward is the served env's: 0.1 per valid calculator call, through get_reward.
        assert log["reward"] == log["rewards/ServedGSM8K/mean"] > 0
        assert math.isclose(log["reward"], 0.1 * log["tools/call_frequency"], abs_tol=1e-6)
