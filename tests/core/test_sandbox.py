"""The ``python`` tool's sandbox: a hostile corpus, each program bounded and answered with an error result.

Every hostile program runs under the tool's limits (CPU, address space, processes, open files, output), which the
launcher sets before the program's first line; bwrap adds the namespaces. The bwrap tests skip, with the reason, only
where bwrap is missing or cannot make its namespaces."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from agentgym_r1.core.sandbox import Limits, PythonTool, bwrap_problem
from agentgym_r1.error import ConfigError, SandboxUnavailableError

LIMITS = Limits(cpu_s=2, wall_s=20.0, memory_bytes=256 * 2**20, processes=8, output_bytes=16 * 2**10)

# (name, program, a pattern of what the answer must say). Each must fail as an error result, never crash or hang
# the caller.
HOSTILE = [
    ("infinite loop", "while True:\n    pass", "CPU time|time limit"),  # on a loaded machine the wall clock may end it
    ("sleep past the wall clock", "import time\ntime.sleep(600)", "time limit"),
    ("fork bomb", "import os\nwhile True:\n    os.fork()", "Resource temporarily unavailable"),
    ("10 GB at once", "x = bytearray(10 * 2**30)", "MemoryError"),
    ("10 GB a MiB at a time", "a = []\nfor _ in range(10 * 1024):\n    a.append(bytearray(2**20))", "MemoryError"),
    ("print 1 GB", "import sys\nfor _ in range(2**20):\n    sys.stdout.write('x' * 1024)", "went past"),
    ("write outside the work dir", "open('/usr/owned', 'w').write('x')", "Read-only file system"),
    ("write over the tool's own code", f"open({__file__!r}, 'a').write('x')", "Error"),
    ("read a file outside", f"print(open({__file__!r}).read()[:50])", "No such file or directory"),
    ("read the host's secrets", "print(open('/etc/shadow').read())", "No such file or directory"),
    ("open a socket", "import socket\ns = socket.create_connection(('127.0.0.1', 22), timeout=2)", "Error"),
    ("kill the parent", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", "Operation not permitted"),
    ("kill every process", "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('survived')", "Error"),
    ("many open files", "fs = [open('/dev/null') for _ in range(10_000)]", "Too many open files"),
]


@pytest.fixture(scope="module")
def sandboxed() -> PythonTool:
    problem = bwrap_problem()
    if problem is not None:
        pytest.skip(f"bwrap cannot sandbox here: {problem}")
    return PythonTool(limits=LIMITS)


def test_a_program_runs_and_prints(sandboxed):
    result = sandboxed(code="print(sum(range(101)) * 3 // 2)")
    assert result.ok and result.text.strip() == "7575"


def test_a_call_starts_fresh_with_no_network_and_an_unprivileged_uid(sandboxed):
    first = sandboxed(code="open('state', 'w').write('x')\nimport os\nprint(os.getuid(), sorted(os.listdir('/')))")
    assert first.ok, first.text
    assert first.text.startswith("65534 " if os.getuid() == 0 else f"{os.getuid()} ")
    assert "home" not in first.text and "etc" not in first.text
    again = sandboxed(code="import os\nprint(os.path.exists('state'))")
    assert again.text.strip() == "False"
    net = sandboxed(code="import socket\nprint([i[1] for i in socket.if_nameindex()])")
    assert net.text.strip() in ("['lo']", "[]"), net.text


@pytest.mark.parametrize("name,program,says", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_program_is_bounded_and_answered_with_an_error(sandboxed, name, program, says):
    result = sandboxed(code=program)
    assert not result.ok, result.text
    assert re.search(says, result.text), result.text[-500:]
    assert len(result.text) <= LIMITS.output_bytes + 200
    assert os.path.exists(__file__) and not os.path.exists("/usr/owned")
    assert sandboxed(code="print(1 + 1)").text.strip() == "2"  # the tool goes on


def _running(marker: str) -> list[str]:
    """The processes on this machine whose command line holds ``marker``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(pid)
        except OSError:  # gone meanwhile
            pass
    return found


def test_a_process_left_behind_dies_with_the_call_and_tracebacks_start_at_the_code(sandboxed):
    marker = f"{os.getpid()}.25"
    spawn = (
        "import os, subprocess\nif os.fork() == 0:\n    os.setsid()\n"
        f"    subprocess.Popen(['sleep', '{marker}'])\n    os._exit(0)\nos.wait()\nprint('left')"
    )
    result = sandboxed(code=spawn)
    assert result.ok and "left" in result.text, result.text
    assert not _running(marker)  # killed with the sandbox's pid namespace
    error = sandboxed(code="x = 1\nraise ValueError('bad')")
    assert error.text.startswith('Traceback (most recent call last):\n  File "<code>", line 2'), error.text


def test_without_a_sandbox_the_tool_refuses_to_start_and_says_how_to_opt_out(tmp_path):
    for missing in ("/nonexistent/bwrap", shutil.which("false") or "/bin/false"):
        bwrap_problem.cache_clear()
        with pytest.raises(SandboxUnavailableError, match=r"sandbox='rlimits'.*NOT isolation"):
            PythonTool(bwrap=missing)
    with pytest.raises(ConfigError, match="sandbox must be one of"):
        PythonTool(sandbox="docker")
    with pytest.raises(ConfigError, match=r"Limits\.cpu_s"):
        Limits(cpu_s=float("inf"))


def test_the_plain_subprocess_is_opt_in_warns_and_keeps_the_limits():
    with pytest.warns(RuntimeWarning, match="not isolation"):
        plain = PythonTool(sandbox="rlimits", limits=LIMITS)
    assert plain(code="print(6 * 7)").text.strip() == "42"
    for name, program, says in HOSTILE[:2] + HOSTILE[3:6]:
        result = plain(code=program)
        assert not result.ok and re.search(says, result.text), (name, result.text[-300:])
    if os.getuid() == 0:  # dropped to an unprivileged uid, so the kernel applies the process limit
        bomb = plain(code=HOSTILE[2][1])
        assert not bomb.ok and "Resource temporarily unavailable" in bomb.text
