"""Generation with transformers' ``generate`` (CPU or GPU): left-padded batches, exact ids, per-token logprobs.

Two hooks ride along ``generate``: a logits processor that keeps the log-softmax of the (temperature-scaled)
next-token scores of the current step, and a stopping criterion that reads the token just sampled, records its
log-probability, and ends a row on an end-of-turn id, on the token completing a stop string, or at the row's budget.
Rows are cut where they stopped, so the ids are exactly those sampled; the pads ``generate`` adds after a finished
row are never returned.

Inside :meth:`HFBackend.rollout_session` (the rollout engine opens one per rollout) each call keeps its key/value cache
and the next call prefills only the tokens its contexts add (:mod:`agentgym_r1.adapters.backends.prefix`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from agentgym_r1.adapters.backends.base import Generation, SamplingParams, StopScanner
from agentgym_r1.adapters.backends.prefix import PrefixCache, left_pad
from agentgym_r1.adapters.tokenize import ChatTokenizer
from agentgym_r1.error import require


class HFBackend:
    """Samples with ``model.generate``. ``model`` is a causal LM; ``chat`` the :class:`ChatTokenizer` of its
    tokenizer. ``batch_size`` caps rows per ``generate`` call (``None``: all live episodes at once).

    Temperature, top-p and top-k come from :class:`SamplingParams`. With ``neutral=False`` the other settings of the
    model's ``generation_config`` (a ``repetition_penalty``, say) still apply and shape the sampling distribution;
    with ``neutral=True`` (what the trainers use) generation starts from a fresh ``GenerationConfig``, so only the
    temperature and top-p/top-k act, exactly the distribution a trainer's loss recomputes.

    ``reuse_prefix`` (default on) lets :meth:`rollout_session` keep each call's key/value cache for the next call's
    longer contexts; it applies to calls of one ``generate`` batch (all contexts within ``batch_size``) and no ``extra``
    sampling settings.
    """

    def __init__(
        self,
        model: Any,
        chat: ChatTokenizer,
        *,
        batch_size: int | None = None,
        neutral: bool = False,
        reuse_prefix: bool = True,
    ) -> None:
        require("torch", "train", "the transformers generation backend")
        self.model = model
        self.chat = chat
        self.batch_size = batch_size
        self.neutral = neutral
        self.reuse_prefix = reuse_prefix
        self.prefix = PrefixCache()

    @contextmanager
    def rollout_session(self) -> Iterator[None]:
        """Calls inside the block may reuse the previous call's cache; the model's weights must not change inside it.
        Without ``reuse_prefix`` the block changes nothing."""
        if not self.reuse_prefix:
            yield
            return
        with self.prefix.session():
            yield

    @contextmanager
    def prefix_cache(self, cache: PrefixCache) -> Iterator[None]:
        """Calls inside the block keep and reuse their key/value cache in ``cache`` (an active one: inside its
        ``session``) instead of the backend's own: the model server gives each request its own, so requests served
        in turns each continue from their own cache."""
        own, self.prefix = self.prefix, cache
        try:
            yield
        finally:
            self.prefix = own

    def reseed(self, seed: int) -> None:
        """Seed torch's generator (the engine calls this at the start of each rollout)."""
        import torch

        torch.manual_seed(seed)

    def generate(
        self, contexts: Sequence[Sequence[int]], budgets: Sequence[int], params: SamplingParams
    ) -> list[Generation]:
        step = self.batch_size or max(len(contexts), 1)
        keep = len(contexts) <= step and not params.extra  # one generate call: its cache can serve the next
        out: list[Generation] = []
        for i in range(0, len(contexts), step):
            out += self._generate(contexts[i : i + step], budgets[i : i + step], params, keep)
        return out

    def _generate(
        self, contexts: Sequence[Sequence[int]], budgets: Sequence[int], params: SamplingParams, keep: bool
    ) -> list[Generation]:
        import torch

        device = next(self.model.parameters()).device
        pad = self.chat.pad_token_id
        reuse = self.prefix.plan(contexts, pad, device) if keep else None
        if reuse is not None:
            input_ids, mask, cache = reuse.input_ids, reuse.attention_mask, reuse.cache
        else:
            (input_ids, mask), cache = left_pad(contexts, pad, device), None
        scanner = StopScanner(self._decode, self.chat.stop_token_ids, params.stop)
        recorder = _LogprobRecorder(params.temperature)
        criterion = _TurnEnd(scanner, recorder, list(budgets))
        stop_ids = sorted(self.chat.stop_token_ids)
        greedy = params.temperature == 0
        kwargs: dict[str, Any] = {
            "do_sample": not greedy,
            "max_new_tokens": max(budgets),
            "pad_token_id": pad,
            "eos_token_id": stop_ids,
            "logits_processor": [recorder],
            "stopping_criteria": [criterion],
            "return_dict_in_generate": True,
            # never lockstep: transformers turns synced_gpus on for any multi-process run under ZeRO-3 or FSDP
            # (GenerationMixin.generate: an all-reduce per token), but each process of a rollout calls generate a
            # different number of times, on weights already gathered (trainers/sharding.py)
            "synced_gpus": False,
        }
        if cache is not None:
            kwargs[cache_name()] = cache
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
                output = self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs, **params.extra)
        finally:
            self.model.train(training)
            self.model.generation_config = config
        results = criterion.results()
        if keep:
            self.prefix.keep(getattr(output, cache_name(), None), mask, contexts, [r.ids for r in results])
        return results

    def _decode(self, ids: list[int]) -> str:
        return self.chat.tokenizer.decode(ids, skip_special_tokens=False)


@functools.cache
def cache_name() -> str:
    """The name ``generate`` takes a key/value cache by, and its output returns it by, in the installed transformers.

    ``cache`` once it was renamed: transformers 5.24 deprecates ``past_key_values`` (``generation/utils.py``:
    ``@deprecate_kwarg("past_key_values", "6.0.0", new_name="cache")`` on ``generate``; ``utils/generic.py``: the
    output's ``past_key_values`` property logs "`past_key_values`/`cache_params` are deprecated"). ``past_key_values``
    before it (the vLLM venv's transformers<5.20), where ``ALL_CACHE_NAMES`` in ``generation/utils.py`` (the names
    ``generate`` hands a cache on by) has no ``cache``."""
    from transformers.generation import utils

    return "cache" if "cache" in getattr(utils, "ALL_CACHE_NAMES", ()) else "past_key_values"


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

    def __init__(self, scanner: StopScanner, recorder: _LogprobRecorder, budgets: list[int]) -> None:
        self.scanner = scanner
        self.recorder = recorder
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
        return [
            Generation(ids, lps, reason or "length")  # type: ignore[arg-type]
            for ids, lps, reason in zip(self.ids, self.logprobs, self.reason, strict=True)
        ]
