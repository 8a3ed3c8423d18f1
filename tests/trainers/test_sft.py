"""Expert episodes for the supervised warm start, played through the rollout engine by a scripted backend (GSM8K's
expert, HotpotQA's searches, WebShop's several clicks), and trained with TRL's SFTTrainer on agent tokens only."""

from __future__ import annotations

import copy

import gymnasium as gym
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("trl")

import torch

import agentgym_r1  # noqa: F401  (registers the ids)
from agentgym_r1.adapters import ChatTokenizer, Prompt, RolloutConfig, RolloutEngine, SamplingParams
from agentgym_r1.adapters.backends.scripted import ScriptedBackend
from agentgym_r1.adapters.scratch import make_model, play_expert, render_chat, train_tokenizer
from agentgym_r1.envs.gsm8k.expert import expert_actions
from agentgym_r1.error import ConfigError
from agentgym_r1.leaderboard.baselines.hotpotqa import supporting_titles
from agentgym_r1.leaderboard.baselines.webshop import RuleShopperPolicy
from agentgym_r1.trainers.sft import expert_rows, policy_actions, sft, sft_dataset

GSM8K = ("AgentR1/GSM8K-v0", {"source": "synthetic", "min_steps": 1, "max_steps": 1})
HOTPOT = ("AgentR1/HotpotQA-v0", {"source": "synthetic", "parser": "tag", "top_k": 1, "system_prompt": "Answer it."})
WEBSHOP = ("AgentR1/WebShop-v0", {"source": "generated", "num_products": 200, "system_prompt": "Buy it."})


def hotpot_actions(task) -> list[str]:
    """Search each supporting title (first entity, then the bridge; or the two compared), then answer."""
    answer = task.answer[0] if isinstance(task.answer, list) else task.answer
    return [f"<search>{t}</search>" for t in supporting_titles(task.meta)] + [f"<answer>{answer}</answer>"]


def shopper_actions(task) -> list[str]:
    """The rule shopper's actions on ``task``, found by playing it in an env of its own."""
    return policy_actions(gym.make(WEBSHOP[0], **WEBSHOP[1]), RuleShopperPolicy(), 10)(task)


def tokenizer_for(spec, actions, seeds: int = 5, split_digits: bool = True) -> object:
    env, texts = gym.make(spec[0], **spec[1]), []
    for seed in range(seeds):
        play_expert(env, seed, actions)
        texts.append(render_chat(env.unwrapped.transcript.messages()))
    return train_tokenizer(texts, vocab_size=400, split_digits=split_digits, cross_spaces=True)


def reference_ids(spec, tokenizer, seed: int, actions) -> tuple[list[int], list[int], list[int]]:
    """The episode tokenized by hand, without the engine (what the old hand-written SFT path built): the first prompt,
    then each action and its end-of-turn token (mask 1) and the env's reply rendered after it (mask 0)."""
    chat, env = ChatTokenizer(tokenizer), gym.make(spec[0], **spec[1])
    env.reset(seed=seed)
    prompt, completion, mask = chat.prompt_ids(env.unwrapped.transcript.messages()), [], []
    for action in actions(env.unwrapped.task):
        ids = [*chat.encode(action), tokenizer.eos_token_id]
        completion, mask = completion + ids, mask + [1] * len(ids)
        before = len(env.unwrapped.transcript.messages())
        *_, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
        messages = env.unwrapped.transcript.messages()
        suffix = chat.suffix_ids(messages[: before + 1], messages[before + 1 :], tokenizer.eos_token_id)
        completion, mask = completion + suffix, mask + [0] * len(suffix)
    return prompt, completion, mask


def text(row, tokenizer, agent: bool) -> str:
    return tokenizer.decode([t for t, m in zip(row.completion_ids, row.env_mask, strict=True) if bool(m) == agent])


@pytest.mark.parametrize(
    ("spec", "actions", "split_digits"),
    [(GSM8K, expert_actions, True), (HOTPOT, hotpot_actions, True), (WEBSHOP, shopper_actions, False)],
    ids=["gsm8k", "hotpotqa", "webshop"],
)
def test_expert_rows_are_the_hand_tokenized_episode(spec, actions, split_digits):
    """The engine's rows of the scripted expert equal the episode tokenized by hand, token for token and mask for
    mask; the agent tokens decode to the expert's actions, each closed by its end-of-turn token."""
    tokenizer = tokenizer_for(spec, actions, seeds=3, split_digits=split_digits)
    batch = expert_rows(spec[0], spec[1], [0, 1], tokenizer, actions)
    assert len(batch.samples) == 2 and all(ep.success for ep in batch.episodes)
    for seed, row in zip([0, 1], batch.samples, strict=True):
        prompt, completion, mask = reference_ids(spec, tokenizer, seed, actions)
        assert (row.prompt_ids, row.completion_ids, row.env_mask) == (prompt, completion, mask)
        env = gym.make(spec[0], **spec[1])
        env.reset(seed=seed)
        assert text(row, tokenizer, agent=True) == "<|im_end|>".join(actions(env.unwrapped.task)) + "<|im_end|>"


