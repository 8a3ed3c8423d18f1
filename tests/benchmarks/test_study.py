"""The provenance and confirmatory guard of the study scripts (``benchmarks/study.py``), on real temporary git
repositories: each refusal, the accepted case, and the proof scripts refusing the draft protocol before any work."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import study

from agentgym_r1.error import (
    DirtyTreeError,
    ProtocolCommitError,
    ProtocolError,
    ProtocolNotCommittedError,
    StudyError,
)

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "benchmarks" / "reports" / "hotpotqa_confirmatory_protocol.md"


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        [
            "git",
            "-C",
            str(root),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "-c",
            "commit.gpgsign=false",
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def commit(root: Path, message: str) -> str:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD")


def protocol(
    root: Path,
    code_commit: object,
    status: str = "registered",
    seeds: str = "[0, 1]",
    name: str = "study_protocol.md",
    config: str = "  grpo: {lr: 4.2e-4}\n",
) -> Path:
    path = root / "reports" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        f"# A study\n\nSome prose.\n\n```protocol\nstatus: {status}\ncommit: {code_commit}\nseeds: {seeds}\n"
        f"held_out:\n  fresh: {{first_seed: 3000000, questions: 1024}}\nconfig:\n{config}```\n"
    )
    return path


def draft(directory: Path) -> Path:
    """The HotpotQA confirmatory protocol page as a draft (its status set back to ``draft``) in ``directory``."""
    path = directory / "draft.md"
    path.write_text(re.sub(r"^status: *\w+", "status: draft", TEMPLATE.read_text(), count=1, flags=re.M))
    return path


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    """A repository with one commit of code (its hash) and ``runs/`` ignored."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "code.py").write_text("x = 1\n")
    (root / ".gitignore").write_text("runs/\n")
    return root, commit(root, "code")


def test_provenance_records_head_and_what_makes_the_tree_dirty(repo):
    root, code = repo
    clean = study.provenance(root)
    assert clean == {"commit": code, "dirty": False, "changes": [], "kernels": study.kernels()}
    (root / "runs").mkdir()
    (root / "runs" / "result.json").write_text("{}")  # ignored: not dirty
    (root / "out").mkdir()
    (root / "out" / "curve.json").write_text("{}")  # untracked, but the run's own output directory
    assert study.provenance(root, root / "out")["dirty"] is False
    assert study.provenance(root)["dirty"] is True  # the same file is a change when it is not the output directory
    (root / "code.py").write_text("x = 2\n")
    record = study.provenance(root, root / "out")
    assert record["dirty"] is True and record["changes"] == [" M code.py"]


def test_a_registered_committed_protocol_whose_commit_is_an_ancestor_is_accepted(repo):
    root, code = repo
    path = protocol(root, code)
    file_commit = commit(root, "protocol")
    (root / "later.py").write_text("y = 1\n")
    head = commit(root, "later code")
    record = study.guard(path, root, root / "runs" / "x", seed=1, held_out=["fresh"])
    assert record["commit"] == head and record["dirty"] is False
    assert record["protocol"] == {"path": "reports/study_protocol.md", "commit": code, "file_commit": file_commit}


def test_a_dirty_tree_is_refused(repo):
    root, code = repo
    path = protocol(root, code)
    commit(root, "protocol")
    (root / "code.py").write_text("x = 3\n")
    with pytest.raises(DirtyTreeError, match=r"code\.py"):
        study.guard(path, root)
    git(root, "checkout", "--", "code.py")
    (root / "new_module.py").write_text("")  # an untracked module the code could import
    with pytest.raises(DirtyTreeError, match=r"new_module\.py"):
        study.guard(path, root)


def test_a_protocol_not_in_git_or_changed_since_is_refused(repo):
    root, code = repo
    path = protocol(root, code)
    with pytest.raises(ProtocolNotCommittedError, match="not in git at HEAD"):
        study.guard(path, root)
    commit(root, "protocol")
    path.write_text(path.read_text().replace("[0, 1]", "[0, 1, 2]"))
    with pytest.raises(ProtocolNotCommittedError, match="differs from its committed copy"):
        study.guard(path, root)


