"""Chat-template families: what identifies each, which tokens end an assistant turn, which text starts a sequence.

A family is recognised from text its template writes (``<|start_header_id|>`` is Llama 3, ``<start_of_turn>`` Gemma,
``<|channel|>`` gpt-oss...). The family decides the default stop tokens (gpt-oss's ``<|end|>`` closes a reasoning
message and must not stop generation, while Phi-3's ``<|end|>`` ends the turn) and, with the template's own response
parser where TRL ships one, how a model of the family writes tool calls. How a template treats each role (system, tool,
alternation, structured ``tool_calls``) is not tabled here: :mod:`agentgym_r1.adapters.shape` probes the template.

The exact template name comes from TRL's stored copies when TRL is installed (``trl/chat_templates/*.jinja``, the files
``trl.chat_template_utils`` reads for its identity comparisons), e.g. ``gemma3`` within the ``gemma`` family.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Family:
    """``name``; ``marker``: text only this family's templates write; ``end_of_turn``: tokens that end an assistant
    turn (the stop tokens); ``bos``: the text the tokenizer's ``bos_token`` holds (``None``: no bos in the template)."""

    name: str
    marker: str
    end_of_turn: tuple[str, ...]
    bos: str | None = None
    eos: str | None = None
    stands_for: tuple[tuple[str, str], ...] = ()
    """``(emitted, closing)``: an end token the model emits that stands for another closing the template writes in
    history (gpt-oss ends a final answer with ``<|return|>``, which history writes ``<|end|>``)."""

    @property
    def eos_token(self) -> str:
        return self.eos or self.end_of_turn[0]


# Order matters: the first family whose marker the template writes wins (gpt-oss before Phi-3: both write <|end|>).
FAMILIES: tuple[Family, ...] = (
    Family("gpt-oss", "<|channel|>", ("<|return|>", "<|call|>"), stands_for=(("<|return|>", "<|end|>"),)),
    Family(
        "muse-glimmer", "<|eot|>", ("<|eot|>", "<|eom|>"), bos="<|begin_of_text|>", stands_for=(("<|eom|>", "<|eot|>"),)
    ),
    Family(
        "llama3",
        "<|start_header_id|>",
        ("<|eot_id|>", "<|eom_id|>"),
        bos="<|begin_of_text|>",
        stands_for=(("<|eom_id|>", "<|eot_id|>"),),
    ),  # a call ends with <|eom_id|>; history writes <|eot_id|>
    # Gemma 4 writes a call, then <|tool_response> and waits: the response comes inside the same model turn
    Family("gemma4", "<|turn>", ("<turn|>", "<|tool_response>"), bos="<bos>"),
    Family("gemma", "<start_of_turn>", ("<end_of_turn>",), bos="<bos>", eos="<eos>"),
    Family("cohere", "<|START_OF_TURN_TOKEN|>", ("<|END_OF_TURN_TOKEN|>",), bos="<BOS_TOKEN>"),
    Family("deepseek", "<｜Assistant｜>", ("<｜end▁of▁sentence｜>",), bos="<｜begin▁of▁sentence｜>"),
    Family("glm4", "[gMASK]", ("<|user|>", "<|observation|>", "<|endoftext|>"), eos="<|endoftext|>"),
    Family("phi3", "<|assistant|>", ("<|end|>", "<|endoftext|>"), bos="<s>", eos="<|endoftext|>"),
    Family("mistral", "[INST]", ("</s>",), bos="<s>"),
    Family("chatml", "<|im_start|>", ("<|im_end|>", "<|endoftext|>"), bos="<|startoftext|>"),
)

UNKNOWN = Family("unknown", "", ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>"))


def detect_family(template: str) -> Family:
    """The family whose marker ``template`` writes, else :data:`UNKNOWN` (stop tokens from a generic list)."""
    return next((f for f in FAMILIES if f.marker in template), UNKNOWN)


@functools.cache
def _trl_templates() -> dict[str, str]:
    """TRL's stored chat templates by file stem; empty when TRL is not installed."""
    import importlib.util

    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return {}
    folder = Path(next(iter(spec.submodule_search_locations))) / "chat_templates"
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.jinja"))}


def template_name(template: str) -> str | None:
    """The stem of TRL's stored copy of ``template`` (``"gemma3"``, ``"qwen3_training"``), or ``None``."""
    return next((name for name, text in _trl_templates().items() if text == template), None)


def trl_template(name: str | None) -> str | None:
    """TRL's stored template ``name`` (a file stem), or ``None``."""
    return _trl_templates().get(name or "")


def describe(template: str) -> str:
    """The family, and TRL's name for the template when it is one of TRL's: ``"gemma (TRL's gemma3.jinja)"``."""
    family = detect_family(template).name
    name = template_name(template)
    return f"{family} (TRL's {name}.jinja)" if name else family


MULTIMODAL_TEMPLATES = frozenset({"idefics3", "llava_next", "smolvlm"})
"""TRL's templates that read message content only as a list of image/text blocks: they cannot render a text episode."""


def trl_text_templates() -> dict[str, str]:
    """TRL's stored templates that render text conversations (originals and training patches): all but the
    multimodal-only ones."""
    return {
        name: text
        for name, text in _trl_templates().items()
        if name.removesuffix("_training") not in MULTIMODAL_TEMPLATES
    }
