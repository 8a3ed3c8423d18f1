"""HotpotQA: multi-hop question answering with a search tool."""

from agentgym_r1.envs.hotpotqa.env import HotpotQAEnv, qa_reward
from agentgym_r1.envs.hotpotqa.tools import SearchTool

__all__ = ["HotpotQAEnv", "SearchTool", "qa_reward"]
