"""The rollout engine with the transformers backend and a tiny Qwen2-style model, and with bad input."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest

from agentgym_r1.adapters import ChatTokenizer, Prompt, RolloutConfig, RolloutEngine, SamplingParams
from agentgym_r1.error import ConfigError
from tests.adapters.scripted import ScriptedBackend

torch = pytest.importorskip("torch")

GSM8K = {"source": "synthetic"}


def hf(model, chat):
    from agentgym_r1.adapters.backends.hf import HFBackend

    return HFBackend(model, chat)


def recomputed_logprobs(model, prompt, completion, temperature=1.0):
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(completion)[:, None]).squeeze(1).tolist()


def test_a_batch_of_groups_with_exact_ids_and_logprobs(model, chat):
    config = RolloutConfig(
        samples_per_prompt=2,
        max_turns=2,
        max_context_tokens=2048,
        sampling=SamplingParams(max_new_tokens=12, temperature=0.9),
    )
    engine = RolloutEngine(hf(model, chat), chat, config)
    batch = engine.rollout([Prompt("AgentR1/GSM8K-v0", GSM8K, seed=s) for s in (1, 2)])
    assert len(batch.episodes) == len(batch.samples) == 4
    by_group = {}
    for ep in batch.episodes:
        by_group.setdefault(ep.group, set()).add(ep.task_id)
        assert ep.end_reason in ("terminated", "max_turns", "turn_limit")
    assert all(len(tasks) == 1 for tasks in by_group.values()) and len(by_group) == 2
    for row, ep in zip(batch.samples, batch.episodes, strict=True):
        assert len(row.completion_ids) == len(row.env_mask) == len(row.logprobs)
        agent = [(i, lp) for i, (lp, m) in enumerate(zip(row.logprobs, row.env_mask, strict=True)) if m]
        assert len(agent) == ep.num_agent_tokens
        ref = recomputed_logprobs(model, row.prompt_ids, row.completion_ids, temperature=0.9)
        for i, lp in agent:  # the sampler's logprobs are the model's, token for token
            assert lp <= 0 and math.isclose(lp, ref[i], abs_tol=2e-3)
    tensors = batch.to_tensors(chat.pad_token_id)
    assert tensors["completion_ids"].shape == tensors["env_mask"].shape == tensors["logprobs"].shape
    assert torch.isfinite(tensors["logprobs"]).all()
    assert batch.timings["generate"] > 0 and batch.timings["env"] > 0


def test_stop_strings_and_stop_ids_end_the_turn_on_the_sampled_token(model, tokenizer):
    from agentgym_r1.adapters.backends.hf import HFBackend

    chat = ChatTokenizer(tokenizer)
    prompt = chat.prompt_ids([{"role": "user", "content": "What is 2 + 3?"}])
    greedy = SamplingParams(max_new_tokens=24, temperature=0, stop=())
    free = HFBackend(model, chat).generate([prompt], [24], greedy)[0]
    assert free.finish_reason == "length" and len(free.ids) == 24
    text = tokenizer.decode(free.ids[:10])
    stop = text[-3:] if text[-3:].strip() else text[-5:]
    stopped = HFBackend(model, chat).generate([prompt], [24], SamplingParams(24, temperature=0, stop=(stop,)))[0]
    n = len(stopped.ids)
    assert stopped.finish_reason == "stop" and stopped.ids == free.ids[:n]
    assert stop in tokenizer.decode(stopped.ids) and stop not in tokenizer.decode(stopped.ids[:-1])
    target = free.ids[6]
    by_id = ChatTokenizer(tokenizer, stop_token_ids=[target])
    ended = HFBackend(model, by_id).generate([prompt], [24], greedy)[0]
    assert ended.finish_reason == "eos" and ended.ids == free.ids[: free.ids.index(target) + 1]


def test_context_overflow_truncates_and_says_so(model, chat):
    prompt_len = len(chat.prompt_ids(_first_messages()))
    config = RolloutConfig(max_context_tokens=prompt_len + 5, sampling=SamplingParams(max_new_tokens=16))
    batch = RolloutEngine(hf(model, chat), chat, config).rollout([Prompt("AgentR1/GSM8K-v0", GSM8K, seed=1)])
    (ep,) = batch.episodes
    assert ep.end_reason == "context_limit" and "max_context_tokens" in ep.error
    assert len(ep.token_ids()) <= prompt_len + 5
    assert ep.turns[-1].finish_reason in ("context", "eos", "stop")


def test_completion_budget_bounds_agent_and_env_tokens(chat):
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>'
    config = RolloutConfig(max_completion_tokens=120, sampling=SamplingParams(max_new_tokens=40))
    engine = RolloutEngine(ScriptedBackend(chat, lambda c, t: (call, True)), chat, config)
    (ep,), (row,) = (batch := engine.rollout([Prompt("AgentR1/GSM8K-v0", GSM8K, seed=1)])).episodes, batch.samples
    assert ep.end_reason == "context_limit" and "max_completion_tokens=120" in ep.error
    assert len(row.completion_ids) <= 120 and len(ep.turns) >= 2


def _first_messages():
    env = gym.make("AgentR1/GSM8K-v0", **GSM8K)
    env.reset(seed=1)
    messages = env.unwrapped.transcript.messages()
    env.close()
    return messages


class _Fragile(gym.Env):
    """Raises on its second step (or at reset when asked): an env with a bug."""

    def __init__(self, fail_at_reset=False):
        self.observation_space = self.action_space = gym.spaces.Text(1000)
        self.fail_at_reset = fail_at_reset

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.fail_at_reset:
            raise RuntimeError("index out of range")
        self.t = 0
        return "go", {}

    def step(self, action):
        self.t += 1
        if self.t == 2:
            raise ValueError("the env broke")
        return "again", 0.0, False, False, {}


def test_bad_input_ends_episodes_with_a_reason_and_the_batch_goes_on(chat):
    never_closed = '<tool_call>{"name": "calculator", "arguments": {"expression": "1 + 1 + 1 + 1 + 1 + 1 + 1'
    specials = "<|im_start|><|im_start|><|endoftext|>"

    def act(context, turn):
        text = chat.tokenizer.decode(context[-400:])
        if "Grace" in text or "has $" in text:
            return never_closed, False
        return specials, False

    config = RolloutConfig(max_turns=3, sampling=SamplingParams(max_new_tokens=12))
    engine = RolloutEngine(ScriptedBackend(chat, act), chat, config)
    batch = engine.rollout(
        [Prompt("AgentR1/GSM8K-v0", GSM8K, seed=1), Prompt(_Fragile), Prompt(lambda: _Fragile(fail_at_reset=True))]
    )
    gsm, fragile, broken = batch.episodes
    assert gsm.end_reason == "max_turns" and all(t.finish_reason == "length" for t in gsm.turns)
    assert all(not t.valid for t in gsm.turns) and gsm.reward_parts["format"] < 0  # penalised, played on
    assert fragile.end_reason == "env_error" and "the env broke" in fragile.error and len(fragile.turns) == 2
    assert broken.end_reason == "env_error" and "index out of range" in broken.error and broken.placeholder
    assert batch.samples[2].env_mask == [0]  # a placeholder row carries no gradient
    tensors = batch.to_tensors(chat.pad_token_id)
    assert all(torch.isfinite(t.float()).all() for t in tensors.values())


def test_special_tokens_only_actions_reach_the_env_as_text(chat):
    engine = RolloutEngine(
        ScriptedBackend(chat, lambda c, t: ("<|im_start|><|im_start|>", True)),
        chat,
        RolloutConfig(max_turns=2, samples_per_prompt=3, env_workers=2),
    )
    batch = engine.rollout([Prompt("AgentR1/GSM8K-v0", GSM8K), Prompt("AgentR1/GSM8K-v0", GSM8K)])
    for ep in batch.episodes:
        assert [t.action for t in ep.turns] == ["<|im_start|><|im_start|>"] * 2
        assert ep.end_reason == "max_turns" and all(not t.valid for t in ep.turns)
    # Prompts without a seed get one per group: the samples of a group play the same task.
    tasks = [{e.task_id for e in batch.episodes if e.group == g} for g in (0, 1)]
    assert all(len(t) == 1 for t in tasks) and tasks[0] != tasks[1]


def test_step_layout_rows_share_the_episode_for_advantages(model, chat):
    config = RolloutConfig(
        samples_per_prompt=2, max_turns=2, layout="step", context=1, sampling=SamplingParams(max_new_tokens=8)
    )
    batch = RolloutEngine(hf(model, chat), chat, config).rollout([Prompt("AgentR1/GSM8K-v0", GSM8K, seed=7)])
    assert len(batch.samples) == sum(len(e.turns) for e in batch.episodes)
    for ep in batch.episodes:
        rows = [r for r in batch.samples if r.episode_id == ep.episode_id]
        assert [r.turn for r in rows] == list(range(len(ep.turns)))
        assert {r.reward for r in rows} == {ep.reward}
    trl = batch.to_trl()
    assert set(trl) >= {"prompt_ids", "completion_ids", "logprobs", "env_mask"}
    assert [len(c) for c in trl["completion_ids"]] == [len(m) for m in trl["env_mask"]]


def test_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="samples_per_prompt"):
        RolloutConfig(samples_per_prompt=0)
    with pytest.raises(ConfigError, match="max_new_tokens"):
        SamplingParams(max_new_tokens=0)
    with pytest.raises(ConfigError, match="ChatTokenizer"):
        RolloutEngine(ScriptedBackend(None, None))


def test_a_seeded_rollout_is_reproducible(model, chat):
    config = RolloutConfig(samples_per_prompt=2, max_turns=2, seed=11, sampling=SamplingParams(max_new_tokens=10))
    engine = RolloutEngine(hf(model, chat), chat, config)
    first, second = (engine.rollout([Prompt("AgentR1/GSM8K-v0", GSM8K, seed=3)]) for _ in range(2))
    assert [r.completion_ids for r in first.samples] == [r.completion_ids for r in second.samples]
    assert first.samples[0].completion_ids != first.samples[1].completion_ids  # samples of a group differ
