"""Every text-only chat template TRL ships, played by the rollout engine with a tiny tokenizer carrying the family's
special tokens: masks exact, the sequence the template's rendering with each turn as sampled, env logprobs zero."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agentgym_r1.adapters import ChatTokenizer, Prompt, RolloutConfig, RolloutEngine, SamplingParams
from agentgym_r1.adapters.families import MULTIMODAL_TEMPLATES, detect_family, trl_text_templates
from agentgym_r1.error import TemplateUnsupportedError
from tests.adapters.scripted import ScriptedBackend

pytest.importorskip("trl")
pytest.importorskip("transformers")

TEMPLATES = trl_text_templates()
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


def _echo(text: str) -> str:
    """Echo the text back.

    Args:
        text: what to echo
    """
    return text


ENV_KWARGS = {"tools": [_echo], "tasks": [{"prompt": "Say hi.", "answer": "hi"}]}
_CHATS: dict[str, ChatTokenizer] = {}


@pytest.fixture
def family_chat(tokenizer, request):
    """The ChatTokenizer of TRL's template ``request.param`` over a tiny tokenizer with that family's tokens."""
    from agentgym_r1.adapters.scratch import family_tokenizer

    name = request.param
    if name not in _CHATS:
        _CHATS[name] = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES[name]))
    return _CHATS[name]


def _actions(chat: ChatTokenizer) -> st.SearchStrategy[str]:
    specials = sorted(
        {*chat.family.end_of_turn, *chat.tokenizer.all_special_tokens[:8], "<tool_call>", "</tool_response>"}
    )
    text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=16)
    special = st.sampled_from(specials)
    call = st.builds(
        lambda t: f"<tool_call>{json.dumps({'name': '_echo', 'arguments': {'text': t}})}</tool_call>", text
    )
    return st.one_of(
        call,
        st.lists(call, min_size=2, max_size=3).map("\n".join),
        st.builds(lambda t: f"<answer>{t}</answer>", text),
        text,
        st.builds(lambda a, b, c: a + b + c, text, special, text),
    )


def _end_id(chat: ChatTokenizer) -> int:
    return chat.tokenizer.convert_tokens_to_ids(chat.family.end_of_turn[0])


def _as_sampled(chat: ChatTokenizer, script):
    """A sampler stops at its first end-of-turn token and samples at least one token."""
    stops = tuple(chat.tokenizer.decode([i]) for i in chat.stop_token_ids)
    return [(a + "." if a.endswith(stops) or not (a or e) else a, e) for a, e in script]


def _play(chat: ChatTokenizer, script):
    backend = ScriptedBackend(chat, lambda ctx, turn: script[min(turn, len(script) - 1)], end_id=_end_id(chat))
    engine = RolloutEngine(
        backend, chat, RolloutConfig(max_context_tokens=100_000, sampling=SamplingParams(max_new_tokens=100_000))
    )
    batch = engine.rollout([Prompt("AgentR1/ToolEnv-v0", ENV_KWARGS, seed=3, options={"index": 0})])
    engine.close()
    return batch, backend


def _rendered_with_turns(chat: ChatTokenizer, episode) -> str:
    """The template's rendering of the whole episode, each assistant turn replaced by its sampled text; where the
    turn ends with end-of-turn tokens whose text starts the template's closing, they stand for that text."""
    decode = chat.tokenizer.decode
    messages, k = [], 0
    for m in episode.messages:
        if m["role"] == "assistant":
            messages.append({"role": "assistant", "content": f"agentgymturn{k}x"})
            k += 1
        else:
            messages.append(m)
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    text = chat.render(messages[: last + 1], add_generation_prompt=False)
    out, pos = [], 0
    for k, turn in enumerate(episode.turns):
        mark = f"agentgymturn{k}x"
        at = text.index(mark, pos)
        out.append(text[pos:at])
        pos = at + len(mark)
        out.append(decode(turn.completion_ids))
        pos += next((len(w) for w in chat.written_closings(turn.completion_ids) if text.startswith(w, pos)), 0)
    return "".join(out)


