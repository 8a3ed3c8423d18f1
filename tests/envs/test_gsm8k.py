import json

import gymnasium as gym
import pytest

import agentgym_r1  # noqa: F401
from agentgym_r1.envs.gsm8k.calculator import Calculator, CalculatorError, evaluate
from agentgym_r1.envs.gsm8k.data import gold_answer, load_source
from agentgym_r1.envs.gsm8k.scripted import plan_expressions
from agentgym_r1.envs.gsm8k.synthetic import generate_problem
from agentgym_r1.error import ConfigError, DataFormatError, DataNotFoundError, DataSourceUnavailableError
from agentgym_r1.leaderboard.baselines.gsm8k import CalculatorAgentPolicy, GSM8KOraclePolicy
from agentgym_r1.leaderboard.runner import run_episode
from tests.conftest import shared_data


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("7 % 4", 3),
        ("2 ** 10", 1024),
        ("-3 + +4", 1),
        ("1,000 + 1", 1001),
        ("3 × 4 ÷ 2", 6.0),
        ("2 ** -1", 0.5),
        ("0.1 + 0.2", pytest.approx(0.3)),
        ("(" * 200 + "1" + ")" * 200, 1),
    ],
)
def test_calculator_evaluates_arithmetic(expr, value):
    assert evaluate(expr) == value


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("__import__('os')", "not allowed"),
        ("x + 1", "names"),
        ("1 / 0", "division by zero"),
        ("2 ^ 3", r"a \*\* b"),
        ("9 ** 9 ** 9", "exponents"),
        ("10 ** 1001", "exponents"),
        ("2 ** 999 * 2 ** 999", "too large"),
        ("1" * 600, "longer than"),
        ("", "empty"),
        ("[1, 2]", "not allowed"),
        ("True + 1", "only numbers"),
        ("(-8) ** 0.5", "real"),
        ("1e308 * 10", "too large"),
        ("'a' * 3", "only numbers"),
        ("1 if 1 else 2", "not allowed"),
    ],
)
def test_calculator_rejects_with_a_message(expr, message):
    with pytest.raises(CalculatorError, match=message):
        evaluate(expr)


def test_calculator_tool_never_raises():
    tool = Calculator()
    assert tool(expression="2+2").text == "4"
    assert tool(expression="10/4").text == "2.5"
    assert not tool(expression="open('x')").ok


def test_synthetic_problems_are_seeded_unlimited_and_consistent():
    a, b = generate_problem(0, 12345), generate_problem(0, 12345)
    assert a == b and generate_problem(1, 12345) != a
    for i in range(300):
        p = generate_problem(3, i, 2, 4)
        assert 2 <= len(p.expressions) <= 4
        value = None
        for expr in p.expressions:  # each expression starts from the previous value
            if value is not None:
                assert expr.startswith(value)
            value = str(int(evaluate(expr)))
        assert value == p.answer
    big = load_source("synthetic")
    assert big[2**31 - 2].id == f"synthetic-0-{2**31 - 2}"


def test_scripted_reader_recovers_the_expert_plan():
    for i in range(100):
        p = generate_problem(0, i)
        start, steps = plan_expressions(p.question)
        value = start
        for make in steps:
            value = str(int(evaluate(make(value))))
        assert value == p.answer


def test_answer_formats_and_numeric_equivalence():
    env = gym.make("AgentR1/GSM8K-v0")
    for answer in ["<answer>{}</answer>", "so #### {}", r"\boxed{{{}}}", "<answer>${}.00</answer>"]:
        env.reset(seed=5)
        gold = env.unwrapped.task.answer
        _, r, term, _, info = env.step(answer.format(gold))
        assert (r, term, info["success"], info["metrics"]) == (1.0, True, True, {"accuracy": 1.0})
    env.reset(seed=5)
    _, r, term, _, info = env.step("<answer>-1</answer>")
    assert (r, term, info["success"]) == (0.0, True, False)


def test_oracle_succeeds_on_every_real_test_task():
    path = shared_data("gsm8k", "test.jsonl")
    env = gym.make("AgentR1/GSM8K-v0", source=str(path))
    source = env.unwrapped.tasks
    assert len(source) == 1319
    policy = GSM8KOraclePolicy()
    for i in range(len(source)):
        obs, info = env.reset(options={"index": i})
        policy.reset(env, obs, info)
        done = False
        while not done:
            obs, r, term, trunc, info = env.step(policy.act(obs, info))
            assert info["valid"], (i, obs)
            done = term or trunc
        assert info["success"], (i, source[i])