def test_multi_turn_rows_mask_the_env_replies():
    tokenizer = tokenizer_for(HOTPOT, hotpot_actions)
    (row,) = expert_rows(*HOTPOT, [0], tokenizer, hotpot_actions).samples
    env = gym.make(HOTPOT[0], **HOTPOT[1])
    env.reset(seed=0)
    assert len(row.step_ends) == 3  # search, search the bridge, answer
    assert f"(Title: {env.unwrapped.task.meta['supporting_titles'][1]})" in text(row, tokenizer, agent=False)
    data = sft_dataset([row])[0]
    assert data["input_ids"] == row.prompt_ids + row.completion_ids
    assert sum(data["assistant_masks"]) == sum(row.env_mask) and data["assistant_masks"][: len(row.prompt_ids)] == [
        0
    ] * len(row.prompt_ids)


def test_step_layout_gives_one_row_per_turn():
    tokenizer = tokenizer_for(HOTPOT, hotpot_actions)
    batch = expert_rows(*HOTPOT, [0], tokenizer, hotpot_actions, layout="step")
    assert [r.turn for r in batch.samples] == [0, 1, 2]
    assert all(set(r.env_mask) == {1} for r in batch.samples)


def test_a_failing_expert_is_refused_unless_allowed():
    tokenizer = tokenizer_for(GSM8K, expert_actions)

    def wrong(task):
        return ["<answer>-1</answer>"]

    with pytest.raises(ConfigError, match="the expert failed its task on seed 0"):
        expert_rows(*GSM8K, [0], tokenizer, wrong)
    (row,) = expert_rows(*GSM8K, [0], tokenizer, wrong, require_success=False).samples
    assert row.reward <= 0 and not row.success


def test_reset_options_pick_each_episode_task():
    """With ``options`` each episode plays the task its reset options name (``{"index": i}``), not the seed's draw:
    the same seed with two indices gives the two tasks' episodes; options of another length are refused."""
    tokenizer = tokenizer_for(WEBSHOP, shopper_actions, seeds=2, split_digits=False)
    batch = expert_rows(*WEBSHOP, [0, 0], tokenizer, shopper_actions, options=[{"index": 3}, {"index": 7}])
    env = gym.make(WEBSHOP[0], **WEBSHOP[1])
    for index, row in zip((3, 7), batch.samples, strict=True):
        env.reset(seed=0, options={"index": index})
        assert row.prompt_ids == ChatTokenizer(tokenizer).prompt_ids(env.unwrapped.transcript.messages())
    assert batch.samples[0].prompt_ids != batch.samples[1].prompt_ids
    with pytest.raises(ConfigError, match="one options entry per seed: 2 seeds, 1 options"):
        expert_rows(*WEBSHOP, [0, 1], tokenizer, shopper_actions, options=[{"index": 3}])


def test_scripted_backend_cuts_a_turn_at_its_budget_and_refuses_an_unknown_context():
    tokenizer = tokenizer_for(GSM8K, expert_actions)
    chat = ChatTokenizer(tokenizer)
    env = gym.make(GSM8K[0], **GSM8K[1])
    env.reset(seed=0)
    prompt = chat.prompt_ids(env.unwrapped.transcript.messages())
    turn = [*chat.encode(expert_actions(env.unwrapped.task)[0]), tokenizer.eos_token_id]
    backend = ScriptedBackend({tuple(prompt): [turn]})
    (gen,) = backend.generate([prompt], [3], SamplingParams())
    assert gen.ids == turn[:3] and gen.finish_reason == "length"
    with pytest.raises(ConfigError, match="continues no script"):
        backend.generate([[*prompt[:-1], prompt[-1] + 1, 5]], [10], SamplingParams())
    # through the engine, an episode whose prompt has no script ends with generation_error, never the batch
    engine = RolloutEngine(ScriptedBackend({(1, 2, 3): [[4]]}), chat, RolloutConfig(seed=None))
    (episode,) = engine.rollout([Prompt(GSM8K[0], GSM8K[1], seed=0)]).episodes
    assert episode.end_reason == "generation_error" and "continues no script" in episode.error
    with pytest.raises(ConfigError, match="ended generation_error"):
        expert_rows(*GSM8K, [0], tokenizer, lambda task: [])