def _renders_turns_as_given(chat: ChatTokenizer) -> bool:
    """Whether the template renders a past assistant turn as its generation prompt and the text as given (no
    structured calls, no prefilled ``<think>`` that history drops)."""
    mark = "agentgymturn0x"
    history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": mark}]
    return chat.shape.tool_role != "call" and all(
        chat.shape.generation_prompt + mark in chat.render(h, False)
        for h in (history, [*history, {"role": "user", "content": "r"}])
    )


@pytest.mark.parametrize("family_chat", sorted(TEMPLATES), indirect=True)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], phases=NO_SHRINK)
@given(data=st.data())
def test_every_family_plays_episodes_with_exact_masks(family_chat, data):
    chat = family_chat
    end = chat.tokenizer.decode([_end_id(chat)])
    script = _as_sampled(chat, data.draw(st.lists(st.tuples(_actions(chat), st.booleans()), min_size=1, max_size=6)))
    batch, backend = _play(chat, script)
    (episode,), (row,) = batch.episodes, batch.samples
    assert episode.end_reason in ("terminated", "turn_limit"), episode.error
    decode = chat.tokenizer.decode
    # The masked tokens are the sampled ids, untouched, and decode exactly to the actions.
    assert [t.completion_ids for t in episode.turns] == backend.sent
    expected = []
    for i, turn in enumerate(episode.turns):
        action, with_end = script[min(i, len(script) - 1)]
        assert turn.action == action
        expected.append(action + (end if with_end else ""))
    assert decode([i for i, m in zip(row.completion_ids, row.env_mask, strict=True) if m]) == "".join(expected)
    assert len(row.completion_ids) == len(row.env_mask) == len(row.logprobs)
    # Step ends on the last agent token of each turn; env logprobs zero.
    assert len(row.step_ends) == len(episode.turns) == len(row.step_rewards)
    for e in row.step_ends:
        assert row.env_mask[e] == 1 and (e + 1 == len(row.env_mask) or row.env_mask[e + 1] == 0)
    assert all(lp == 0.0 for lp, m in zip(row.logprobs, row.env_mask, strict=True) if not m)
    # The sequence is what the model was given: the first prompt rendered, then each turn and the env's suffix.
    first = next(i for i, m in enumerate(episode.messages) if m["role"] == "assistant")
    assert row.prompt_ids == chat.encode(chat.render(episode.messages[:first], add_generation_prompt=True))
    seq = list(row.prompt_ids)
    for turn in episode.turns:
        seq += turn.completion_ids + (turn.env_ids or [])
    assert seq == row.prompt_ids + row.completion_ids
    if _renders_turns_as_given(chat):  # one rendering of the whole episode gives the same text
        assert decode(row.prompt_ids + row.completion_ids) == _rendered_with_turns(chat, episode)


def test_the_families_covered_and_left_out(tokenizer):
    """The README lists what this module covers; the multimodal-only templates, left out, are refused when the
    ChatTokenizer is built, with the family and what is missing."""
    from agentgym_r1.adapters.families import trl_template
    from agentgym_r1.adapters.scratch import family_tokenizer

    for name in sorted(MULTIMODAL_TEMPLATES):
        with pytest.raises(TemplateUnsupportedError, match=rf"TRL's {name}.jinja.*text content.*multimodal-only"):
            ChatTokenizer(family_tokenizer(tokenizer, trl_template(name)))
    originals = sorted(n for n in TEMPLATES if not n.endswith("_training"))
    assert len(originals) == 38, originals
    assert {detect_family(TEMPLATES[n]).name for n in originals} >= {
        "gpt-oss",
        "llama3",
        "gemma",
        "gemma4",
        "cohere",
        "deepseek",
        "glm4",
        "phi3",
        "chatml",
    }


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("gemma", {"fold_system": True, "tool_role": "user", "merge_env": True}),
        ("gemma3", {"fold_system": False, "tool_role": "user", "merge_env": True}),
        ("cohere", {"fold_system": False, "tool_role": "user", "merge_env": True}),
        ("phi3", {"fold_system": False, "tool_role": "user", "merge_env": False}),
        ("gptoss", {"fold_system": False, "tool_role": "call", "merge_env": False}),
        ("qwen2_5", {"fold_system": False, "tool_role": "tool", "merge_env": False}),
    ],
)
def test_the_template_shape_is_probed(tokenizer, name, shape):
    """Regression: Gemma refused the system role, Gemma 3 and Cohere the env reply, gpt-oss the tool reply; Phi-3
    dropped tool results silently (the model never saw them)."""
    from agentgym_r1.adapters.scratch import family_tokenizer

    chat = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES[name]))
    assert {k: getattr(chat.shape, k) for k in shape} == shape
    messages = [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A"},
        {"role": "tool", "content": "R1"},
        {"role": "tool", "content": "R2"},
    ]
    rendered = chat.render(messages, add_generation_prompt=True)
    assert all(part in rendered for part in ("SYS", "Q", "R1", "R2"))


