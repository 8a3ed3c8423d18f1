"""GSM8K with a calculator tool."""

from agentgym_r1.envs.gsm8k.calculator import Calculator, evaluate
from agentgym_r1.envs.gsm8k.env import GSM8KEnv

__all__ = ["Calculator", "GSM8KEnv", "evaluate"]
