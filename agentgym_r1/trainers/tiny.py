"""A tiny Qwen2-style model and BPE tokenizer built locally, for tests and the CPU proof of learning.

Nothing is downloaded: the tokenizer is trained with ``tokenizers`` on texts the caller gives (digits split one per
token, so numbers can be copied digit by digit), and the model is a randomly initialised ``Qwen2ForCausalLM`` from a
small config. The chat template is the adapters' Qwen2.5 template.
Unlike :func:`agentgym_r1.adapters.tiny.train_tokenizer`, BPE merges may cross spaces here, so a long constant
system prompt becomes a few tokens: the CPU proof of learning spends its time on the task, not the preamble.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentgym_r1.adapters.tiny import QWEN_CHAT_TEMPLATE, SPECIAL_TOKENS
from agentgym_r1.error import require


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``texts``, with ChatML special tokens and template."""
    tokenizers = require("tokenizers", "train", "the tiny tokenizer")
    transformers = require("transformers", "train", "the tiny tokenizer")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = QWEN_CHAT_TEMPLATE
    return fast


def tiny_qwen2(tokenizer: Any, hidden_size: int = 128, layers: int = 2, heads: int = 4, seed: int = 0,
               max_positions: int = 2048) -> Any:
    """A randomly initialised ``Qwen2ForCausalLM`` sized for CPU tests (about 0.5M parameters at the defaults)."""
    transformers = require("transformers", "train", "the tiny model")
    torch = require("torch", "train", "the tiny model")
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=hidden_size * 4,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=max_positions, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def render_chat(messages: list[dict[str, str]], add_generation_prompt: bool = False) -> str:
    """:data:`QWEN_CHAT_TEMPLATE` rendered without a tokenizer (to build the tokenizer's training corpus)."""
    jinja2 = require("jinja2", "train", "rendering the chat template")
    return jinja2.Template(QWEN_CHAT_TEMPLATE).render(messages=messages, add_generation_prompt=add_generation_prompt)
