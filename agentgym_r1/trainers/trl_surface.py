"""Every private name of TRL's ``GRPOTrainer`` and transformers' ``Trainer`` that the trainers use, why, and the
versions it was read against (issue 39, item 5; STYLE: "TRL's private surface in one place").

The trainers prefer TRL's public hooks (``rollout_func``, callbacks); what they cannot do through them is listed
here, with the statements of TRL's methods whose behaviour the trainers rely on (``Private.source``: the columns of
``rollout_func`` merged into the inputs the trainer scores, say). :func:`missing` says which of these the installed
libraries lack (a method gone, a parameter renamed, an attribute no longer set, a relied-on statement gone or
repeated), and ``tests/trainers/test_trl_surface.py`` fails naming them, so an upgrade of TRL or
transformers says what to re-read instead of failing mid-run. That test also fails when a trainer module starts
using a private library name that is not listed here.

The other way round, TRL uses transformers' names that transformers deprecates: :func:`trl_deprecations_silenced`
keeps those warnings, which no argument of ours avoids, out of a training run's output.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

TRL_READ = "1.16.0"
TRANSFORMERS_READ = "5.24.0"


@dataclass(frozen=True)
class Private:
    """``owner`` (``"module:Class"``) has ``name``: a method taking ``params``, or an attribute it assigns."""

    owner: str
    name: str
    kind: str  # "method" or "attribute"
    used_by: str
    why: str
    params: tuple[str, ...] = ()
    source: tuple[str, ...] = ()
    """Statements the method's source must hold, each exactly once: the behaviour relied on, beyond the signature
    (the trainers' tests check the behaviour itself; this names the statement to re-read)."""

    @property
    def label(self) -> str:
        return f"{self.owner.replace(':', '.')}.{self.name}"


GRPO = "trl.trainer.grpo_trainer:GRPOTrainer"
TRAINER = "transformers.trainer:Trainer"

SURFACE: tuple[Private, ...] = (
    Private(
        GRPO,
        "_generate",
        "method",
        "grpo.AgentGRPOTrainer._generate (override, calls super)",
        "sync the policy into vLLM before TRL's own step check; replace TRL's completions/clipped_ratio, which "
        "it appends once per call after rollout_func, with the episode-level one rollout_func logged. Relied on: "
        "rollout_func's keys beyond the required three become extra_fields, env_mask among them popped as the "
        "tool mask",
        ("prompts",),
        (
            "extra_fields = {k: v for k, v in output.items() if k not in required_keys}",
            'tool_mask = extra_fields.pop("env_mask", None)',
            'self._metrics[mode]["completions/clipped_ratio"].append(',
        ),
    ),
    Private(
        GRPO,
        "_generate_and_score_completions",
        "method",
        "grpo.AgentGRPOTrainer._generate_and_score_completions (override, calls super)",
        "replace TRL's advantages, tool mask and num_items_in_batch with ours over the global batch, from the "
        "rows read back from the inputs after super(); build the step layout's rows, which TRL's "
        "one-row-per-prompt batch cannot hold. Relied on: TRL writes rollout_func's extra columns into the dicts "
        "of the inputs list it was given, row i's values into inputs[i] (grpo.ROW: each row's Sample), so the rows "
        "reach the loss by TRL's path alone",
        ("inputs",),
        ("for i, inp in enumerate(inputs):", "inp[key] = values[i]"),
    ),
    Private(
        GRPO,
        "_get_per_token_logps_and_entropies",
        "method",
        "grpo.AgentGRPOTrainer._reference_logps, grpo.AgentGRPOTrainer._correct_staleness",
        "old and reference log-probabilities of step-layout rows, computed as TRL computes them; the current "
        "policy's log-probabilities of asynchronous rows, for their importance weights",
        ("model", "input_ids", "attention_mask", "logits_to_keep", "batch_size"),
    ),
    Private(
        GRPO,
        "_compute_loss",
        "method",
        "the keys grpo.py's scoring returns; tests/trainers/kit.py spies it",
        "the loss our rows feed: it reads advantages, tool_mask, completion_mask and num_items_in_batch, and "
        "its normalisation decides which losses may skip rows (configs.SKIP_EXACT_LOSSES)",
        ("model", "inputs"),
    ),
    Private(
        GRPO,
        "_metrics",
        "attribute",
        "grpo.AgentGRPOTrainer (rollout and group metrics)",
        "TRL averages and logs what is appended to _metrics[mode][key]; rollout metrics join its log line",
    ),
    Private(
        GRPO,
        "_last_loaded_step",
        "attribute",
        "grpo.AgentGRPOTrainer._generate",
        "the step TRL last synced vLLM at; set after our sync so TRL's own check skips a second one",
    ),
    Private(
        TRAINER,
        "_save",
        "method",
        "ppo.AgentPPOTrainer._save (override)",
        "save the policy as a normal model directory and the critic beside it (critic.pt)",
        ("output_dir", "state_dict"),
    ),
    Private(
        TRAINER,
        "_load_from_checkpoint",
        "method",
        "ppo.AgentPPOTrainer._load_from_checkpoint (override)",
        "resume the policy and the critic saved by _save",
        ("resume_from_checkpoint", "model"),
    ),
)


def _owner(spec: str) -> type:
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def _present(entry: Private) -> bool:
    cls = _owner(entry.owner)
    if entry.kind == "method":
        fn = getattr(cls, entry.name, None)
        return callable(fn) and set(entry.params) <= set(inspect.signature(fn).parameters)
    source = inspect.getsource(cls)  # an attribute the class assigns somewhere (instance attributes live in methods)
    return re.search(rf"self\.{re.escape(entry.name)}\s*(:[^=\n]*)?=[^=]", source) is not None


def _gaps(entry: Private) -> list[str]:
    """What of ``entry`` the installed library lacks: its name (or a parameter), else each relied-on statement not
    held exactly once by the method's source."""
    if not _present(entry):
        return [entry.label]
    if not entry.source:
        return []
    text = inspect.getsource(getattr(_owner(entry.owner), entry.name))
    return [f"{entry.label}: {s!r} ({text.count(s)} times)" for s in entry.source if text.count(s) != 1]


def missing(surface: tuple[Private, ...] = SURFACE) -> list[str]:
    """The listed names and statements the installed TRL / transformers lack (``[]`` when all are there)."""
    return [gap for entry in surface for gap in _gaps(entry)]


def library_names(cls: type) -> set[str]:
    """Private names (``_x``, not dunder) that a library base class of ``cls`` defines or assigns."""
    names: set[str] = set()
    for base in cls.__mro__:
        if base.__module__.startswith("agentgym_r1") or base is object:
            continue
        names |= {n for n in vars(base) if n.startswith("_") and not n.startswith("__")}
        with contextlib.suppress(OSError, TypeError):  # a class without Python source
            names |= set(re.findall(r"self\.(_[a-z]\w*)\s*(?::[^=\n]*)?=[^=]", inspect.getsource(base)))
    return names


# TRL 1.16 reads transformers' deprecated checkpointing names on every generation step: ``is_gradient_checkpointing``
# (trl/models/utils.py:136 in _unwrap_model_for_generation, :407 in disable_gradient_checkpointing), then, when
# checkpointing is on, gradient_checkpointing_disable/_enable (:138, :154, :409, :414). transformers 5.24 warns on each
# (modeling_utils.py:3204, 3289, 3312: FutureWarning, "... is deprecated and will be removed in v6"). The names are
# TRL's; tests/trainers/test_trl_surface.py fails once TRL no longer reads them, so this filter goes with them.
TRL_DEPRECATED_READS = ("is_gradient_checkpointing", "gradient_checkpointing_disable", "gradient_checkpointing_enable")


@contextlib.contextmanager
def trl_deprecations_silenced() -> Iterator[None]:
    """Inside the block, transformers' FutureWarnings about :data:`TRL_DEPRECATED_READS` are not shown (only those:
    by message, category and the module that warns); every other warning is as before, and so are the filters after
    the block."""
    names = "|".join(TRL_DEPRECATED_READS)
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", rf"`({names})` is deprecated", FutureWarning, r"transformers\.modeling_utils\Z"
        )
        yield