def test_a_protocol_whose_commit_is_not_an_ancestor_of_head_is_refused(repo):
    root, code = repo
    git(root, "checkout", "-q", "-b", "other")
    (root / "elsewhere.py").write_text("z = 1\n")
    other = commit(root, "code on another branch")
    git(root, "checkout", "-q", "main")
    path = protocol(root, other)
    commit(root, "protocol naming the other branch's code")
    with pytest.raises(ProtocolCommitError, match=f"commit {other} is not an ancestor of HEAD"):
        study.guard(path, root)
    path = protocol(root, "0123456789abcdef0123456789abcdef01234567", name="unknown.md")
    commit(root, "protocol naming no commit")
    with pytest.raises(ProtocolCommitError, match="is not a commit of this repository"):
        study.guard(path, root)


def test_the_draft_template_and_a_protocol_missing_a_field_are_refused(repo):
    root, code = repo
    draft(root)
    commit(root, "the draft")
    with pytest.raises(ProtocolError, match="status is 'draft'"):
        study.guard(root / "draft.md", root)
    path = protocol(root, code)
    path.write_text(path.read_text().replace("seeds: [0, 1]\n", ""))
    commit(root, "no seeds")
    with pytest.raises(ProtocolError, match=r"lacks \['seeds'\]"):
        study.guard(path, root)
    (root / "prose.md").write_text("# no block\n")
    commit(root, "no block")
    with pytest.raises(ProtocolError, match="no fenced block"):
        study.guard(root / "prose.md", root)


def test_a_run_the_protocol_does_not_list_is_refused(repo):
    root, code = repo
    path = protocol(root, code)
    commit(root, "protocol")
    with pytest.raises(ProtocolError, match="--seed 5 is not one of the protocol's seeds"):
        study.guard(path, root, seed=5)
    with pytest.raises(ProtocolError, match=r"\['disjoint'\] are not in the protocol's held_out"):
        study.guard(path, root, seed=0, held_out=["fresh", "disjoint"])


@pytest.mark.parametrize("script", ["train_hotpotqa_proof.py", "train_gsm8k_proof.py", "train_webshop_proof.py"])
def test_the_proof_scripts_refuse_the_draft_protocol_before_any_work(tmp_path, script):
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / script),
            "sft",
            "--out",
            str(tmp_path / "run"),
            "--protocol",
            str(draft(tmp_path)),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode != 0
    assert "ProtocolError" in out.stderr and "status is 'draft'" in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "run").exists()  # refused before the output directory was made


def test_outside_a_git_tree_an_exploratory_run_records_no_commit_and_a_confirmatory_one_is_refused(tmp_path):
    script = tmp_path / "export" / "bench.py"
    script.parent.mkdir()
    script.write_text("")
    if subprocess.run(["git", "-C", str(script.parent), "rev-parse"], capture_output=True, check=False).returncode == 0:
        pytest.skip("the temporary directory lies inside a git work tree")
    record = study.start(script, tmp_path / "out")
    assert record["commit"] is None and record["dirty"] is None and "not inside a git work tree" in record["note"]
    with pytest.raises(StudyError, match="not inside a git work tree"):
        study.start(script, tmp_path / "out", protocol=draft(tmp_path))


def test_a_run_under_other_cpu_kernels_than_the_protocol_pins_is_refused(repo, monkeypatch):
    root, code = repo
    pinned = "  kernels: {ATEN_CPU_CAPABILITY: avx2, ONEDNN_MAX_CPU_ISA: AVX2}\n"
    path = protocol(root, code, config=f"  grpo: {{lr: 4.2e-4}}\n{pinned}")
    commit(root, "protocol")
    for name in study.KERNEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ProtocolError, match="ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2"):
        study.guard(path, root)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    with pytest.raises(ProtocolError, match="'ONEDNN_MAX_CPU_ISA': None"):
        study.guard(path, root)  # one of the two is not enough
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    record = study.guard(path, root)
    assert record["kernels"] == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": None,
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    }
    path = protocol(root, code, name="typo.md", config="  kernels: {ATEN_CPU: avx2}\n")
    commit(root, "a protocol naming a variable nothing reads")
    with pytest.raises(ProtocolError, match=r"config\.kernels must map some of"):
        study.guard(path, root)