def test_gpt_oss_tool_calls_are_rendered_structured_and_kept_as_sampled(tokenizer):
    """The gpt-oss template needs the call on the assistant message; the sampled ids stay as sampled."""
    from agentgym_r1.adapters.scratch import family_tokenizer

    chat = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES["gptoss"]))
    action = (
        "<|channel|>analysis<|message|>echo it<|end|><|start|>assistant to=functions._echo<|channel|>"
        'commentary json<|message|>{"text": "abc"}'
    )
    history = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": action}]
    suffix = chat.suffix_text(
        history, [{"role": "tool", "content": "abc"}], _end_call := chat.tokenizer.convert_tokens_to_ids("<|call|>")
    )
    assert (
        suffix == '<|start|>functions._echo to=assistant<|channel|>commentary<|message|>"abc"<|end|><|start|>assistant'
    )
    assert chat.structure(action)["tool_calls"][0]["function"] == {"name": "_echo", "arguments": {"text": "abc"}}
    assert (
        _end_call in chat.stop_token_ids and chat.tokenizer.convert_tokens_to_ids("<|end|>") not in chat.stop_token_ids
    )


def test_a_template_that_cannot_serve_fails_before_the_first_rollout(tokenizer):
    from agentgym_r1.adapters.scratch import family_tokenizer

    no_prompt = "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
    with pytest.raises(TemplateUnsupportedError, match=r"family gemma .*add_generation_prompt"):
        ChatTokenizer(family_tokenizer(tokenizer, no_prompt))
    user_only = (
        "{% for m in messages %}{% if m['role'] != 'user' %}{{ raise_exception('only users') }}{% endif %}"
        "<|im_start|>user\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(TemplateUnsupportedError, match=r"family chatml .*assistant message.*only users"):
        ChatTokenizer(family_tokenizer(tokenizer, user_only))


def test_concatenated_rows_keep_the_reasoning_the_model_saw_where_qwen3_strips_it(tokenizer):
    """Qwen3's template drops the <think> blocks of turns before the last user message when it re-renders an episode;
    the concatenated row (the default) holds each turn as sampled, which is what the model was given next."""
    from agentgym_r1.adapters.scratch import family_tokenizer

    chat = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES["qwen3"]))
    call = '<think>\nplan\n</think>\n\n<tool_call>{"name": "_echo", "arguments": {"text": "x"}}</tool_call>'
    batch, _ = _play(chat, [(call, True), ("<think>\nhmm\n</think>\n\noops", True), ("<answer>hi</answer>", True)])
    (episode,), (row,) = batch.episodes, batch.samples
    assert [m["role"] for m in episode.messages[2:]] == ["assistant", "tool", "assistant", "user", "assistant"]
    first = episode.turns[0]
    seen_at_turn_3 = chat.tokenizer.decode(
        row.prompt_ids
        + first.completion_ids
        + first.env_ids
        + episode.turns[1].completion_ids
        + episode.turns[1].env_ids
    )
    assert "plan" in seen_at_turn_3 and "plan" in chat.tokenizer.decode(row.completion_ids)
    assert "plan" not in chat.render(episode.messages, add_generation_prompt=False)  # the template's re-rendering


