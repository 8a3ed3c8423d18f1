"""TRL's and transformers' private names the trainers use are listed in one module and present in the installed
versions (issue 39, item 5): an upgrade that drops or renames one fails here, naming it."""

from __future__ import annotations

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
