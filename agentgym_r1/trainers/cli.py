"""The trainers' command line: parse ``--config run.yaml [--flag value ...]`` with TRL's ``TrlParser``, check that
the run can train what it says before any work starts, train, save.

Every mistake a user can make in the config (a missing file, YAML that does not parse, a misspelt key, a bad value,
an env id or option the env does not know, a missing model directory) ends in one :class:`ConfigError` line that
says what was given and how to fix it, never a library traceback.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NoReturn

from agentgym_r1.error import ConfigError


def parse_config(config_class: type, argv: Sequence[str] | None) -> Any:
    """``TrlParser((config_class,)).parse_args_and_config(argv)`` with its errors turned into one-line
    :class:`ConfigError`\\ s (TRL reads the YAML with ``yaml.safe_load`` and rejects unknown keys with a
    ``ValueError``; argparse's own errors, a YAML value of the wrong type such as ``learning_rate: abc`` or an
    unknown flag, which it would answer with a page of usage and ``exit(2)``, raise here instead)."""
    import yaml
    from trl import TrlParser

    class Parser(TrlParser):
        def error(self, message: str) -> NoReturn:  # argparse.ArgumentParser.error: print usage, exit 2
            raise ConfigError(
                f"{message} (in --config {config} or on the command line). Give a value of the "
                "field's type (`agentgym-r1 train ... --help` lists the fields)."
            )

    argv = list(argv) if argv is not None else None
    config = _config_path(argv)
    if config is not None and not os.path.isfile(config):
        raise ConfigError(f"--config {config}: no such file. Give the path of a YAML run config (see configs/).")
    try:
        (args,) = Parser((config_class,)).parse_args_and_config(args=argv)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(
            f"--config {config}: not valid YAML{where} ({getattr(e, 'problem', e)}). "
            "Fix the syntax (a 'key: value' per line)."
        ) from None
    except ConfigError:
        raise
    except ValueError as e:  # TRL's unknown keys, or a value a field's __post_init__ refused
        raise ConfigError(
            f"{e} Valid keys are the fields of {config_class.__name__} (`agentgym-r1 train ... --help` lists them)."
        ) from None
    return args


def _config_path(argv: list[str] | None) -> str | None:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    for i, a in enumerate(argv):
        if a == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--config="):
            return a.split("=", 1)[1]
    return None


def main_for(config_class: type, trainer_class: type, argv: Sequence[str] | None) -> None:
    """``python -m agentgym_r1.trainers.<algo>``: :func:`run_from_argv`, a named error printed as one line."""
    import sys

    from agentgym_r1.error import AgentGymError

    try:
        run_from_argv(config_class, trainer_class, argv)
    except AgentGymError as e:
        print(f"agentgym-r1: error: {e}", file=sys.stderr)
        sys.exit(2)


def run_from_argv(config_class: type, trainer_class: type, argv: Sequence[str] | None) -> None:
    """Parse and check every field; check the env, the output directory and the model's files; load the tokenizer
    and check the first prompt fits; only then load the model, train and save: every trainer's ``main``."""
    from agentgym_r1.adapters.loading import load_model, load_tokenizer
    from agentgym_r1.trainers.preflight import check_prompt_fits, preflight

    args = parse_config(config_class, argv)
    preflight(args)
    tokenizer = load_tokenizer(args.model_init)
    check_prompt_fits(args, tokenizer)
    model = load_model(args.model_init, **dict(args.model_init_kwargs or {}), **args.quantization_kwargs())
    trainer = trainer_class(model, args, tokenizer)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    trainer.save_model(args.output_dir)