NATIVE_CALLS = {  # each family's own tool call, as its model writes it after the generation prompt (Qwen3.6 and
    # Nemotron prompts open a <think> block, so their models write the reasoning's end first)
    "qwen2_5": '<tool_call>\n{"name": "_echo", "arguments": {"text": "abc"}}\n</tool_call><|im_end|>',
    "qwen3_6": "Echo it.\n</think>\n\n<tool_call>\n<function=_echo>\n<parameter=text>\nabc\n</parameter>\n</function>\n"
    "</tool_call><|im_end|>",
    "nemotron_3_nano": "Echo it.\n</think>\n<tool_call>\n<function=_echo>\n<parameter=text>\nabc\n</parameter>\n"
    "</function>\n</tool_call><|im_end|>",
    "llama3_1": '{"name": "_echo", "parameters": {"text": "abc"}}<|eot_id|>',
    "gptoss": "<|channel|>analysis<|message|>Echo it.<|end|><|start|>assistant to=functions._echo<|channel|>commentary "
    'json<|message|>{"text": "abc"}<|call|>',
    "glm4moe": "<tool_call>_echo\n<arg_key>text</arg_key>\n<arg_value>abc</arg_value>\n</tool_call><|observation|>",
    "lfm2_2_5": "<|tool_call_start|>[_echo(text='abc')]<|tool_call_end|><|im_end|>",
    "gemma4": '<|tool_call>call:_echo{text:<|"|>abc<|"|>}<tool_call|><|tool_response>',
    "deepseekv3": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>_echo\n"
    '```json\n{"text": "abc"}\n```'
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>",
}


# A malformed call: broken JSON is an invalid action (error observation, format penalty); the XML-style parsers of
# transformers read any text as a call, so a call without its argument is a failed call (the tool's error).
BROKEN = {
    name: (call.replace('"abc"', '"abc').replace('<|"|>abc<|"|>', '<|"|>abc'), "format")
    for name, call in NATIVE_CALLS.items()
}
BROKEN |= {
    "qwen3_6": ("Echo it.\n</think>\n\n<tool_call>\n<function=_echo>\n</function>\n</tool_call><|im_end|>", "call"),
    "nemotron_3_nano": (
        "Echo it.\n</think>\n<tool_call>\n<function=_echo>\n</function>\n</tool_call><|im_end|>",
        "call",
    ),
    "glm4moe": ("<tool_call>_echo\n</tool_call><|observation|>", "call"),
    "lfm2_2_5": ("<|tool_call_start|>[_echo()]<|tool_call_end|><|im_end|>", "call"),
}


@pytest.mark.parametrize("name", sorted(NATIVE_CALLS))
def test_parser_auto_reads_the_family_s_own_tool_calls(tokenizer, name):
    from agentgym_r1.adapters.scratch import family_tokenizer

    chat = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES[name]))
    kwargs = {**ENV_KWARGS, "parser": "auto", "tasks": [{"prompt": "Echo abc.", "answer": "abc"}]}
    broken, kind = BROKEN[name]
    script = [(NATIVE_CALLS[name], False), (broken, False), ("<answer>abc</answer>", True)]
    backend = ScriptedBackend(chat, lambda ctx, turn: script[turn], end_id=_end_id(chat))
    engine = RolloutEngine(backend, chat, RolloutConfig(sampling=SamplingParams(max_new_tokens=10_000)))
    batch = engine.rollout([Prompt("AgentR1/ToolEnv-v0", kwargs, seed=0)])
    (episode,), (row,) = batch.episodes, batch.samples
    call, bad, answer = episode.turns
    assert call.valid, call.error
    assert "abc" in chat.tokenizer.decode(call.env_ids)  # the tool ran and its result came back
    assert not bad.valid and (bad.reward_parts["format"] < 0) == (kind == "format"), bad.error
    assert ("Invalid action" if kind == "format" else "invalid arguments") in chat.tokenizer.decode(bad.env_ids)
    assert episode.success and episode.end_reason == "terminated"
    masked = [i for i, m in zip(row.completion_ids, row.env_mask, strict=True) if m]
    assert masked == call.completion_ids + bad.completion_ids + answer.completion_ids
    prompt = chat.tokenizer.decode(row.prompt_ids)
    if chat.lists_tools:  # the template lists the tools (tools=), the system prompt no longer does
        assert "_echo" in prompt and "<tools>" not in episode.messages[0]["content"]
    else:
        assert "_echo" in episode.messages[0]["content"]


