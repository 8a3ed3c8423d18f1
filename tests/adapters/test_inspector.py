"""The mask inspector: every token drawn once, agent cells exactly the trained ids, the CLI on a saved batch."""

from __future__ import annotations

import json

import pytest

from agentgym_r1.adapters.inspector import cells, load_rows, save_batch, to_ansi, to_html, token_texts
from agentgym_r1.cli import main
from agentgym_r1.error import ConfigError
from tests.adapters.test_tokenize import play

CALL = '<tool_call>{"name": "_echo", "arguments": {"text": "ünï ✓"}}</tool_call>'


@pytest.fixture
def batch(chat):
    batch, _ = play(chat, [(CALL, True), ("junk", False), ("<answer>hi</answer>", True)])
    return batch


def test_cells_split_the_row_exactly_by_the_mask(batch, chat):
    (row,) = batch.samples
    row_cells = cells(
        {
            "prompt_ids": row.prompt_ids,
            "completion_ids": row.completion_ids,
            "env_mask": row.env_mask,
            "step_ends": row.step_ends,
            "step_rewards": row.step_rewards,
        },
        chat.tokenizer,
    )
    agent = [i for c in row_cells if c.source == "agent" for i in c.ids]
    env = [i for c in row_cells if c.source == "env" for i in c.ids]
    assert agent == [i for i, m in zip(row.completion_ids, row.env_mask, strict=True) if m]
    assert env == [i for i, m in zip(row.completion_ids, row.env_mask, strict=True) if not m]
    assert [i for c in row_cells if c.source == "prompt" for i in c.ids] == row.prompt_ids
    assert [c.step for c in row_cells if c.step] == [(k, r) for k, r in enumerate(row.step_rewards)]
    assert "".join(c.text for c in row_cells) == chat.tokenizer.decode(row.prompt_ids + row.completion_ids)
    plain = to_ansi(row_cells, color=False)
    assert "«agent»<|im_start|>" not in plain and "«agent»" in plain and "«env»" in plain and "⟨step 2" in plain
    assert "\x1b[" in to_ansi(row_cells) and "\x1b[" not in plain
    page = to_html(row_cells)
    assert 'class="t agent' in page and "&lt;" in page and "<tool" not in page  # escaped, token by token


def test_a_character_split_across_tokens_is_one_cell(chat):
    ids = chat.encode("a ✓ b")
    assert len(ids) > len(["a", " ", "✓", " b"])  # the tiny tokenizer cuts ✓ into bytes
    texts = [t for t, _ in token_texts(chat.tokenizer, ids)]
    assert "".join(texts) == "a ✓ b" and "\ufffd" not in "".join(texts) and any("✓" in t for t in texts)


def test_inspect_reads_a_saved_batch(batch, tokenizer, tmp_path, capsys):
    path, page = tmp_path / "batch.json", tmp_path / "row.html"
    save_batch(batch, path)
    assert load_rows(path)[0]["completion_ids"] == batch.samples[0].completion_ids
    tok_dir = tmp_path / "tok"
    tokenizer.save_pretrained(str(tok_dir))
    assert main(["inspect", str(path), "--tokenizer", str(tok_dir), "--color", "never", "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "«agent»" in out and "agent tokens (trained)" in out and page.read_text().startswith("<!doctype html>")
    assert main(["inspect", str(path), "--tokenizer", str(tok_dir), "--row", "5"]) == 2
    assert "--row 5 is out of range" in capsys.readouterr().err


def test_inspect_refuses_what_is_not_a_batch(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rows": 1}))
    with pytest.raises(ConfigError, match="not a saved batch"):
        load_rows(bad)
    assert main(["inspect", str(bad), "--tokenizer", str(tmp_path)]) == 2
    assert main(["inspect"]) == 2 and "--model" in capsys.readouterr().err
    assert main(["inspect", "--model", "tiny", "--env-kwargs", "[1]"]) == 2
    assert "must be a JSON object" in capsys.readouterr().err


def test_inspect_plays_a_fresh_rollout_with_a_trl_template(capsys):
    pytest.importorskip("torch")
    pytest.importorskip("trl")
    assert (
        main(
            [
                "inspect",
                "--model",
                "tiny",
                "--template",
                "llama3_1",
                "--max-turns",
                "1",
                "--max-new-tokens",
                "4",
                "--color",
                "never",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "<|start_header_id|>" in out  # TRL's Llama 3.1 template, with the family's special tokens
    assert "agent tokens (trained)" in out
