"""AgentR1/HotpotQA-v0: rewards, sources, the search tool, bad input, and an oracle on the shared samples."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import agentgym_r1  # noqa: F401  (registers the ids)
from agentgym_r1.core.rewards import char_f1, qa_scores
from agentgym_r1.core.tasks import Task
from agentgym_r1.envs.hotpotqa import HotpotQAEnv, SearchTool, qa_reward
from agentgym_r1.envs.hotpotqa.data import load_file, synthetic
from agentgym_r1.envs.hotpotqa.synthetic import build_kb, generate_question
from agentgym_r1.error import (
    ConfigError,
    DataFormatError,
    DataNotFoundError,
    DataSourceUnavailableError,
    RetrievalError,
)
from agentgym_r1.leaderboard.baselines.hotpotqa import HotpotQAOraclePolicy
from agentgym_r1.leaderboard.policies import hermes_call
from agentgym_r1.leaderboard.runner import run_episode
from agentgym_r1.retrieval.base import Document, Hit, Retriever
from tests.conftest import shared_data

SAMPLE = ("hotpotqa", "hotpot_dev_distractor_sample_dev300.jsonl")

# (prediction, gold, em, f1, subem), by the official SQuAD v1.1 / HotpotQA evaluation scripts and Search-R1's subem.
QA_CASES = [
    ("yes", "yes", 1, 1, 1),
    ("Yes.", "yes", 1, 1, 1),
    ("no", "yes", 0, 0, 0),
    ("yes it is", "yes", 0, 0, 1),  # HotpotQA: yes/no/noanswer get F1 0 unless equal
    ("no", "no answer", 0, 0, 0),  # a yes/no prediction against another gold: 0, not partial overlap
    ("noanswer", "noanswer", 1, 1, 1),
    ("The Beatles", "Beatles", 1, 1, 1),  # articles dropped
    ("an apple a day", "apple day", 1, 1, 1),
    ("beatles!", "The Beatles.", 1, 1, 1),  # punctuation dropped
    ("  Tulsa ", "tulsa", 1, 1, 1),
    ("Chief of Protocol of the United States", "Chief of Protocol", 0, 2 / 3, 1),
    ("Greenwich Village", "Greenwich Village, New York City", 0, 2 * (2 / 5) / (1 + 2 / 5), 0),
    ("3677", "3,677 seated", 0, 2 / 3, 0),  # "3,677" normalises to "3677"
    ("Paris", "London", 0, 0, 0),
    ("", "London", 0, 0, 0),
    ("Téa Leoni", "Téa Leoni", 1, 1, 1),
    ("Obama", ["Barack Obama", "Obama"], 1, 1, 1),  # several golds: the best one counts
    ("President Barack Obama", ["Barack Obama", "Obama"], 0, 0.8, 1),
    ("Michelle", ["Barack Obama", "Obama"], 0, 0, 0),
]


@pytest.mark.parametrize(("prediction", "gold", "em", "f1", "subem"), QA_CASES)
def test_qa_scores_follow_the_official_evaluation(prediction, gold, em, f1, subem):
    scores = qa_scores(prediction, gold)
    assert scores["em"] == em
    assert scores["f1"] == pytest.approx(f1)
    assert scores["subem"] == subem


@pytest.mark.parametrize("metric", ["em", "f1", "subem", "char_f1"])
def test_reward_metric_picks_the_outcome_and_reports_all_four(metric):
    task = Task("t", "q?", "Chief of Protocol")
    grade = qa_reward(metric)("Chief of Protocol of the United States", task)
    assert grade.metrics == pytest.approx(
        {
            "em": 0.0,
            "f1": 2 / 3,
            "subem": 1.0,
            "char_f1": char_f1("Chief of Protocol of the United States", task.answer),
        }
    )
    assert 0.0 < grade.metrics["char_f1"] < 1.0
    assert grade.score == pytest.approx(grade.metrics[metric])
    assert grade.success == (metric == "subem")
    with pytest.raises(ConfigError, match="reward_metric"):
        qa_reward("bleu")


def test_char_f1_reward_gives_a_near_miss_partial_credit_but_success_only_on_exact_match():
    env = gym.make("AgentR1/HotpotQA-v0", parser="tag", reward_metric="char_f1")
    env.reset(seed=0)
    answer = env.unwrapped.task.answer
    gold = answer[0] if isinstance(answer, list | tuple) else answer
    near = gold[:-1] + ("x" if gold[-1] != "x" else "y")  # the last letter wrong
    _, reward, term, _, info = env.step(f"<answer>{near}</answer>")
    assert term and not info["success"] and info["metrics"]["em"] == 0.0
    assert reward == pytest.approx(info["metrics"]["char_f1"]) and 0.5 < reward < 1.0
    env.reset(seed=0)
    _, reward, _, _, info = env.step(f"<answer>{gold}</answer>")
    assert reward == 1.0 and info["success"]
    env.close()


# -- the synthetic source -----------------------------------------------------------------------------------------
def test_synthetic_questions_are_pure_functions_of_seed_and_index():
    assert generate_question(0, 17) == generate_question(0, 17)
    assert generate_question(0, 17) != generate_question(1, 17)
    assert build_kb(3).passages == build_kb(3).passages
    assert generate_question(0, 10**9).answer  # unlimited


def test_synthetic_questions_need_both_passages():
    kb = build_kb(0)
    kinds = set()
    for i in range(300):
        q = generate_question(0, i)
        kinds.add(q.type)
        first, second = (kb.passages[t] for t in q.supporting)
        if q.type == "bridge":
            # the question names the first entity only; its passage leads to the second, which holds the answer
            assert q.supporting[0] in q.question and q.supporting[1] not in q.question
            assert q.supporting[1] in first and q.answer in second
            assert q.answer not in q.question and q.answer not in first
        else:
            assert all(t in q.question for t in q.supporting)
            assert q.answer in ("yes", "no") or q.answer in q.supporting
    assert kinds == {"bridge", "comparison"}


def test_synthetic_oracle_finds_every_supporting_passage_and_scores_one():
    env = gym.make("AgentR1/HotpotQA-v0")
    policy = HotpotQAOraclePolicy()
    for seed in range(40):
        result = run_episode(env, policy, seed)
        assert result.success and result.metrics == {"em": 1.0, "f1": 1.0, "subem": 1.0, "char_f1": 1.0}
        assert result.turns == 3
    env.close()


def test_one_index_per_corpus_is_shared_by_env_instances():
    a, b = HotpotQAEnv(), HotpotQAEnv(top_k=3)
    assert a.retriever is b.retriever
    assert len(a.retriever) == len(synthetic(0, 1000).documents)
    assert HotpotQAEnv(seed=1).retriever is not a.retriever


def test_index_dir_saves_the_index_for_the_next_process(tmp_path):
    from agentgym_r1.retrieval.factory import load_retriever

    env = HotpotQAEnv(seed=5, kb_size=200, index_dir=tmp_path / "idx")
    reopened = load_retriever(tmp_path / "idx", cache=False)
    assert len(reopened) == len(env.retriever) == len(synthetic(5, 200).documents)
    title = env.tasks[0].meta["supporting_titles"][0]
    assert reopened.search(title, 1)[0].doc.title == title


def test_lucene_backend_through_the_env(tmp_path):
    pytest.importorskip("pyserini")
    env = gym.make("AgentR1/HotpotQA-v0", kb_size=200, retriever="lucene", index_dir=tmp_path / "lucene", top_k=3)
    assert env.unwrapped.retriever.backend == "lucene"
    results = [run_episode(env, HotpotQAOraclePolicy(), seed) for seed in range(10)]
    assert all(r.success for r in results)
    env.close()


def test_http_backend_against_a_real_server_then_the_server_goes_down():
    uvicorn = pytest.importorskip("uvicorn")
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    import socket
    import threading
    import time

    from agentgym_r1.retrieval.server import create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(create_app(HotpotQAEnv(kb_size=200).retriever), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        env = gym.make(
            "AgentR1/HotpotQA-v0",
            kb_size=200,
            retriever="http",
            retriever_options={"url": url, "timeout": 2.0, "retries": 0},
        )
        results = [run_episode(env, HotpotQAOraclePolicy(), seed) for seed in range(5)]
        assert all(r.success for r in results)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
    env.reset(seed=0)
    obs, _, term, _, _ = env.step(hermes_call("search", query="river"))
    assert "Error: the search failed (retriever at http://127.0.0.1" in obs and not term
    obs, reward, term, _, _ = env.step(f"<answer>{env.unwrapped.task.answer}</answer>")
    assert term and reward == 1.0
    with pytest.raises(ConfigError, match="url"):
        HotpotQAEnv(retriever="http")


# -- episodes -------------------------------------------------------------------------------------------------------
def _env(**kwargs) -> gym.Env:
    env = gym.make("AgentR1/HotpotQA-v0", **kwargs)
    env.reset(seed=0)
    return env


def test_search_returns_titled_passages_and_answer_ends_the_episode():
    env = _env(top_k=2)
    task = env.unwrapped.task
    title = task.meta["supporting_titles"][0]
    obs, reward, term, _, info = env.step(hermes_call("search", query=title))
    assert obs.startswith("<tool_response>\nDoc 1 (Title: ") and "Doc 2 (Title: " in obs and "Doc 3" not in obs
    assert f"(Title: {title})" in obs
    assert info["valid"] and not term and info["env"]["searches"] == 1
    assert info["env"]["support_recall"] == 0.5
    obs, reward, term, _, info = env.step(f"<think>sure</think><answer>{task.answer}</answer>")
    assert term and reward == 1.0 and info["success"]
    assert info["metrics"] == {"em": 1.0, "f1": 1.0, "subem": 1.0, "char_f1": 1.0}


def test_tag_format_reads_search_tags_and_answers_in_information():
    env = _env(parser="tag")
    assert "<search>query</search>" in env.unwrapped.system_prompt
    title = env.unwrapped.task.meta["supporting_titles"][1]
    obs, *_, info = env.step(f"<think>I need {title}.</think>\n<search>{title}</search>")
    assert obs.startswith("\n\n<information>Doc 1 (Title: ") and obs.endswith("</information>\n\n")
    assert title in obs and info["action"] == {
        "kind": "tool_call",
        "calls": [{"name": "search", "arguments": {"query": title}}],
    }


def test_process_rewards_are_configurable():
    env = _env(valid_search_reward=0.1, failed_call_penalty=-0.2, format_penalty=-0.5)
    *_, info = env.step(hermes_call("search", query="river"))
    assert info["reward_parts"] == {"outcome": 0.0, "process": 0.1, "format": 0.0}
    *_, info = env.step(hermes_call("search", query="   "))
    assert info["reward_parts"]["process"] == -0.2
    *_, info = env.step("I think it is Paris")
    assert info["reward_parts"]["format"] == -0.5


def test_reward_metric_f1_gives_partial_credit():
    env = _env(reward_metric="f1")
    gold = env.unwrapped.task.answer
    *_, reward, term, _, info = env.step(f"<answer>{gold} indeed</answer>")
    assert term and 0 < reward < 1 and info["metrics"]["f1"] == reward and info["metrics"]["em"] == 0.0


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (hermes_call("search", query=3), "invalid arguments for search"),
        ("<search></search>", "no tool call or answer found"),
        ('<tool_call>{"name": "lookup", "arguments": {"query": "a"}}</tool_call>', "unknown tool 'lookup'"),
        ("Paris", "give the final answer as <answer>...</answer>"),
        ("<answer>Paris", "no tool call or answer found"),
    ],
)
def test_bad_actions_get_a_clear_observation_and_the_episode_goes_on(action, message):
    env = _env()
    obs, _, term, trunc, info = env.step(action)
    assert message in obs and not term and not trunc
    assert not info["valid"] and message in info["error"]
    obs, *_ = env.step(hermes_call("search", query=env.unwrapped.task.meta["supporting_titles"][0]))
    assert "Doc 1 (Title: " in obs


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "the search query is empty"),
        (" \n ", "the search query is empty"),
        ("x" * 5000, "the search query is 5000 characters long; the limit is 1000"),
    ],
)
def test_empty_and_huge_queries_are_failed_calls_with_a_message(query, message):
    env = _env(failed_call_penalty=-0.2)
    obs, reward, term, trunc, info = env.step(hermes_call("search", query=query))
    assert obs == f"<tool_response>\nError: {message}" + obs.split(message, 1)[1]
    assert reward == -0.2 and not term and not trunc and info["env"]["searches"] == 0


def test_non_ascii_queries_are_searched():
    env = _env()
    obs, _, term, _, info = env.step(hermes_call("search", query="打开冰箱 ßøπ"))
    assert info["valid"] and not term
    assert obs.startswith("<tool_response>\n") and ("No passages found" in obs or "Doc 1" in obs)


def test_several_searches_in_one_action_run_up_to_the_limit():
    env = _env(max_searches_per_turn=2)
    titles = env.unwrapped.task.meta["supporting_titles"]
    action = "".join(hermes_call("search", query=q) for q in [*titles, "river"])
    obs, _, term, _, info = env.step(action)
    assert obs.count("<tool_response>") == 3 and obs.count("Doc 1 (Title: ") == 2
    assert "more than 2 tool calls in one turn; this one was skipped" in obs and not info["valid"]
    assert info["env"]["support_recall"] == 1.0 and info["env"]["searches"] == 2 and not term


def test_a_search_after_the_answer_is_not_run():
    env = _env()
    answer = env.unwrapped.task.answer
    obs, reward, term, _, info = env.step(f"<answer>{answer}</answer>" + hermes_call("search", query="more"))
    assert term and reward == 1.0 and "written after it was not run" in obs
    assert info["env"]["searches"] == 0


def test_an_answer_written_with_a_search_is_ignored_with_a_note():
    env = _env()
    obs, _, term, _, info = env.step(hermes_call("search", query="river") + "<answer>Paris</answer>")
    assert (
        not term and info["action"]["kind"] == "tool_call" and "answer written with this tool call was ignored" in obs
    )


class _DownRetriever(Retriever):
    """A retriever whose backend is unreachable, as an HTTP client sees a server that is down."""

    def search(self, query: str, k: int = 5) -> list[Hit]:
        raise RetrievalError("connection refused by http://127.0.0.1:9/retrieve after 3 tries")

    def __len__(self) -> int:
        return 0


def test_a_retriever_error_is_an_observation_not_a_crash():
    env = _env(retriever=_DownRetriever(), failed_call_penalty=-0.1)
    obs, reward, term, _, info = env.step(hermes_call("search", query="anything"))
    assert "Error: the search failed (connection refused" in obs and not term
    assert reward == -0.1 and info["reward_parts"]["process"] == -0.1
    tool = SearchTool(_DownRetriever())
    assert not tool(query="x").ok


class _OneDoc(Retriever):
    def search(self, query: str, k: int = 5) -> list[Hit]:
        return [Hit(Document("0", "Title A", "Some text."), 1.0, 0)] if "a" in query else []

    def __len__(self) -> int:
        return 1


def test_search_tool_renders_hits_and_empty_results():
    tool = SearchTool(_OneDoc(), top_k=3)
    assert tool(query="a query").text == "Doc 1 (Title: Title A) Some text."
    result = tool(query="xyz")
    assert result.ok and "No passages found for 'xyz'" in result.text
    assert list(tool.seen_titles) == ["Title A"] and tool.searches == 2


# -- real data ------------------------------------------------------------------------------------------------------
def test_oracle_gets_em_one_on_the_shared_sample_with_real_bm25():
    path = shared_data(*SAMPLE)
    env = gym.make("AgentR1/HotpotQA-v0", source=str(path))
    n = len(env.unwrapped.tasks)
    assert n == 300
    policy = HotpotQAOraclePolicy()
    ems, recalls = [], []
    for i in range(n):
        obs, info = env.reset(options={"index": i})
        policy.reset(env, obs, info)
        term = trunc = False
        while not (term or trunc):
            recall = info["env"]["support_recall"]  # before the answer: after searching every gold title
            obs, _, term, trunc, info = env.step(policy.act(obs, info))
        ems.append(info["metrics"]["em"])
        recalls.append(recall)
    assert sum(ems) / n == 1.0
    # searching a gold title finds that paragraph in the top 5 (it is in the distractor corpus, deduplicated by title)
    assert sum(recalls) / n >= 0.97
    env.close()


def _official_layout(record: dict) -> dict:
    ctx, sf = record["context"], record["supporting_facts"]
    return {
        "_id": record["id"],
        "question": record["question"],
        "answer": record["answer"],
        "type": record["type"],
        "level": record["level"],
        "supporting_facts": [list(p) for p in zip(sf["title"], sf["sent_id"], strict=True)],
        "context": [[t, s] for t, s in zip(ctx["title"], ctx["sentences"], strict=True)],
    }


def test_official_json_and_hf_jsonl_layouts_load_the_same(tmp_path):
    path = shared_data(*SAMPLE)
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[:20]]
    (tmp_path / "hf.jsonl").write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    (tmp_path / "official.json").write_text(json.dumps([_official_layout(r) for r in records]), encoding="utf-8")
    hf, official = load_file(tmp_path / "hf.jsonl"), load_file(tmp_path / "official.json")
    assert [official.tasks[i] for i in range(20)] == [hf.tasks[i] for i in range(20)]
    assert official.documents == hf.documents
    titles = [d.title for d in hf.documents]
    assert len(titles) == len(set(titles)) and len(titles) <= 200  # deduplicated by title
    task = hf.tasks[0]
    assert task.id == records[0]["id"] and task.meta["supporting_titles"] == list(
        dict.fromkeys(records[0]["supporting_facts"]["title"])
    )
    env = HotpotQAEnv(str(tmp_path / "official.json"))
    obs, _ = env.reset(options={"task_id": task.id})
    assert obs.endswith(task.prompt)


def test_questions_only_file_needs_a_user_corpus(tmp_path):
    questions = tmp_path / "questions.json"
    questions.write_text(
        json.dumps([{"question": "Who wrote The Amber Velorin?", "answer": "Ana Lee", "type": "bridge"}]),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="corpus="):
        HotpotQAEnv(str(questions))
    corpus = tmp_path / "wiki.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"id": "1", "contents": '"The Amber Velorin"\nThe Amber Velorin is a novel by Ana Lee.'},
                {"id": "2", "contents": '"Ana Lee"\nAna Lee is a novelist.'},
            ]
        ),
        encoding="utf-8",
    )
    env = HotpotQAEnv(str(questions), corpus=str(corpus), top_k=1)
    env.reset(seed=0)
    obs, *_ = env.step(hermes_call("search", query="Amber Velorin"))
    assert "Doc 1 (Title: The Amber Velorin) The Amber Velorin is a novel by Ana Lee." in obs
    title_text = tmp_path / "titled.jsonl"
    title_text.write_text(json.dumps({"title": "Ana Lee", "text": "Ana Lee is a novelist."}), encoding="utf-8")
    env = HotpotQAEnv(str(questions), corpus=str(title_text))
    env.reset(seed=0)
    assert "(Title: Ana Lee)" in env.step(hermes_call("search", query="novelist"))[0]


def test_bad_sources_and_corpora_raise_named_errors(tmp_path):
    with pytest.raises(DataNotFoundError, match="synthetic"):
        HotpotQAEnv(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "x"}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match="'question' and 'answer'"):
        HotpotQAEnv(str(bad))
    with pytest.raises(DataNotFoundError):
        HotpotQAEnv(corpus=str(tmp_path / "missing.jsonl"))
    unknown = tmp_path / "corpus.jsonl"
    unknown.write_text('{"passage": "x"}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match="contents"):
        HotpotQAEnv(corpus=str(unknown))
    with pytest.raises(ConfigError, match="top_k"):
        HotpotQAEnv(top_k=0)
    with pytest.raises(ConfigError, match="kb_size"):
        HotpotQAEnv(kb_size=5)
    with pytest.raises(ConfigError, match="ready _OneDoc instance"):
        HotpotQAEnv(retriever=_OneDoc(), corpus=str(unknown))


def test_hf_source_offline_and_not_cached_names_the_alternatives(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    with pytest.raises(DataSourceUnavailableError, match='source="synthetic"'):
        HotpotQAEnv("hf", config="fullwiki", split="validation")


def test_the_shared_questions_only_json_loads_without_a_corpus():
    data = load_file(shared_data("hotpotqa", "hotpot_dev_v1_simplified.json"))
    assert len(data.tasks) == 7405 and data.documents is None
    assert data.tasks[0].prompt == "Were Scott Derrickson and Ed Wood of the same nationality?"
    assert data.tasks[0].answer == "yes" and data.tasks[0].meta["type"] == "comparison"


def test_a_file_that_is_not_utf8_is_a_named_error(tmp_path):
    latin = tmp_path / "latin1.json"
    latin.write_bytes(b'[{"question": "caf\xe9?", "answer": "x"}]')
    with pytest.raises(DataFormatError, match="not UTF-8"):
        HotpotQAEnv(source=latin)
