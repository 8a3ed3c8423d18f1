"""Key/value reuse across turns (HFBackend.rollout_session): the same episodes as full prefills, with fewer tokens
fed."""

from __future__ import annotations

import math

import pytest

from agentgym_r1.adapters import Prompt, RolloutConfig, RolloutEngine, SamplingParams

torch = pytest.importorskip("torch")

GSM8K = {"source": "synthetic"}


def backend(model, chat, reuse=True):
    from agentgym_r1.adapters.backends.hf import HFBackend

    return HFBackend(model, chat, neutral=True, reuse_prefix=reuse)


def play(model, chat, reuse, temperature, seeds=(1, 2, 3), turns=4):
    be = backend(model, chat, reuse)
    config = RolloutConfig(
        samples_per_prompt=2,
        max_turns=turns,
        max_context_tokens=2048,
        seed=5,
        sampling=SamplingParams(max_new_tokens=10, temperature=temperature),
    )
    engine = RolloutEngine(be, chat, config)
    try:
        return engine.rollout([Prompt("AgentR1/GSM8K-v0", GSM8K, seed=s) for s in seeds]), be
    finally:
        engine.close()


def assert_same_episodes(a, b):
    assert [len(e.turns) for e in a.episodes] == [len(e.turns) for e in b.episodes]
    for ea, eb in zip(a.episodes, b.episodes, strict=True):
        assert ea.messages == eb.messages and ea.reward == eb.reward
        for ta, tb in zip(ea.turns, eb.turns, strict=True):
            assert ta.completion_ids == tb.completion_ids
            assert all(math.isclose(x, y, abs_tol=1e-4) for x, y in zip(ta.logprobs, tb.logprobs, strict=True))


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_reuse_plays_the_episodes_of_full_prefills(model, chat, temperature):
    full, plain = play(model, chat, reuse=False, temperature=temperature)
    reused, be = play(model, chat, reuse=True, temperature=temperature)
    assert plain.prefix.reused == 0
    # every round after the first continued the cache, and skipped the tokens it held
    assert be.prefix.reused == max(len(e.turns) for e in reused.episodes) - 1 >= 2
    assert be.prefix.saved_tokens > sum(len(e.prompt_ids) for e in reused.episodes)
    assert_same_episodes(full, reused)
    assert be.prefix.kept is None and not be.prefix.active  # the session closed with the rollout


def test_nothing_is_kept_outside_a_session(model, chat):
    """A direct generate call keeps no cache, so weights changed between two calls are always the ones used."""
    be = backend(model, chat)
    prompt = chat.prompt_ids([{"role": "user", "content": "What is 2 + 3?"}])
    greedy = SamplingParams(max_new_tokens=8, temperature=0)
    first = be.generate([prompt], [8], greedy)[0]
    assert be.prefix.kept is None
    with be.rollout_session():
        again = be.generate([prompt], [8], greedy)[0]
        assert be.prefix.kept is not None
        longer = prompt + first.ids + prompt
        continued = be.generate([longer], [8], greedy)[0]
        assert be.prefix.reused == 1
    assert first.ids == again.ids
    assert continued.ids == be.generate([longer], [8], greedy)[0].ids


def test_reuse_passes_the_cache_by_the_name_transformers_takes(model, chat):
    """A call that continues a kept cache hands it to ``generate`` and reads it back without a deprecated name
    (transformers 5.24 renamed ``past_key_values`` to ``cache`` and warns on the old one, both ways)."""
    from tests.conftest import deprecations

    be = backend(model, chat)
    prompt = chat.prompt_ids([{"role": "user", "content": "What is 2 + 3?"}])
    greedy = SamplingParams(max_new_tokens=4, temperature=0)
    with deprecations() as found, be.rollout_session():
        (first,) = be.generate([prompt], [4], greedy)
        be.generate([prompt + first.ids + prompt], [4], greedy)
        assert be.prefix.reused == 1 and be.prefix.kept is not None
    assert found == []


