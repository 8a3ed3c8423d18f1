"""Generation with transformers' ``generate`` (CPU or GPU): left-padded batches, exact ids, per-token logprobs.

Two hooks ride along ``generate``: a logits processor that keeps the log-softmax of the (temperature-scaled)
next-token scores of the current step, and a stopping criterion that reads the token just sampled, records its
log-probability, and ends a row on an end-of-turn id, on the token completing a stop string, or at the row's budget.
Rows are cut where they stopped, so the ids are exactly those sampled; the pads ``generate`` adds after a finished
row are never returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentgym_r1.adapters.backends.base import Generation, SamplingParams, StopScanner
from agentgym_r1.adapters.tokenize import ChatTokenizer
from agentgym_r1.error import require


class HFBackend:
    """Samples with ``model.generate``. ``model`` is a causal LM; ``chat`` the :class:`ChatTokenizer` of its
    tokenizer. ``batch_size`` caps rows per ``generate`` call (``None``: all live episodes at once).

    Temperature, top-p and top-k come from :class:`SamplingParams`. With ``neutral=False`` the other settings of the
    model's ``generation_config`` (a ``repetition_penalty``, say) still apply and shape the sampling distribution;
    with ``neutral=True`` (what the trainers use) generation starts from a fresh ``GenerationConfig``, so only the
    temperature and top-p/top-k act, exactly the distribution a trainer's loss recomputes.
    """

    def __init__(self, model: Any, chat: ChatTokenizer, *, batch_size: int | None = None,
                 neutral: bool = False) -> None:
        require("torch", "train", "the transformers generation backend")
        self.model = model
        self.chat = chat
        self.batch_size = batch_size
        self.neutral = neutral

    def reseed(self, seed: int) -> None:
        """Seed torch's generator (the engine calls this at the start of each rollout)."""
        import torch

        torch.manual_seed(seed)

    def generate(self, contexts: Sequence[Sequence[int]], budgets: Sequence[int],
                 params: SamplingParams) -> list[Generation]:
        step = self.batch_size or max(len(contexts), 1)
        out: list[Generation] = []
        for i in range(0, len(contexts), step):
            out += self._generate(contexts[i : i + step], budgets[i : i + step], params)
        return out

    def _generate(self, contexts: Sequence[Sequence[int]], budgets: Sequence[int],
                  params: SamplingParams) -> list[Generation]:
        import torch

        device = next(self.model.parameters()).device
        width = max(len(c) for c in contexts)
        pad = self.chat.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(c)) + list(c) for c in contexts], device=device)
        mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=device)
        scanner = StopScanner(self._decode, self.chat.stop_token_ids, params.stop)
        recorder = _LogprobRecorder(params.temperature)
        criterion = _TurnEnd(scanner, recorder, width, list(budgets))
        stop_ids = sorted(self.chat.stop_token_ids)
        greedy = params.temperature == 0
        kwargs: dict[str, Any] = {"do_sample": not greedy, "max_new_tokens": max(budgets), "pad_token_id": pad,
                                  "eos_token_id": stop_ids, "logits_processor": [recorder],
                                  "stopping_criteria": [criterion]}
        if not greedy:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k)
        training, config = self.model.training, self.model.generation_config
        self.model.eval()  # no dropout while sampling: the logprobs are those of the policy as it is
        if self.neutral:
            # generate() fills every setting the call leaves unset from model.generation_config
            # (transformers GenerationMixin._prepare_generation_config), so a fresh one is swapped in for the call
            from transformers import GenerationConfig

            self.model.generation_config = GenerationConfig(pad_token_id=pad, eos_token_id=stop_ids)
        try:
            with torch.no_grad():
                self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs, **params.extra)
        finally:
            self.model.train(training)
            self.model.generation_config = config
        return criterion.results()

    def _decode(self, ids: list[int]) -> str:
        return self.chat.tokenizer.decode(ids, skip_special_tokens=False)


class _LogprobRecorder:
    """A logits processor that keeps the current step's log-probabilities (it changes nothing)."""

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature if temperature > 0 else 1.0
        self.current: Any = None

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        self.current = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores


class _TurnEnd:
    """A stopping criterion that ends each row at its own stop and records what the row sampled."""

    def __init__(self, scanner: StopScanner, recorder: _LogprobRecorder, width: int, budgets: list[int]) -> None:
        self.scanner = scanner
        self.recorder = recorder
        self.width = width
        self.budgets = budgets
        n = len(budgets)
        self.ids: list[list[int]] = [[] for _ in range(n)]
        self.logprobs: list[list[float]] = [[] for _ in range(n)]
        self.reason: list[str | None] = [None] * n

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        last = input_ids[:, -1]
        lps = self.recorder.current.gather(1, last[:, None]).squeeze(1).tolist()
        tokens = last.tolist()
        done = []
        for row, (tok, lp) in enumerate(zip(tokens, lps, strict=True)):
            if self.reason[row] is None:
                self.ids[row].append(tok)
                self.logprobs[row].append(lp)
                reason = self.scanner.check(self.ids[row])
                if reason is None and len(self.ids[row]) >= self.budgets[row]:
                    reason = "length"
                self.reason[row] = reason
            done.append(self.reason[row] is not None)
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    def results(self) -> list[Generation]:
        return [Generation(ids, lps, reason or "length")  # type: ignore[arg-type]
                for ids, lps, reason in zip(self.ids, self.logprobs, self.reason, strict=True)]