@pytest.mark.parametrize("name", ["qwen2_5", "llama3_1"])  # a response-template reader, a documented-format reader
def test_parser_auto_plays_the_same_in_worker_processes(tokenizer, name):
    """The family's parser goes into the env's worker process with the env (it pickles) and reads the same calls."""
    from agentgym_r1.adapters.scratch import family_tokenizer

    chat = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES[name]))
    kwargs = {**ENV_KWARGS, "parser": "auto", "tasks": [{"prompt": "Echo abc.", "answer": "abc"}]}
    script = [(NATIVE_CALLS[name], False), ("<answer>abc</answer>", True)]
    rows = {}
    for env_backend in ("thread", "process"):
        backend = ScriptedBackend(chat, lambda ctx, turn: script[turn], end_id=_end_id(chat))
        engine = RolloutEngine(
            backend,
            chat,
            RolloutConfig(sampling=SamplingParams(max_new_tokens=10_000), env_backend=env_backend, env_workers=1),
        )
        try:
            batch = engine.rollout([Prompt("AgentR1/ToolEnv-v0", kwargs, seed=0)])
        finally:
            engine.close()
        (episode,), (row,) = batch.episodes, batch.samples
        assert episode.turns[0].valid and episode.success, (env_backend, episode.turns[0].error, episode.end_reason)
        rows[env_backend] = (row.prompt_ids, row.completion_ids, row.env_mask)
    assert rows["process"] == rows["thread"]


def _native_actions(name: str) -> st.SearchStrategy[str]:
    """The family's own call with drawn argument text (JSON-escaped where the format is JSON), or other text."""
    call = NATIVE_CALLS[name]
    words = st.text(st.characters(codec="utf-8", categories=("L", "N", "Zs")), min_size=1, max_size=12)
    as_json = '"abc"' in call
    native = words.map(
        lambda t: call.replace('"abc"', json.dumps(t)) if as_json else call.replace("abc", t.strip() or "x")
    )
    return st.one_of(native, st.builds(lambda t: f"<answer>{t}</answer>", words), words)


@pytest.mark.parametrize("name", sorted(NATIVE_CALLS))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], phases=NO_SHRINK)
@given(data=st.data())
def test_native_calls_keep_masks_exact(tokenizer, name, data):
    """parser="auto" episodes of native calls (gpt-oss's rendered from their parsed tool_calls): the masked tokens
    are the sampled ids, and the sequence is the prompt, each turn and the env's suffix."""
    from agentgym_r1.adapters.scratch import family_tokenizer

    if name not in _CHATS:
        _CHATS[name] = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES[name]))
    chat = _CHATS[name]
    script = [(a, False) for a in data.draw(st.lists(_native_actions(name), min_size=1, max_size=4))]
    kwargs = {**ENV_KWARGS, "parser": "auto"}
    backend = ScriptedBackend(chat, lambda ctx, turn: script[min(turn, len(script) - 1)])
    engine = RolloutEngine(
        backend, chat, RolloutConfig(max_context_tokens=100_000, sampling=SamplingParams(max_new_tokens=100_000))
    )
    batch = engine.rollout([Prompt("AgentR1/ToolEnv-v0", kwargs, seed=0)])
    (episode,), (row,) = batch.episodes, batch.samples
    assert episode.end_reason in ("terminated", "turn_limit"), episode.error
    assert [t.completion_ids for t in episode.turns] == backend.sent
    masked = [i for i, m in zip(row.completion_ids, row.env_mask, strict=True) if m]
    assert masked == [i for t in episode.turns for i in t.completion_ids]
    assert row.prompt_ids + row.completion_ids == row.prompt_ids + [
        i for t in episode.turns for i in t.completion_ids + (t.env_ids or [])
    ]
    starts = [i for i, m in enumerate(episode.messages) if m["role"] == "assistant"] + [len(episode.messages)]
    for k, turn in enumerate(episode.turns[:-1]):  # each suffix is the template's text after that turn
        at, nxt = starts[k], starts[k + 1]
        assert turn.env_ids == chat.suffix_ids(
            episode.messages[: at + 1], episode.messages[at + 1 : nxt], turn.completion_ids[-1]
        )
        if turn.action[:12] == NATIVE_CALLS[name][:12]:  # a native call: the env ran it and answered as the tool
            assert turn.valid and episode.messages[at + 1]["role"] == "tool", turn.error


