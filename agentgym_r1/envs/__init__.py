"""The environments. Each id is registered with a string entry point, so a module loads only on ``gym.make``."""

from __future__ import annotations

from gymnasium.envs.registration import WrapperSpec, register, registry

# (id, entry point, turn limit). Bump the version when rewards or observations change.
ENV_SPECS: tuple[tuple[str, str, int], ...] = (
    ("AgentR1/ToolEnv-v0", "agentgym_r1.envs.tool_env:ToolEnv", 8),
    ("AgentR1/GSM8K-v0", "agentgym_r1.envs.gsm8k:GSM8KEnv", 6),
    ("AgentR1/PythonMath-v0", "agentgym_r1.envs.pythonmath:PythonMathEnv", 6),
    ("AgentR1/HotpotQA-v0", "agentgym_r1.envs.hotpotqa:HotpotQAEnv", 6),
    ("AgentR1/WebShop-v0", "agentgym_r1.envs.webshop:WebShopEnv", 15),
    ("AgentR1/ALFWorld-v0", "agentgym_r1.envs.alfworld:ALFWorldEnv", 50),
    ("AgentR1/ALFWorld-v1", "agentgym_r1.envs.alfworld:ALFWorldEnv", 50),
)

# Defaults an older version keeps. ALFWorld-v0 started without instructions (its first observation was the game's
# intro alone); v1 opens with how to act (``INSTRUCTIONS``).
VERSION_KWARGS: dict[str, dict[str, object]] = {"AgentR1/ALFWorld-v0": {"system_prompt": ""}}


# A served env (``agentgym-r1 serve env``) played over the network; not in ENV_SPECS: it needs a server's url.
REMOTE_ENV_ID = "AgentR1/Remote-v0"

# Applied outside Gymnasium's TimeLimit: terminated and truncated are never both true.
_EPISODE_END = WrapperSpec("EpisodeEnd", "agentgym_r1.core.wrappers:EpisodeEnd", {})


def register_envs() -> None:
    """Register every ``AgentR1/*`` id. The turn limit is Gymnasium's ``max_episode_steps``."""
    for env_id, entry_point, turns in ENV_SPECS:
        if env_id not in registry:
            register(
                id=env_id,
                entry_point=entry_point,
                max_episode_steps=turns,
                additional_wrappers=(_EPISODE_END,),
                kwargs=dict(VERSION_KWARGS.get(env_id, {})),
            )
    if REMOTE_ENV_ID not in registry:  # the server applies the turn limit and EpisodeEnd
        register(id=REMOTE_ENV_ID, entry_point="agentgym_r1.envs.remote:RemoteEnv")


def env_ids() -> list[str]:
    return [env_id for env_id, _, _ in ENV_SPECS]
