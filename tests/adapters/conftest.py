"""Fixtures for the adapter tests: a BPE tokenizer trained here and a tiny Qwen2-style model, built once per run."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    from agentgym_r1.adapters.scratch import train_tokenizer
    from agentgym_r1.testing import gsm8k_corpus

    return train_tokenizer(gsm8k_corpus(30), tmp_path_factory.mktemp("tokenizer"), vocab_size=400)


@pytest.fixture(scope="session")
def chat(tokenizer):
    from agentgym_r1.adapters.tokenize import ChatTokenizer

    return ChatTokenizer(tokenizer)


@pytest.fixture(scope="session")
def model(tokenizer, tmp_path_factory):
    torch = pytest.importorskip("torch")
    from agentgym_r1.adapters.scratch import make_model

    torch.set_num_threads(1)  # the machine is shared; one thread is also the fastest for a model this small
    path = tmp_path_factory.mktemp("model")
    make_model(tokenizer, path, hidden=64, layers=2)
    from transformers import Qwen2ForCausalLM

    return Qwen2ForCausalLM.from_pretrained(str(path)).eval()


@pytest.fixture(scope="module")
def ray():
    """A local Ray instance for env-backend tests (skipped without the ``ray`` extra)."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    started = not ray.is_initialized()
    if started:
        # address="local": a new instance, never the cluster that RAY_ADDRESS or /tmp/ray/ray_current_cluster names
        # (a `ray start` or a ray.cluster_utils.Cluster on this machine writes that file; Ray joins it when there is no
        # address, and then refuses num_cpus)
        ray.init(address="local", num_cpus=4, include_dashboard=False, logging_level="WARNING")  # 1 CPU per actor
    yield ray
    if started:
        ray.shutdown()
