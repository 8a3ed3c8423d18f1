"""vLLM is an optional extra (it cannot be installed on CPU-only machines): without it, a named error says how."""

from __future__ import annotations

import importlib.util

import pytest

from agentgym_r1.error import ConfigError, DependencyNotInstalled


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_vllm_backend_without_vllm_names_the_extra(chat):
    from agentgym_r1.adapters.backends.vllm import VLLMBackend

    with pytest.raises(DependencyNotInstalled, match=r'pip install "agentgym-r1\[vllm\]"'):
        VLLMBackend(chat, llm=object())


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm")
def test_vllm_backend_needs_exactly_one_engine(chat):
    from agentgym_r1.adapters.backends.vllm import VLLMBackend

    with pytest.raises(ConfigError, match="exactly one"):
        VLLMBackend(chat)


def test_importing_the_adapters_loads_no_torch():
    import subprocess
    import sys

    code = ("import sys, agentgym_r1.adapters, agentgym_r1.adapters.backends.hf, agentgym_r1.adapters.backends.vllm, "
            "agentgym_r1.adapters.backends.openai; print([m for m in ('torch', 'transformers', 'vllm', 'httpx') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
