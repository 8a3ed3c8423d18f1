"""Trainers: multi-turn GRPO (RLOO, REINFORCE++) on TRL's GRPOTrainer, multi-turn PPO, and the SFT warm start.

Submodules import torch, transformers and TRL; import them explicitly (``agentgym_r1.trainers.grpo``). This package
module imports nothing heavy, so ``import agentgym_r1`` stays free of torch.
"""
