"""Provenance and the confirmatory guard of a study script (issue 36, "Bad input").

Every result a study script writes records where its code came from: :func:`provenance` gives ``commit`` (``git
rev-parse HEAD``), ``dirty`` (whether ``git status --porcelain`` lists any change) and the first changed paths.

**What counts as dirty.** Every change git reports: staged or unstaged edits of tracked files, deletions, and
untracked files that are not ignored (an untracked module beside a script can be imported by it). Two things are left
out: paths ``.gitignore`` ignores (``runs/``, caches: git never lists them), and everything under the run's own
output directory when it lies inside the repository (the script writes there while it runs, so its own outputs would
make a second phase of the same study dirty). The output directory is excluded with git's ``:(exclude)`` pathspec.

**A confirmatory run** names its protocol (``--protocol benchmarks/reports/<study>_protocol.md``): a Markdown page
whose first fenced block with the info string ``protocol`` holds YAML with at least ``status``, ``commit``, ``seeds``,
``held_out`` and ``config``. :func:`guard` refuses the run, before any work, with a named error from
:mod:`agentgym_r1.error`:

* :class:`~agentgym_r1.error.ProtocolError`: no protocol block, a missing field, a ``status`` other than
  ``registered`` (a ``draft`` is a template, not a protocol), a run whose seed or held-out set the protocol does not
  list, or one whose CPU kernel variables differ from the protocol's ``config.kernels`` (float results of a chaotic
  SFT depend on the kernels: ``ATEN_CPU_CAPABILITY=avx2`` against the default moves where it lands);
* :class:`~agentgym_r1.error.ProtocolNotCommittedError`: the protocol file is not in git at ``HEAD`` or differs from
  ``HEAD``'s copy (it must be committed at or before the code that runs);
* :class:`~agentgym_r1.error.ProtocolCommitError`: the protocol's ``commit`` is not a commit of this repository, or not
  an ancestor of ``HEAD`` (``git merge-base --is-ancestor``);
* :class:`~agentgym_r1.error.DirtyTreeError`: the working tree is dirty (as above).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentgym_r1.error import (
    DirtyTreeError,
    ProtocolCommitError,
    ProtocolError,
    ProtocolNotCommittedError,
    StudyError,
)

REQUIRED = ("status", "commit", "seeds", "held_out", "config")
REGISTERED = "registered"
BLOCK = re.compile(r"^```protocol[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
SHOWN = 10  # changed paths recorded and named in an error
KERNEL_VARIABLES = (  # what picks the instructions of torch's own kernels, MKL's BLAS and oneDNN's
    "ATEN_CPU_CAPABILITY",
    "MKL_ENABLE_INSTRUCTIONS",
    "ONEDNN_MAX_CPU_ISA",
)


RESAMPLES, BOOT_SEED = 10_000, 36  # the studies' percentile bootstrap: resamples, and the seed of its generator


def resample_indices(seeds: int, questions: int, rng: Any) -> list[tuple[Any, Any]]:
    """The two-level bootstrap's draws (``rng`` a numpy Generator): for each of :data:`RESAMPLES` resamples, seed
    indices and question indices, both drawn with replacement, seeds first. Every study's analysis draws the same way,
    so one generator seeded :data:`BOOT_SEED` gives the same draws wherever the same shapes are resampled."""
    return [(rng.integers(seeds, size=seeds), rng.integers(questions, size=questions)) for _ in range(RESAMPLES)]


def interval(values: Any) -> tuple[float, float]:
    """The 95% percentile interval of bootstrap ``values``."""
    import numpy as np

    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def bootstrap(diff: Any, rng: Any) -> tuple[float, float]:
    """The 95% percentile interval of the mean of ``diff`` (seeds x questions, a numpy array), seeds and questions
    resampled (:func:`resample_indices`)."""
    import numpy as np

    return interval(np.array([diff[np.ix_(s, q)].mean() for s, q in resample_indices(*diff.shape, rng)]))


def git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``git -C root args`` (not checked: callers read the return code)."""
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)


def repo_root(path: Path) -> Path:
    """The top of the git work tree holding ``path``; :class:`StudyError` outside one."""
    done = git(path if path.is_dir() else path.parent, "rev-parse", "--show-toplevel")
    if done.returncode:
        raise StudyError(
            f"{path} is not inside a git work tree ({done.stderr.strip()}); a study records the commit "
            f"of its code: run it from a clone of the repository"
        )
    return Path(done.stdout.strip())