def test_scripted_agent_solves_generated_tasks():
    env = gym.make("AgentR1/GSM8K-v0", source="synthetic")
    results = [run_episode(env, CalculatorAgentPolicy(), seed) for seed in range(50)]
    assert all(r.success for r in results)
    assert all(r.invalid == 0 for r in results)


def test_sources_raise_named_errors(tmp_path, monkeypatch):
    with pytest.raises(DataNotFoundError, match="synthetic"):
        gym.make("AgentR1/GSM8K-v0", source=str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "no hashes"}\n')
    with pytest.raises(DataFormatError, match="####"):
        gym.make("AgentR1/GSM8K-v0", source=str(bad))
    bad.write_text("not json\n")
    with pytest.raises(DataFormatError, match="JSON"):
        gym.make("AgentR1/GSM8K-v0", source=str(bad))
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"question": "2+2?", "answer": "2+2=<<2+2=4>>4\n#### 4"}) + "\n")
    env = gym.make("AgentR1/GSM8K-v0", source=str(good))
    env.reset()
    assert env.unwrapped.task.meta["expert"] == ["2+2"] and gold_answer("x\n#### 1,000") == "1000"


def test_hf_source_offline_and_uncached_names_the_alternatives(tmp_path, monkeypatch):
    for name, value in [
        ("HF_DATASETS_OFFLINE", "1"),
        ("HF_HUB_OFFLINE", "1"),
        ("HF_HOME", str(tmp_path)),
        ("HF_DATASETS_CACHE", str(tmp_path / "datasets")),
    ]:
        monkeypatch.setenv(name, value)
    datasets = pytest.importorskip("datasets")
    # datasets and huggingface_hub read these at import; another test may have imported them already
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    from agentgym_r1.envs.gsm8k import data

    data.load_hf.cache_clear()
    with pytest.raises(DataSourceUnavailableError, match='source="synthetic"'):
        gym.make("AgentR1/GSM8K-v0", source="hf")


def _call(expression: str) -> str:
    return "<tool_call>" + json.dumps({"name": "calculator", "arguments": {"expression": expression}}) + "</tool_call>"


@pytest.mark.parametrize("source", ["synthetic", "real"])
def test_step_value_reward_credits_each_reference_step_once(source):
    kwargs = {"source": "synthetic", "min_steps": 2, "max_steps": 3}
    if source == "real":
        path = shared_data() / "gsm8k" / "test.jsonl"
        if not path.exists():
            pytest.skip(f"no shared GSM8K data at {path}")
        kwargs = {"source": str(path)}
    env = gym.make("AgentR1/GSM8K-v0", step_value_reward=0.25, **kwargs)
    _, info = env.reset(seed=3)
    expert = env.unwrapped.task.meta["expert"]
    parts = []
    for expression in [*expert, expert[0], "123456789 + 1"]:  # the expert's steps, the first again, a wrong one
        _, _, _, _, info = env.step(_call(expression))
        parts.append(info["reward_parts"]["process"])
    # each reference step is credited once (a value the solution reaches twice, twice); then nothing more
    assert parts == [0.25] * len(expert) + [0.0, 0.0]
    default = gym.make("AgentR1/GSM8K-v0", **kwargs)
    default.reset(seed=3)
    assert default.step(_call(expert[0]))[4]["reward_parts"]["process"] == 0.0


def test_a_file_that_is_not_utf8_and_min_steps_over_max_steps_are_named_errors(tmp_path):
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes(json.dumps({"question": "caf\u00e9?", "answer": "#### 1"}, ensure_ascii=False).encode("latin-1"))
    with pytest.raises(DataFormatError, match="not UTF-8"):
        gym.make("AgentR1/GSM8K-v0", source=str(latin))
    with pytest.raises(ConfigError, match="min_steps"):
        gym.make("AgentR1/GSM8K-v0", min_steps=5, max_steps=2)


def test_the_calculator_cache_keeps_values_not_syntax_trees():
    import gc
    import tracemalloc

    from agentgym_r1.envs.gsm8k import calculator

    calculator._value.cache_clear()
    gc.collect()
    tracked = len(gc.get_objects())
    tracemalloc.start()
    for i in range(4096):  # distinct 480-character expressions: each tree is ~400 objects
        evaluate("+".join(f"({i}*{j}-{j})" for j in range(36)))
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    gc.collect()
    assert size < 30 * 2**20, f"{size / 2**20:.0f} MiB held for 4,096 cached expressions"
    assert len(gc.get_objects()) - tracked < 50_000  # the trees were ~1.6M GC-tracked objects
