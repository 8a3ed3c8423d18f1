"""Servers for this package's envs (extra ``serve``): :mod:`agentgym_r1.serve.openenv_server` serves any registered
env with openenv-core's server (``agentgym-r1 serve env``)."""
