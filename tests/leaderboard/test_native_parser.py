"""``--env-kwargs '{"parser": "auto"}'`` with an ``hf:`` policy: the rollout engine puts in the model family's own
tool-call parser (read from the model directory's tokenizer), not the family-blind reader ``"auto"`` is outside it."""

from __future__ import annotations

import pytest

from agentgym_r1.cli import main

GSM8K = "AgentR1/GSM8K-v0"


def test_hf_policy_resolves_parser_auto_to_the_model_s_family(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("trl")
    from agentgym_r1.adapters.backends.hf import HFBackend
    from agentgym_r1.adapters.families import trl_text_templates
    from agentgym_r1.adapters.scratch import family_tokenizer, make_model, train_tokenizer

    path = tmp_path / "llama"
    base = train_tokenizer(["calculator expression answer 1 2 3 + * how many"] * 20, vocab_size=300)
    tokenizer = family_tokenizer(base, trl_text_templates()["llama3_1"])
    tokenizer.save_pretrained(str(path))
    make_model(tokenizer, path, hidden=16, layers=1, heads=2)
    prompts: list[str] = []
    generate = HFBackend.generate

    def spy(self, contexts, budgets, params):  # records what the model is given, then generates as usual
        prompts.extend(self.chat.tokenizer.decode(list(c)) for c in contexts)
        return generate(self, contexts, budgets, params)

    monkeypatch.setattr(HFBackend, "generate", spy)
    argv = [
        "eval",
        "--policy",
        f"hf:{path}?max_new_tokens=4",
        "--env",
        GSM8K,
        "--source",
        "synthetic",
        "--episodes",
        "1",
        "--results",
        str(tmp_path / "r.sqlite"),
    ]
    assert main([*argv, "--env-kwargs", '{"parser": "auto"}']) == 0
    native = prompts[0]
    # the Llama 3.1 parser: the template lists the tools (its tools=), the system prompt no longer does
    assert "Given the following functions" in native and "calculator" in native
    assert "<tools>" not in native and "your own tool-call format" in native
    prompts.clear()
    assert main(argv) == 0  # the default (Hermes) lists the tools in the system prompt
    assert "<tools>" in prompts[0] and "Given the following functions" not in prompts[0]
