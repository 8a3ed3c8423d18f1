"""ALFWorld on the real TextWorld engine, with procedurally generated household games."""

from agentgym_r1.envs.alfworld.env import ALFWorldEnv

__all__ = ["ALFWorldEnv"]
