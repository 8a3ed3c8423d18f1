from agentgym_r1.core.spaces import UnicodeText
from agentgym_r1.core.transcript import Span, Transcript


def test_spans_tile_the_text_and_messages_keep_content():
    t = Transcript()
    t.append("env", "SYS", role="system")
    t.append("env", "\n\n")
    t.append("env", "Q?", role="user")
    s = t.append("agent", "<tool_call>x</tool_call>", role="assistant")
    t.append("env", "<tool_response>\n1\n</tool_response>", role="tool", content="1")
    assert s == Span(7, 31, "agent")
    assert t.text == "SYS\n\nQ?<tool_call>x</tool_call><tool_response>\n1\n</tool_response>"
    assert t.agent_text() == "<tool_call>x</tool_call>"
    assert t.messages() == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "Q?"},
        {"role": "assistant", "content": "<tool_call>x</tool_call>"},
        {"role": "tool", "content": "1"},
    ]
    mask = t.agent_mask()
    assert len(mask) == len(t) and sum(mask) == 24 and mask[7] == 1 and mask[6] == 0


def test_unicode_text_space():
    space = UnicodeText(10, seed=0)
    assert space.contains("<é\x00\n中>")
    assert not space.contains("x" * 11)
    assert not space.contains(b"bytes")
    samples = [space.sample() for _ in range(50)]
    assert all(space.contains(s) for s in samples) and len(set(samples)) > 1
