"""vLLM as a backend (optional extra ``vllm``): a colocated ``vllm.LLM`` or a server started with
``trl vllm-serve`` / ``vllm serve`` and reached through TRL's ``VLLMClient``.

Prompts go in as token ids and the sampled ids come back as they are (``include_stop_str_in_output`` keeps the
token that completed a stop string). Log-probabilities match the trainer's only when vLLM returns processed ones:
start the engine or server with ``logprobs_mode="processed_logprobs"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentgym_r1.adapters.backends.base import Generation, SamplingParams
from agentgym_r1.adapters.records import FinishReason
from agentgym_r1.adapters.tokenize import ChatTokenizer
from agentgym_r1.error import ConfigError, require


class VLLMBackend:
    """Give ``llm`` (a ``vllm.LLM``, e.g. ``trainer.vllm_generation.llm``) or ``client`` (TRL's ``VLLMClient``)."""

    def __init__(self, chat: ChatTokenizer, *, llm: Any = None, client: Any = None) -> None:
        self.vllm = require("vllm", "vllm", "the vLLM generation backend")
        if (llm is None) == (client is None):
            raise ConfigError("VLLMBackend needs exactly one of llm= (colocated vllm.LLM) or client= (VLLMClient)")
        self.chat, self.llm, self.client = chat, llm, client
        self._calls = 0

    def _seed(self, params: SamplingParams, row: int) -> int | None:
        """A distinct seed per request: one seed for all would give the samples of a group the same tokens."""
        return None if params.seed is None else params.seed + 1_000_003 * self._calls + row

    def generate(
        self, contexts: Sequence[Sequence[int]], budgets: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        if self.llm is not None:
            return self._colocated(contexts, budgets, params)
        out: list[Generation | None] = [None] * len(contexts)
        for budget in sorted(set(budgets)):  # the client takes one max_tokens per call
            rows = [i for i, b in enumerate(budgets) if b == budget]
            got = self.client.generate(
                [list(contexts[i]) for i in rows],
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k,
                max_tokens=budget,
                logprobs=0,
                generation_kwargs=self._stops(params),
            )
            for i, ids, lps in zip(rows, got["completion_ids"], got["logprobs"], strict=True):
                out[i] = Generation(list(ids), [float(v[0]) for v in lps], self._reason(ids, budget))
        return [g for g in out if g is not None]

    def _colocated(
        self, contexts: Sequence[Sequence[int]], budgets: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        self._calls += 1
        sampling = [
            VLLMSamplingParams(
                max_tokens=b,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k or -1,
                logprobs=0,
                seed=self._seed(params, i),
                **self._stops(params),
            )
            for i, b in enumerate(budgets)
        ]
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(c)) for c in contexts], sampling, use_tqdm=False
        )
        gens = []
        for out, budget in zip(outputs, budgets, strict=True):
            o = out.outputs[0]
            ids = list(o.token_ids)
            lps = [float(o.logprobs[t][tok].logprob) for t, tok in enumerate(ids)] if o.logprobs else [0.0] * len(ids)
            gens.append(Generation(ids, lps, self._reason(ids, budget)))
        return gens

    def _stops(self, params: SamplingParams) -> dict[str, Any]:
        return {
            "stop": list(params.stop),
            "stop_token_ids": sorted(self.chat.stop_token_ids),
            "include_stop_str_in_output": True,
        }

    def _reason(self, ids: Sequence[int], budget: int) -> FinishReason:
        if ids and ids[-1] in self.chat.stop_token_ids:
            return "eos"
        return "length" if len(ids) >= budget else "stop"