def test_gemma4_tool_responses_come_inside_the_model_turn(tokenizer):
    """Gemma 4 renders the tool response right after the call, in the same model turn: the model stops on
    <|tool_response>, and the suffix is the response alone (no new turn, nothing the model did not see)."""
    from agentgym_r1.adapters.scratch import family_tokenizer

    chat = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES["gemma4"]))
    stop = chat.tokenizer.convert_tokens_to_ids("<|tool_response>")
    assert stop in chat.stop_token_ids
    history = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": '<|tool_call>call:_echo{text:<|"|>x<|"|>}<tool_call|>'},
    ]
    assert chat.suffix_text(history, [{"role": "tool", "content": "R"}], stop) == (
        'response:_echo{value:<|"|>R<|"|>}<tool_response|>'
    )


def test_cohere2_closing_written_by_the_model_is_not_rendered_again(tokenizer):
    """Command R7B closes a turn with <|END_RESPONSE|><|END_OF_TURN_TOKEN|>; both stand for the template's closing."""
    from agentgym_r1.adapters.scratch import family_tokenizer

    chat = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES["cohere2"]))
    ids = chat.encode("A<|END_RESPONSE|><|END_OF_TURN_TOKEN|>")
    history = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": chat.decode_action(ids)}]
    suffix = chat.suffix_text(history, [{"role": "user", "content": "U"}], ids)
    assert suffix.startswith("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>U")
    assert chat.suffix_text(history, [{"role": "user", "content": "U"}], ids[-1]).startswith("<|END_RESPONSE|>")


def test_gpt_oss_return_stands_for_the_end_history_writes(tokenizer):
    """gpt-oss ends a final answer with <|return|>, which the template writes as <|end|> once the turn is history:
    the sampled <|return|> stands for it, so no <|end|> is added after it."""
    from agentgym_r1.adapters.scratch import family_tokenizer

    chat = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES["gptoss"]))
    history = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "<|channel|>final<|message|>no"}]
    reply = [{"role": "user", "content": "Invalid"}]
    returned = chat.suffix_text(history, reply, chat.tokenizer.convert_tokens_to_ids("<|return|>"))
    assert returned == "<|start|>user<|message|>Invalid<|end|><|start|>assistant"
    assert chat.suffix_text(history, reply, None) == "<|end|>" + returned  # stopped on a stop string: scaffolding


MISTRAL = (  # a Mistral v3-style template (TRL 1.16 ships none): [INST] turns, [TOOL_CALLS] and [TOOL_RESULTS]
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}[SYSTEM_PROMPT]{{ m['content'] }}"
    "[/SYSTEM_PROMPT]{% elif m['role'] == 'user' %}[INST]{{ m['content'] }}[/INST]{% elif m['role'] == 'tool' %}"
    "[TOOL_RESULTS]{{ m['content'] }}[/TOOL_RESULTS]{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}"
    "{% endfor %}"
)


def test_mistral_tool_calls_are_read_without_a_response_template(tokenizer):
    from agentgym_r1.adapters.native import native_parser
    from agentgym_r1.adapters.scratch import family_tokenizer

    chat = ChatTokenizer(family_tokenizer(tokenizer, MISTRAL))
    assert chat.family.name == "mistral" and chat.response_template is None
    assert "[TOOL_CALLS]" in native_parser(chat).hint({})
    call = '[TOOL_CALLS][{"name": "_echo", "arguments": {"text": "abc"}}]</s>'
    kwargs = {**ENV_KWARGS, "parser": "auto", "tasks": [{"prompt": "Echo abc.", "answer": "abc"}]}
    script = [(call, False), ("<answer>abc</answer>", True)]
    backend = ScriptedBackend(chat, lambda ctx, turn: script[turn])
    batch = RolloutEngine(backend, chat).rollout([Prompt("AgentR1/ToolEnv-v0", kwargs, seed=0)])
    (episode,) = batch.episodes
    assert episode.turns[0].valid and episode.success
    assert chat.tokenizer.decode(episode.turns[0].env_ids) == "[TOOL_RESULTS]abc[/TOOL_RESULTS]"


