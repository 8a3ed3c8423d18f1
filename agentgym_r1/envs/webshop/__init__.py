"""WebShop: find, configure and buy a product on a text shopping site (Yao et al., 2022)."""

from agentgym_r1.envs.webshop.catalogue import Catalogue, Goal, Product
from agentgym_r1.envs.webshop.data import load_catalogue
from agentgym_r1.envs.webshop.env import WebShopEnv
from agentgym_r1.envs.webshop.reward import get_reward

__all__ = ["Catalogue", "Goal", "Product", "WebShopEnv", "get_reward", "load_catalogue"]
