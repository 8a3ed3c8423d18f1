"""The one loader of a model directory (adapters/loading.py), as every caller meets it: the trainers, the
leaderboard's hf: and vllm: policies and the inspector read the same tokenizer, and a damaged file is a named error
wherever it is read."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym_r1.adapters.loading import load_model, load_tokenizer
from agentgym_r1.adapters.scratch import make_model, train_tokenizer
from agentgym_r1.error import ModelFilesError, PolicyError
from agentgym_r1.leaderboard.models import make_policy

CORPUS = ["<tool_call> calculator expression answer 1 2 3 + * </tool_call> <answer> </answer> has how many"] * 20


@pytest.fixture
def model_dir(tmp_path):
    path = tmp_path / "tiny"
    make_model(train_tokenizer(CORPUS, path, vocab_size=300), path, hidden=16, layers=1, heads=2)
    return path


def test_the_tokenizer_is_the_saved_one_for_every_caller(model_dir):
    """tokenizer.json read as is (AutoTokenizer beside the qwen2 config.json would rebuild it as a Qwen2 one)."""
    from transformers import PreTrainedTokenizerFast

    saved = PreTrainedTokenizerFast.from_pretrained(str(model_dir))
    loaded = load_tokenizer(str(model_dir))
    assert type(loaded) is PreTrainedTokenizerFast
    assert loaded.get_vocab() == saved.get_vocab() and loaded.chat_template == saved.chat_template


def test_a_model_to_play_is_in_eval_mode_on_its_device_and_one_to_train_in_float32(model_dir):
    import torch

    played = load_model(str(model_dir), device="cpu")
    assert not played.training and next(played.parameters()).device.type == "cpu"
    trained = load_model(str(model_dir))
    assert next(trained.parameters()).dtype == torch.float32


def test_a_damaged_tokenizer_is_a_named_error_naming_the_field(model_dir):
    (model_dir / "tokenizer.json").write_text('{"model": "not a tokenizer"', encoding="utf-8")
    with pytest.raises(ModelFilesError, match=r"model_init=.*its tokenizer cannot be loaded") as info:
        load_tokenizer(str(model_dir))
    assert info.value.__cause__ is not None


def test_the_hf_policy_answers_a_damaged_tokenizer_with_a_policy_error(model_dir):
    """Before the one loader, the leaderboard's own caught only OSError and ValueError, so a tokenizer.json that is
    JSON but not a tokenizer (a KeyError inside transformers) stopped the job with a traceback."""
    (model_dir / "tokenizer.json").write_text('{"model": {"type": "BPE"}}', encoding="utf-8")
    with pytest.raises(PolicyError, match="cannot be loaded"):
        make_policy(f"hf:{model_dir}", "AgentR1/GSM8K-v0")