def test_pads_fed_after_a_row_stopped_are_masked_out(model, chat):
    """A row that stops early is fed pads while the others go on; the next call must not attend to them."""
    be = backend(model, chat)
    a = chat.prompt_ids([{"role": "user", "content": "What is 2 + 3?"}])
    b = chat.prompt_ids([{"role": "user", "content": "Name a prime number."}])
    greedy = SamplingParams(max_new_tokens=12, temperature=0, stop=())
    reply = chat.prompt_ids([{"role": "user", "content": "Go on."}])
    with be.rollout_session():
        first = be.generate([a, b], [12, 3], greedy)
        assert [len(g.ids) for g in first] == [12, 3]
        nexts = [a + first[0].ids + reply, b + first[1].ids + reply]
        continued = be.generate(nexts[::-1], [12, 12], greedy)  # rows picked out of order
        assert be.prefix.reused == 1
    fresh = be.generate(nexts[::-1], [12, 12], greedy)
    for c, f in zip(continued, fresh, strict=True):
        assert c.ids == f.ids
        assert all(math.isclose(x, y, abs_tol=1e-4) for x, y in zip(c.logprobs, f.logprobs, strict=True))


def test_a_planned_cache_is_handed_over(model, chat):
    """The kept cache is selected in place for the call that reuses it, so it is no longer kept: a call that then
    fails cannot leave rows behind that no longer match their prefixes."""
    be = backend(model, chat)
    a = chat.prompt_ids([{"role": "user", "content": "What is 2 + 3?"}])
    greedy = SamplingParams(max_new_tokens=4, temperature=0)
    with be.rollout_session():
        (first,) = be.generate([a], [4], greedy)
        longer = a + first.ids + a
        assert be.prefix.plan([longer], chat.pad_token_id, "cpu") is not None
        assert be.prefix.kept is None and be.prefix.plan([longer], chat.pad_token_id, "cpu") is None


def test_a_context_that_extends_no_kept_row_is_prefilled_in_full(model, chat):
    be = backend(model, chat)
    a = chat.prompt_ids([{"role": "user", "content": "What is 2 + 3?"}])
    b = chat.prompt_ids([{"role": "user", "content": "Name a prime."}])
    greedy = SamplingParams(max_new_tokens=6, temperature=0)
    with be.rollout_session():
        be.generate([a], [6], greedy)
        other = be.generate([b + a], [6], greedy)[0]
        assert be.prefix.reused == 0
    assert other.ids == be.generate([b + a], [6], greedy)[0].ids


def test_a_cache_with_too_many_holes_is_dropped(model, chat):
    """Rows that stop early leave masked positions behind; past twice the longest context the call prefills again."""
    be = backend(model, chat)
    short = chat.prompt_ids([{"role": "user", "content": "Hi"}])
    greedy = SamplingParams(max_new_tokens=200, temperature=0, stop=())
    with be.rollout_session():
        long, tiny = be.generate([short, short], [200, 1], greedy)
        assert len(long.ids) == 200 and len(tiny.ids) == 1
        # the kept width is prompt + 199; the short row continues with 2 tokens: holes would dominate
        assert be.prefix.plan([short + tiny.ids + [5]], chat.pad_token_id, "cpu") is None
        assert be.prefix.plan([short + long.ids + [5]], chat.pad_token_id, "cpu") is not None


def test_a_sliding_window_model_is_not_reused(tokenizer, chat, tmp_path):
    """Only a plain full-attention cache can have its rows picked and positions masked; others prefill every call."""
    from transformers import Qwen2ForCausalLM

    from agentgym_r1.adapters.scratch import make_model

    make_model(tokenizer, tmp_path, hidden=64, layers=2)
    windowed = Qwen2ForCausalLM.from_pretrained(
        str(tmp_path),
        use_sliding_window=True,
        sliding_window=16,
        max_window_layers=0,
        layer_types=["sliding_attention"] * 2,
    ).eval()
    full, _ = play(windowed, chat, reuse=False, temperature=0.0, seeds=(1,), turns=3)
    reused, be = play(windowed, chat, reuse=True, temperature=0.0, seeds=(1,), turns=3)
    assert be.prefix.reused == 0
    assert_same_episodes(full, reused)