def test_llama_eom_stands_for_the_eot_history_writes(tokenizer):
    from agentgym_r1.adapters.scratch import family_tokenizer

    chat = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES["llama3_1"]))
    eom = chat.tokenizer.convert_tokens_to_ids("<|eom_id|>")
    history = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": '{"name": "f", "parameters": {}}'}]
    assert chat.suffix_text(history, [{"role": "tool", "content": "R"}], eom).startswith("<|start_header_id|>ipython")


def test_parser_auto_gives_equal_envs_one_pool_key_and_pickles(tokenizer):
    """Regression: every resolve made a new NativeParser whose repr held its address, so the engine's env pools
    (keyed by the kwargs' repr) never reused an env made with parser="auto" and grew at every rollout."""
    import pickle

    from agentgym_r1.adapters.native import resolve_env_kwargs
    from agentgym_r1.adapters.scratch import family_tokenizer

    chat = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES["llama3_1"]))
    kwargs = {"source": "synthetic", "parser": "auto"}
    first, second = resolve_env_kwargs(kwargs, chat), resolve_env_kwargs(kwargs, chat)
    assert repr(sorted(first.items())) == repr(sorted(second.items()))
    assert "0x" not in repr(first["parser"])
    parser = pickle.loads(pickle.dumps(first["parser"]))
    assert parser.parse('{"name": "calculator", "parameters": {"expression": "1+2"}}', {}).calls[0].arguments == {
        "expression": "1+2"
    }


@pytest.mark.parametrize("name", ["qwen2_5", "gptoss", "llama3_1"])
def test_native_parsers_take_the_worst_shapes_as_invalid_actions(tokenizer, name):
    """Deep bracket nesting and opener runs at 100,000 characters: an invalid action, never an exception (transformers'
    JSON content parser raised RecursionError on nested brackets inside a call)."""
    from agentgym_r1.adapters.native import native_parser
    from agentgym_r1.adapters.scratch import family_tokenizer

    chat = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES[name]))
    parser = native_parser(chat)
    call = NATIVE_CALLS[name]
    deep = [
        call.replace('{"text": "abc"}', "[" * 50_000),
        "<tool_call>\n" + "[" * 99_000 + "\n</tool_call>",
        "<tool_call>" * 9_000,
        "to=functions." * 7_000,
        "[TOOL_CALLS]" * 8_000,
        "a" + " " * 99_998 + "[x",
    ]
    for text in deep:
        parsed = parser.parse(text, {"_echo": None})
        assert parsed.kind == "invalid", (text[:40], parsed)


TEMPLATE_FAMILIES = ["nemotron_3_nano", "qwen3_6", "glm4moe", "lfm2_2_5", "gemma4", "gptoss", "llama3_1"]


def _well_formed(name: str) -> list[str]:
    """Messages a model of the family means: its call, two calls, a long reasoning or answer around it, an answer."""
    call = NATIVE_CALLS[name]
    prose = "The capital, as the record says, is Paris. " * 400
    return [
        call,
        call.replace("abc", "a, b = c"),
        call.replace("abc", " x <y> </z\n w "),
        f"{prose}{call}",
        f"<answer>{prose}</answer>",
        call + "\n" + call if name not in ("llama3_1", "gptoss") else call,
        prose,
    ]


