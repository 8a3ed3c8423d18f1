"""Tiny models built on the spot: a byte-level BPE tokenizer trained with ``tokenizers`` and a Qwen2-style causal
LM from a config. For tests, benchmarks and CPU experiments; nothing is downloaded.

:data:`QWEN_CHAT_TEMPLATE` renders messages as Qwen2.5 does (``<|im_start|>role\\n...<|im_end|>\\n``; consecutive
tool results grouped in one user turn, each in ``<tool_response>`` tags), without the tool-list preamble.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agentgym_r1.error import require

QWEN_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def train_tokenizer(texts: Iterable[str], path: str | Path, vocab_size: int = 512) -> Any:
    """Train a byte-level BPE on ``texts``, save it to ``path`` with the Qwen chat template and load it back.

    ``<|im_end|>`` is the eos token, ``<|endoftext|>`` the pad token. Loaded with ``PreTrainedTokenizerFast`` (with
    transformers 5, ``AutoTokenizer`` beside a qwen2 ``config.json`` would rebuild it as a Qwen2 tokenizer).
    """
    tokenizers = require("tokenizers", "train", "training a tiny tokenizer")
    transformers = require("transformers", "train", "training a tiny tokenizer")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                                pad_token="<|endoftext|>")
    fast.chat_template = QWEN_CHAT_TEMPLATE
    Path(path).mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(path))
    return transformers.PreTrainedTokenizerFast.from_pretrained(str(path))


def make_model(tokenizer: Any, path: str | Path | None = None, *, hidden: int = 64, layers: int = 2,
               heads: int = 4, max_positions: int = 2048, seed: int = 0) -> Any:
    """A randomly initialised Qwen2-style causal LM sized for ``tokenizer``; saved to ``path`` when given."""
    torch = require("torch", "train", "building a tiny model")
    transformers = require("transformers", "train", "building a tiny model")
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=max_positions,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if path is not None:
        model.save_pretrained(str(path))
    return model.eval()


def expert_actions(task: Any) -> list[str]:
    """A synthetic GSM8K task's expert episode as actions: one Hermes calculator call per step, then the answer."""
    calls = [json.dumps({"name": "calculator", "arguments": {"expression": e}}) for e in task.meta["expert"]]
    return [*(f"<tool_call>\n{c}\n</tool_call>" for c in calls), f"<answer>{task.answer}</answer>"]


def play_expert(env: Any, seed: int, actions: Callable[[Any], list[str]] = expert_actions) -> None:
    """Reset ``env`` with ``seed`` and play ``actions(task)`` (by default :func:`expert_actions`) until the episode
    ends; the episode is then in ``env.unwrapped.transcript``."""
    env.reset(seed=seed)
    for action in actions(env.unwrapped.task):
        _, _, term, trunc, _ = env.step(action)
        if term or trunc:
            break


def gsm8k_corpus(episodes: int = 40, seed: int = 0) -> list[str]:
    """Text of expert episodes of synthetic GSM8K (:func:`expert_actions`): a corpus to train a tiny tokenizer on."""
    import gymnasium as gym

    env = gym.make("AgentR1/GSM8K-v0", source="synthetic")
    texts = []
    for i in range(episodes):
        play_expert(env, seed + i)
        texts.append(env.unwrapped.transcript.text)
    env.close()
    return texts
