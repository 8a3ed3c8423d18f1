"""A model and tokenizer built from scratch: a byte-level BPE tokenizer trained with ``tokenizers`` on episode text
and a Qwen2-style causal LM from a config, on the spot; nothing is downloaded. The leaderboard's main job trains its
agent from these (:mod:`agentgym_r1.leaderboard.training`), ``agentgym-r1 inspect --model tiny`` plays one, and the
tests, benchmarks and CPU proofs of learning build their tiny models with them (their fixed corpora are in
:mod:`agentgym_r1.testing`).

:data:`QWEN_CHAT_TEMPLATE` renders messages as Qwen2.5 does (``<|im_start|>role\\n...<|im_end|>\\n``; consecutive
tool results grouped in one user turn, each in ``<tool_response>`` tags), without the tool-list preamble.

Nothing here imports an env: the expert whose episodes make a corpus is given by the caller (e.g. GSM8K's
:func:`agentgym_r1.envs.gsm8k.expert.expert_actions`).
"""

from __future__ import annotations

import re
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


def train_tokenizer(
    texts: Iterable[str],
    path: str | Path | None = None,
    vocab_size: int = 512,
    *,
    split_digits: bool = False,
    cross_spaces: bool = False,
    words: bool = False,
) -> Any:
    """Train a byte-level BPE on ``texts`` with the Qwen chat template; saved to ``path`` and loaded back when given.

    ``<|im_end|>`` is the eos token, ``<|endoftext|>`` the pad token. ``split_digits`` makes every digit its own token
    (numbers can then be copied digit by digit); ``cross_spaces`` lets merges cross spaces, so a long constant system
    prompt becomes a few tokens (the CPU proofs of learning use both). Loaded with ``PreTrainedTokenizerFast``: with
    transformers 5, ``AutoTokenizer`` beside a qwen2 ``config.json`` would rebuild it as a Qwen2 tokenizer.
    """
    tokenizers = require("tokenizers", "train", "training a tiny tokenizer")
    transformers = require("transformers", "train", "training a tiny tokenizer")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=not (cross_spaces or words))
    if words:
        split = [pre_tokenizers.Split(tokenizers.Regex("[^A-Za-z]"), behavior="isolated")]
    else:
        split = [pre_tokenizers.Digits(individual_digits=True)] if split_digits else []
    tok.pre_tokenizer = pre_tokenizers.Sequence([*split, byte_level]) if split else byte_level
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer)
    extra = (
        {"bos_token": None, "additional_special_tokens": ["<|im_start|>"]}
        if split_digits or cross_spaces or words
        else {}
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", **extra
    )
    fast.chat_template = QWEN_CHAT_TEMPLATE
    if path is None:
        return fast
    Path(path).mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(path))
    return transformers.PreTrainedTokenizerFast.from_pretrained(str(path))


def make_model(
    tokenizer: Any,
    path: str | Path | None = None,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    max_positions: int = 2048,
    seed: int = 0,
    mlp_ratio: int = 2,
    dtype: Any = None,
) -> Any:
    """A randomly initialised Qwen2-style causal LM sized for ``tokenizer`` (MLP width ``mlp_ratio * hidden``), in
    ``dtype`` (default float32); saved to ``path`` when given. vLLM's CPU attention needs ``hidden / heads`` in
    32, 64, 80, 96, 112, 128 or 256 (e.g. hidden 128 with 2 heads)."""
    torch = require("torch", "train", "building a tiny model")
    transformers = require("transformers", "train", "building a tiny model")
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * mlp_ratio,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if dtype is not None:
        model = model.to(dtype)
    if path is not None:
        model.save_pretrained(str(path))
    return model.eval()


def play_expert(env: Any, seed: int, actions: Callable[[Any], list[str]]) -> None:
    """Reset ``env`` with ``seed`` and play ``actions(task)`` (an env's expert, e.g. GSM8K's
    :func:`~agentgym_r1.envs.gsm8k.expert.expert_actions`) until the episode ends; the episode is then in
    ``env.unwrapped.transcript``."""
    env.reset(seed=seed)
    for action in actions(env.unwrapped.task):
        _, _, term, trunc, _ = env.step(action)
        if term or trunc:
            break


def expert_corpus(
    env_id: str, env_kwargs: dict[str, Any], actions: Callable[[Any], list[str]], episodes: int = 40, seed: int = 0
) -> list[str]:
    """Text of ``episodes`` expert episodes (``actions``, seeds ``seed``, ``seed + 1``...) of ``env_id``: a corpus to
    train a tiny tokenizer on."""
    import gymnasium as gym

    env = gym.make(env_id, **env_kwargs)
    texts = []
    for i in range(episodes):
        play_expert(env, seed + i, actions)
        texts.append(env.unwrapped.transcript.text)
    env.close()
    return texts


def render_chat(messages: list[dict[str, str]], add_generation_prompt: bool = False) -> str:
    """:data:`QWEN_CHAT_TEMPLATE` rendered without a tokenizer (to build a tokenizer's training corpus)."""
    jinja2 = require("jinja2", "train", "rendering the chat template")
    return jinja2.Template(QWEN_CHAT_TEMPLATE).render(messages=messages, add_generation_prompt=add_generation_prompt)


_SPECIAL = re.compile(
    r"<\|[\w./\"-]+\|>|<\|[a-z_]+>|<[a-z_]+\|>|<｜[^｜<>]+｜>|<(?:start|end)_of_[a-z]+>|\[/?[A-Z_]+\]"
    r"|<[A-Z_]+_TOKEN>|\[gMASK\]|<sop>"
)


def family_tokenizer(base: Any, chat_template: str) -> Any:
    """A copy of the tiny tokenizer ``base`` that carries the special tokens ``chat_template`` writes (found in its
    text), with the family's bos and end-of-turn tokens (:mod:`agentgym_r1.adapters.families`) as ``bos_token`` and
    ``eos_token``, and ``chat_template`` as its template: a stand-in for that family's real tokenizer."""
    transformers = require("transformers", "train", "building a family tokenizer")
    from agentgym_r1.adapters.families import detect_family

    family = detect_family(chat_template)
    tokens = sorted(
        set(_SPECIAL.findall(chat_template))
        | set(family.end_of_turn)
        | {family.eos_token}
        | ({family.bos} if family.bos else set())
    )
    backend = base.backend_tokenizer.__class__.from_str(base.backend_tokenizer.to_str())
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token=family.eos_token, bos_token=family.bos, pad_token="<|endoftext|>"
    )
    tok.add_special_tokens(
        {"additional_special_tokens": [t for t in tokens if t not in (family.eos_token, family.bos)]}
    )
    tok.chat_template = chat_template
    return tok