def inside(root: Path, path: Path) -> str | None:
    """``path`` relative to ``root`` in git's spelling, or ``None`` when it lies outside."""
    try:
        return Path(path).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None


def changes(root: Path, out: Path | None = None) -> list[str]:
    """What ``git status --porcelain`` lists (tracked changes and untracked files that are not ignored), leaving out
    the output directory ``out`` when it lies inside the repository."""
    spec = ["--", "."]
    rel = inside(root, out) if out is not None else None
    if rel and rel != ".":
        spec.append(f":(exclude){rel}")
    done = git(root, "status", "--porcelain", "--untracked-files=all", *spec)
    if done.returncode:
        raise StudyError(f"git status failed in {root}: {done.stderr.strip()}")
    return [line for line in done.stdout.splitlines() if line.strip()]


def kernels() -> dict[str, str | None]:
    """The variables that pin this process's CPU kernels (:data:`KERNEL_VARIABLES`), as set (``None``: unset, each
    library picks the widest instructions the CPU has)."""
    return {name: os.environ.get(name) for name in KERNEL_VARIABLES}


def provenance(root: Path, out: Path | None = None) -> dict[str, Any]:
    """``commit`` (HEAD), ``dirty``, the first changed paths (``changes``) of the tree at ``root``, and the
    :func:`kernels` variables."""
    head = git(root, "rev-parse", "HEAD")
    if head.returncode:
        raise StudyError(f"git rev-parse HEAD failed in {root} ({head.stderr.strip()}): a study needs a commit")
    changed = changes(root, out)
    return {"commit": head.stdout.strip(), "dirty": bool(changed), "changes": changed[:SHOWN], "kernels": kernels()}


def check_kernels(protocol: dict[str, Any], rel: str) -> None:
    """Refuse a run whose kernel variables differ from the protocol's ``config.kernels`` (when it names any)."""
    config = protocol.get("config")
    wanted = config.get("kernels") if isinstance(config, dict) else None
    if not wanted:
        return
    if not isinstance(wanted, dict) or any(name not in KERNEL_VARIABLES for name in wanted):
        raise ProtocolError(
            f"{rel}: config.kernels must map some of {list(KERNEL_VARIABLES)} to values, got {wanted!r}"
        )
    have = kernels()
    wrong = {name: value for name, value in wanted.items() if have[name] != (None if value is None else str(value))}
    if wrong:
        fix = " ".join(f"{name}={value}" for name, value in wanted.items() if value is not None)
        raise ProtocolError(
            f"{rel}: the protocol pins the CPU kernels {wanted}, this process has "
            f"{ {name: have[name] for name in wrong} }; run it as: env {fix} python ..."
        )


def read_protocol(path: Path) -> dict[str, Any]:
    """The YAML of the first fenced ``protocol`` block of the Markdown page at ``path``, with every required field."""
    import yaml

    if not Path(path).is_file():
        raise ProtocolError(
            f"--protocol {str(path)!r} is not a file; give the committed protocol page, e.g. "
            f"benchmarks/reports/<study>_protocol.md"
        )
    match = BLOCK.search(Path(path).read_text(encoding="utf-8"))
    if match is None:
        raise ProtocolError(
            f"{path} has no fenced block opened with ```protocol; write the protocol's fields "
            f"({', '.join(REQUIRED)}) as YAML inside one"
        )
    try:
        fields = yaml.safe_load(match[1])
    except yaml.YAMLError as e:
        raise ProtocolError(f"{path}: the protocol block is not valid YAML ({e})") from e
    if not isinstance(fields, dict):
        raise ProtocolError(f"{path}: the protocol block must be a mapping of {REQUIRED}, got {type(fields).__name__}")
    missing = [name for name in REQUIRED if name not in fields]
    if missing:
        raise ProtocolError(f"{path}: the protocol block lacks {missing}; it needs {list(REQUIRED)}")
    return fields


