"""Fixtures for the adapter tests: a BPE tokenizer trained here and a tiny Qwen2-style model, built once per run."""

from __future__ import annotations

import pytest

from agentgym_r1.adapters.backends.base import Generation, SamplingParams


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    from agentgym_r1.adapters.tiny import gsm8k_corpus, train_tokenizer

    return train_tokenizer(gsm8k_corpus(30), tmp_path_factory.mktemp("tokenizer"), vocab_size=400)


@pytest.fixture(scope="session")
def chat(tokenizer):
    from agentgym_r1.adapters.tokenize import ChatTokenizer

    return ChatTokenizer(tokenizer)


@pytest.fixture(scope="session")
def model(tokenizer, tmp_path_factory):
    torch = pytest.importorskip("torch")
    from agentgym_r1.adapters.tiny import make_model

    torch.set_num_threads(1)  # the machine is shared; one thread is also the fastest for a model this small
    path = tmp_path_factory.mktemp("model")
    make_model(tokenizer, path, hidden=64, layers=2)
    from transformers import Qwen2ForCausalLM

    return Qwen2ForCausalLM.from_pretrained(str(path)).eval()


class ScriptedBackend:
    """A token backend whose ids are known in advance, so tests can check that exactly these ids come back.

    ``act(context_ids, turn) -> (text, ends_with_eos)`` gives each turn's action; the backend encodes the text and
    appends the eos id when asked (the turn then ends with the model's own end-of-turn token; without it, it ends as
    on a stop string). ``turn`` is the round number (the turn index when every episode starts together).
    """

    def __init__(self, chat, act) -> None:
        self.chat = chat
        self.act = act
        self.turn = 0
        self.sent: list[list[int]] = []

    def generate(self, contexts, budgets, params: SamplingParams) -> list[Generation]:
        out = []
        eos = self.chat.tokenizer.eos_token_id
        for context, budget in zip(contexts, budgets, strict=True):
            text, with_eos = self.act(list(context), self.turn)
            ids = self.chat.encode(text) + ([eos] if with_eos else [])
            reason = "eos" if with_eos else "stop"
            if len(ids) > budget:
                ids, reason = ids[:budget], "length"
            self.sent.append(list(ids))
            out.append(Generation(ids, [-0.5] * len(ids), reason))
        self.turn += 1
        return out
