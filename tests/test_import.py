import subprocess
import sys

import gymnasium as gym

import agentgym_r1


def test_import_loads_no_heavy_dependency():
    code = (
        "import sys, agentgym_r1; heavy = [m for m in ('torch', 'transformers', 'trl', 'datasets') "
        "if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_every_env_id_is_registered_under_the_namespace():
    ids = agentgym_r1.env_ids()
    assert "AgentR1/GSM8K-v0" in ids and "AgentR1/ToolEnv-v0" in ids
    for env_id in ids:
        assert env_id.startswith("AgentR1/")
        spec = gym.spec(env_id)
        assert isinstance(spec.entry_point, str)
        assert spec.max_episode_steps and spec.max_episode_steps > 0


def test_register_is_idempotent():
    agentgym_r1.register_envs()
    served = [agentgym_r1.envs.REMOTE_ENV_ID]  # plays a served env; not in env_ids(): it needs a server's url
    assert sorted(i for i in gym.registry if i.startswith("AgentR1/")) == sorted(agentgym_r1.env_ids() + served)
    assert isinstance(gym.spec(agentgym_r1.envs.REMOTE_ENV_ID).entry_point, str)  # loads openenv only on make