def check_committed(root: Path, path: Path) -> str:
    """The protocol's path in the repository, once it is in ``HEAD``'s tree and the file on disk is that copy."""
    rel = inside(root, path)
    if rel is None or git(root, "cat-file", "-e", f"HEAD:{rel}").returncode:
        raise ProtocolNotCommittedError(
            f"protocol {str(path)!r} is not in git at HEAD; commit it (git add {path} && "
            f"git commit) before any confirmatory run"
        )
    if git(root, "diff", "--quiet", "HEAD", "--", rel).returncode:
        raise ProtocolNotCommittedError(
            f"protocol {rel} differs from its committed copy at HEAD; a protocol is "
            f"fixed before the runs: commit the change or restore it (git checkout -- "
            f"{rel})"
        )
    return rel


def check_commit(root: Path, commit: object, rel: str) -> str:
    """The protocol's ``commit``, resolved, once it is an ancestor of ``HEAD`` (or ``HEAD`` itself)."""
    resolved = git(root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if not isinstance(commit, str) or not commit or resolved.returncode:
        raise ProtocolCommitError(
            f"{rel}: commit {commit!r} is not a commit of this repository; write the full hash "
            f"of the code the protocol runs (git rev-parse HEAD when it was written)"
        )
    full = resolved.stdout.strip()
    if git(root, "merge-base", "--is-ancestor", full, "HEAD").returncode:
        head = git(root, "rev-parse", "HEAD").stdout.strip()
        raise ProtocolCommitError(
            f"{rel}: commit {full} is not an ancestor of HEAD {head}: this checkout does not "
            f"hold the protocol's code. Check out {full} (or a descendant of it) and run again"
        )
    return full


def check_run(protocol: dict[str, Any], rel: str, seed: int | None, held_out: Iterable[str] | None) -> None:
    """Refuse a run whose ``seed`` or held-out sets the protocol does not list."""
    seeds = protocol["seeds"]
    if seed is not None and isinstance(seeds, list) and seed not in seeds:
        raise ProtocolError(f"{rel}: --seed {seed} is not one of the protocol's seeds {seeds}; run those")
    sets = protocol["held_out"]
    names = sets if isinstance(sets, list) else list(sets or {})
    unlisted = [name for name in held_out or () if name not in names]
    if unlisted:
        raise ProtocolError(f"{rel}: held-out set(s) {unlisted} are not in the protocol's held_out {names}")


def guard(
    protocol_path: Path,
    root: Path,
    out: Path | None = None,
    seed: int | None = None,
    held_out: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Refuse a confirmatory run (the named errors above) or return what its results record: the provenance and
    the protocol's path, ``commit`` and the last commit that changed the protocol file."""
    protocol = read_protocol(protocol_path)
    if str(protocol["status"]).strip().lower() != REGISTERED:
        raise ProtocolError(
            f"{protocol_path}: status is {protocol['status']!r}, not {REGISTERED!r}: a draft is a "
            f"template. Fill in its commit, set status: {REGISTERED} and commit it before the runs"
        )
    rel = check_committed(root, protocol_path)
    commit = check_commit(root, protocol["commit"], rel)
    record = provenance(root, out)
    if record["dirty"]:
        raise DirtyTreeError(
            f"the working tree at {root} has changes git has not committed "
            f"({', '.join(record['changes'])}); a confirmatory run uses committed code only: commit "
            f"or stash them (git stash -u) and run again"
        )
    check_run(protocol, rel, seed, held_out)
    check_kernels(protocol, rel)
    file_commit = git(root, "log", "-1", "--format=%H", "--", rel).stdout.strip()
    return {**record, "protocol": {"path": rel, "commit": commit, "file_commit": file_commit}}


def start(
    script: str | Path,
    out: Path,
    protocol: Path | None = None,
    seed: int | None = None,
    held_out: Iterable[str] | None = None,
) -> dict[str, Any]:
    """What a study script records with every result: :func:`provenance`, or with ``protocol`` the checked record of
    :func:`guard` (which refuses the run first). Call it in ``main`` before any work. Outside a git work tree an
    exploratory run records ``commit: None`` and the reason; a confirmatory one is refused."""
    if protocol is None:
        try:
            root = repo_root(Path(script).resolve())
        except StudyError as e:  # an exploratory run from an export (no .git) still runs, recording why
            return {"commit": None, "dirty": None, "changes": [], "protocol": None, "note": str(e)}
        return {**provenance(root, out), "protocol": None}
    return guard(Path(protocol), repo_root(Path(script).resolve()), out, seed, held_out)