def test_sft_loss_is_the_mean_over_agent_tokens_only():
    """The first step's loss, reported by TRL's SFTTrainer, is the untrained model's mean negative log-likelihood of
    the agent tokens alone (env tokens and the prompt are context, never targets), computed here by hand."""
    tokenizer = tokenizer_for(HOTPOT, hotpot_actions)
    rows = expert_rows(*HOTPOT, range(4), tokenizer, hotpot_actions).samples
    model = make_model(tokenizer, hidden=32, layers=1, seed=0)
    start = copy.deepcopy(model).eval()
    losses = sft(
        model, tokenizer, rows, steps=2, batch_size=len(rows), lr=1e-2, warmup_steps=0, sampling="epochs", seed=0
    )
    nll, count = 0.0, 0
    with torch.no_grad():
        for row in rows:
            ids = torch.tensor([row.prompt_ids + row.completion_ids])
            logp = torch.log_softmax(start(ids).logits[0, :-1].float(), -1)
            targets = ids[0, 1:]
            mask = torch.tensor([0] * (len(row.prompt_ids) - 1) + list(row.env_mask), dtype=torch.bool)
            nll -= logp.gather(1, targets[:, None])[:, 0][mask].sum().item()
            count += int(mask.sum())
    assert len(losses) == 2
    assert losses[0] == pytest.approx(nll / count, rel=1e-4)
    moved = any(not torch.equal(a, b) for a, b in zip(model.parameters(), start.parameters(), strict=True))
    assert moved and losses[1] < losses[0]


def test_sft_takes_the_hand_written_loops_steps():
    """Issue 39: SFT through TRL makes the steps of the loop it replaced (batches drawn with replacement by a generator
    seeded with ``seed``, torch's AdamW, warm-up ``(s + 1) / w``, gradients clipped at 1, the model's mean loss), bit
    for bit. Before, its first step had lr 0 (transformers' warm-up is ``s / w``), its batches were shuffled epochs,
    and its optimizer and loss rounded differently: the HotpotQA proof's start scored 6.8% where the old loop's scored
    23.8%, and GSM8K's 14.7% where the old loop's, on the same rows and batches, scored 28.7%."""
    tokenizer = tokenizer_for(HOTPOT, hotpot_actions)
    rows = expert_rows(*HOTPOT, range(10), tokenizer, hotpot_actions).samples
    model = make_model(tokenizer, hidden=32, layers=1, seed=0)
    twin = copy.deepcopy(model).train()
    losses = sft(model, tokenizer, rows, steps=8, batch_size=3, lr=1e-2, warmup_steps=4, seed=5)

    gen = torch.Generator().manual_seed(5)
    opt = torch.optim.AdamW(twin.parameters(), lr=1e-2, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
    by_hand = []
    for _ in range(8):
        batch = [rows[i] for i in torch.randint(len(rows), (3,), generator=gen).tolist()]
        n = max(len(r.prompt_ids) + len(r.completion_ids) for r in batch)
        ids, att, lab = [], [], []
        for r in batch:
            x, pad = r.prompt_ids + r.completion_ids, n - len(r.prompt_ids) - len(r.completion_ids)
            ids.append(x + [tokenizer.pad_token_id] * pad)
            att.append([1] * len(x) + [0] * pad)
            agent = [t if m else -100 for t, m in zip(r.completion_ids, r.env_mask, strict=True)]
            lab.append([-100] * len(r.prompt_ids) + agent + [-100] * pad)
        loss = twin(input_ids=torch.tensor(ids), attention_mask=torch.tensor(att), labels=torch.tensor(lab)).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(twin.parameters(), 1.0)
        opt.step()
        sched.step()
        by_hand.append(loss.item())
    assert losses == by_hand  # bit for bit: the SFT runs are chaotic, so rounding alone moves where they land
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters(), strict=True))


def test_sft_refuses_bad_settings_before_training():
    tokenizer = tokenizer_for(GSM8K, expert_actions)
    rows = expert_rows(*GSM8K, [0], tokenizer, expert_actions).samples
    model = make_model(tokenizer, hidden=32, layers=1, seed=0)
    for kwargs, message in (
        ({"steps": 0}, "steps >= 1, got 0"),
        ({"steps": 1, "batch_size": 0}, "batch_size >= 1, got 0"),
        ({"steps": 1, "lr": float("nan")}, "lr > 0, got nan"),
        ({"steps": 1, "schedule": "step"}, "schedule must be one of"),
        ({"steps": 1, "sampling": "shuffle"}, "sampling must be one of"),
    ):
        with pytest.raises(ConfigError, match=message):
            sft(model, tokenizer, rows, **kwargs)
    with pytest.raises(ConfigError, match="at least one row"):
        sft_dataset([])
    with pytest.raises(ConfigError, match="at least one row"):
        sft(model, tokenizer, [], steps=1)


def test_policy_actions_refuses_no_turns():
    with pytest.raises(ConfigError, match="max_turns >= 1, got 0"):
        policy_actions(gym.make(WEBSHOP[0], **WEBSHOP[1]), RuleShopperPolicy(), 0)


def test_policy_actions_stops_at_max_turns():
    env = gym.make(WEBSHOP[0], **WEBSHOP[1])
    env.reset(seed=0)
    task = env.unwrapped.task
    full = policy_actions(gym.make(WEBSHOP[0], **WEBSHOP[1]), RuleShopperPolicy(), 10)(task)
    cut = policy_actions(gym.make(WEBSHOP[0], **WEBSHOP[1]), RuleShopperPolicy(), 2)(task)
    assert len(full) >= 3 and cut == full[:2]
