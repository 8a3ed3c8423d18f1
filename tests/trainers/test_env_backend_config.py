"""``env_backend`` in the trainers' configs: a GRPO step with its envs in worker processes trains on the same rows as
with threads; a bad backend is refused when the config is made."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from agentgym_r1.error import ConfigError  # noqa: E402
from tests.trainers.kit import grpo_args, run_one_step, tiny_model, tiny_tokenizer  # noqa: E402


def test_a_grpo_step_with_envs_in_worker_processes_sees_the_same_rows(tmp_path) -> None:
    tokenizer = tiny_tokenizer()
    rows = {}
    for backend in ("thread", "process"):
        torch.manual_seed(0)
        model = tiny_model(tokenizer)
        captured, changed = run_one_step(
            model, grpo_args(tmp_path / backend, env_backend=backend, env_workers=2), tokenizer
        )
        assert changed
        out = captured["out"]
        rows[backend] = (out["completion_ids"].tolist(), out["advantages"].tolist())
    assert rows["process"] == rows["thread"]


def test_a_bad_env_backend_is_refused_with_the_choices(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"unknown env_backend 'fork'.*'process'"):
        grpo_args(tmp_path, env_backend="fork")
    with pytest.raises(ConfigError, match="env_workers=-2 is negative"):
        grpo_args(tmp_path, env_workers=-2)