@pytest.mark.parametrize("name", TEMPLATE_FAMILIES)
def test_rewritten_response_templates_parse_well_formed_messages_as_transformers_does(tokenizer, name):
    """The linear rewrite of the family's response template, fed in chunks, reads every well-formed message as
    transformers' own ``parse_response`` does with the template as TRL ships it, in one piece."""
    from transformers.utils.chat_parsing import parse_response

    from agentgym_r1.adapters.scratch import family_tokenizer
    from agentgym_r1.adapters.tokenize import STREAM_CHUNK, parse_with_template, stock_response_template

    chat = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES[name]))
    stock = stock_response_template(chat.tokenizer, TEMPLATES[name])
    assert stock is not None
    prefix = chat.shape.generation_prompt
    texts = _well_formed(name)
    assert max(map(len, texts)) > 2 * STREAM_CHUNK  # the long ones cross chunk boundaries
    for text in texts:
        try:
            expected = dict(parse_response(text, stock, prefix=prefix))
        except ValueError:
            expected = None
        try:
            got = parse_with_template(text, chat.response_template, prefix)
        except ValueError:
            got = None
        assert got == expected, (name, text[:80])


def test_response_templates_have_no_pattern_that_rescans_to_the_end(tokenizer):
    """The patterns that made parsing quadratic are rewritten: Nemotron's reasoning lookahead is anchored, the
    XML-style tag values may not run over their opener, and names (gpt-oss's call name, the tag keys) are bounded."""
    from agentgym_r1.adapters.scratch import family_tokenizer

    def template(name):
        return ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES[name])).response_template["fields"]

    assert template("nemotron_3_nano")["reasoning_content"]["open_pattern"].startswith("\\G(?=")
    for name in ("qwen3_6", "nemotron_3_nano", "glm4moe"):
        tag = template(name)["tool_calls"]["content_args"]["tag_pattern"]
        assert "(?P<value>.*?)" not in tag and "(?!" in tag and "{1,256}" in tag, tag
    assert "(?P<name>\\S{1,256}?)" in template("gptoss")["tool_calls"]["open_pattern"]


CROWDED = {  # a marker of each family's format, past the marker cap, after the family's call opener
    "nemotron_3_nano": ("<tool_call>\n<function=_echo>\n", "<parameter=text>\n"),
    "qwen3_6": ("<tool_call>\n<function=_echo>\n", "<parameter=text>\n"),
    "glm4moe": ("<tool_call>_echo\n", "<arg_key>text</arg_key>\n<arg_value>"),
    "lfm2_2_5": ("<|tool_call_start|>[_echo(", "text='a', "),
    "gemma4": ("<|tool_call>call:_echo{text:", '<|"|>'),
    "gptoss": ("", "to=functions._echo"),
}


@pytest.mark.parametrize("name", sorted(CROWDED))
def test_texts_crowded_with_a_family_s_markers_are_invalid_actions_before_parsing(tokenizer, name):
    """More of one marker than any meant message holds (the parser's work grows with them: 70 s for Qwen3.5/Nemotron
    ``<parameter=`` runs at 100,000 characters before) is an invalid action naming the cap, and transformers' parser
    is never fed; at the cap the text still reaches it."""
    import transformers.utils.chat_parsing as chat_parsing

    from agentgym_r1.adapters.native import native_parser
    from agentgym_r1.adapters.scratch import family_tokenizer
    from agentgym_r1.adapters.tokenize import MAX_MARKERS, MAX_STRING_DELIMITERS

    chat = ChatTokenizer(family_tokenizer(tokenizer, TEMPLATES[name]))
    parser = native_parser(chat)
    head, marker = CROWDED[name]
    cap = MAX_STRING_DELIMITERS if name == "gemma4" else MAX_MARKERS
    fed: list[int] = []
    original = chat_parsing.ResponseParser.feed

    def counting(self, text):
        fed.append(len(text))
        return original(self, text)

    chat_parsing.ResponseParser.feed = counting
    try:
        crowded = parser.parse(head + marker * (cap + 1) + "a" * 50_000, {"_echo": None})
        assert crowded.kind == "invalid" and f"at most {cap}" in crowded.error, crowded
        assert fed == []
        parser.parse(head + marker * (cap // 4), {"_echo": None})
        assert fed  # under the cap: parsed
    finally:
        chat_parsing.ResponseParser.feed = original
