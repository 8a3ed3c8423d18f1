"""TRL's and transformers' private names the trainers use are listed in one module and present in the installed
versions (issue 39, item 5): an upgrade that drops or renames one fails here, naming it."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

trl = pytest.importorskip("trl")

import transformers  # noqa: E402

from agentgym_r1.trainers import trl_surface as S  # noqa: E402

TRAINERS_DIR = Path(S.__file__).parent
TRAINER_MODULES = ("grpo.py", "ppo.py", "vllm.py")


def test_the_installed_libraries_have_every_listed_private_name() -> None:
    gone = S.missing()
    assert gone == [], (
        f"TRL {trl.__version__} / transformers {transformers.__version__} lack {gone}, which the "
        f"trainers use (read against TRL {S.TRL_READ}, transformers {S.TRANSFORMERS_READ}); see "
        "agentgym_r1/trainers/trl_surface.py for where and why"
    )


def test_a_dropped_or_renamed_name_is_reported() -> None:
    surface = (
        S.Private(S.GRPO, "_no_such_method", "method", "", ""),
        S.Private(S.GRPO, "_generate", "method", "", "", ("renamed_parameter",)),
        S.Private(S.GRPO, "_no_such_attribute", "attribute", "", ""),
        S.Private(S.GRPO, "_metrics", "attribute", "", ""),
    )
    assert S.missing(surface) == [
        f"trl.trainer.grpo_trainer.GRPOTrainer.{n}" for n in ("_no_such_method", "_generate", "_no_such_attribute")
    ]


def test_a_relied_on_statement_gone_or_repeated_is_reported() -> None:
    """Behaviour the trainers rely on beyond a name: GRPO reads each row's Sample back from the inputs TRL scored,
    where TRL's ``_generate_and_score_completions`` merged rollout_func's columns (``inp[key] = values[i]``); a TRL
    that no longer does so (or does it twice) fails here, naming the statement."""
    score = S.Private(
        S.GRPO, "_generate_and_score_completions", "method", "", "", ("inputs",), ("inp[key] = values[i]",)
    )
    gone = S.Private(S.GRPO, "_generate", "method", "", "", ("prompts",), ("inp[key] = values[i]", "self."))
    label = "trl.trainer.grpo_trainer.GRPOTrainer._generate"
    repeated = inspect.getsource(trl.GRPOTrainer._generate).count("self.")
    assert repeated > 1
    assert S.missing((score, gone)) == [
        f"{label}: 'inp[key] = values[i]' (0 times)",
        f"{label}: 'self.' ({repeated} times)",
    ]
    listed = {(e.name, statement) for e in S.SURFACE for statement in e.source}
    assert ("_generate_and_score_completions", "inp[key] = values[i]") in listed


def test_every_private_library_name_the_trainers_use_is_listed() -> None:
    """Names like ``self._x`` / ``super()._x`` / ``def _x`` in the trainer modules that TRL's GRPOTrainer or
    transformers' Trainer define (an override, a call, a read of their state) must be in trl_surface.SURFACE; a
    private method of ours that shadows a library one by accident fails here too."""
    from agentgym_r1.trainers.grpo import AgentGRPOTrainer
    from agentgym_r1.trainers.ppo import AgentPPOTrainer

    used = set()
    for name in TRAINER_MODULES:  # the modules whose classes are (or are mixed into) the library's trainers
        text = (TRAINERS_DIR / name).read_text()  # reads and calls, and overrides (def)
        used |= set(re.findall(r"(?:self|super\(\))\.(_[a-z]\w*)", text)) | set(re.findall(r"def (_[a-z]\w*)", text))
    library = S.library_names(AgentGRPOTrainer) | S.library_names(AgentPPOTrainer)
    assert (used & library) - {e.name for e in S.SURFACE} == set()


def test_trl_still_reads_the_deprecated_names_it_is_excused_for() -> None:
    """trl_deprecations_silenced hides transformers' warnings about names TRL reads; once TRL stops reading one, the
    filter must go (this fails, naming it)."""
    import inspect

    import trl.models.utils

    source = inspect.getsource(trl.models.utils)
    stale = [name for name in S.TRL_DEPRECATED_READS if f".{name}" not in source]
    assert stale == [], f"TRL {trl.__version__} no longer reads {stale}: drop them from TRL_DEPRECATED_READS"


def test_only_the_excused_deprecations_are_silenced() -> None:
    """TRL's read of ``is_gradient_checkpointing`` on a model warns without the block and not inside it, where
    other FutureWarnings still show."""
    import inspect
    import warnings

    import transformers.modeling_utils
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tests.conftest import deprecations

    if "`is_gradient_checkpointing` is deprecated" not in inspect.getsource(transformers.modeling_utils):
        pytest.skip(f"transformers {transformers.__version__} does not deprecate is_gradient_checkpointing")
    config = Qwen2Config(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2)
    config.num_key_value_heads = 1
    model = Qwen2ForCausalLM(config)
    with deprecations() as bare:
        assert model.is_gradient_checkpointing is False
    with deprecations() as silenced, S.trl_deprecations_silenced():
        assert model.is_gradient_checkpointing is False
        warnings.warn("something else is deprecated", FutureWarning, stacklevel=1)
    assert len(bare) == 1 and "`is_gradient_checkpointing` is deprecated" in bare[0]
    assert silenced == ["FutureWarning: something else is deprecated"]
