"""The ``python`` tool: model-written code run in a sandbox.

**Where the code runs.** ``sandbox="bwrap"`` (default): under bubblewrap (Debian's ``bubblewrap``), in new network,
pid, ipc and uts namespaces (no network: only a loopback that nothing listens on), on a read-only root that holds
only the system directories and the interpreter's prefix (no ``/root``, ``/home``, ``/etc`` or data of this
machine), in a fresh size-capped tmpfs work directory ``/work`` that vanishes with the call. Before the model's code
runs, a launcher (:data:`LAUNCHER`) sets the rlimits of :class:`Limits` (CPU seconds, address space, processes,
open files, file size, which caps the output: stdout and stderr go to an unnamed file outside the sandbox) and, when
started as root, drops to an unprivileged uid, so the process limit is enforced (the kernel does not apply it to
root) and signals to this process are refused. A call past ``Limits.wall_s`` is killed with its whole pid namespace.

``sandbox="rlimits"``: a plain subprocess with the same launcher and limits, in a temporary directory. It is **not
isolation**: the code can read what the uid can read, open sockets and write where the uid may, and a process it
starts in a session of its own may outlive the call (until its CPU limit). The tool only runs
so when asked by name (and warns); when bwrap is missing or cannot make its namespaces, ``sandbox="bwrap"`` refuses
to start with :class:`~agentgym_r1.error.SandboxUnavailableError`, saying why.

Each call is a fresh interpreter (``python -I -S``: no site-packages, no environment): no state is kept between
calls. The tool's answer is the output, then a line saying how the run ended when it did not exit 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from typing import Any, ClassVar, Literal

from agentgym_r1.core.tools import BaseTool, ToolResult, truncate
from agentgym_r1.error import ConfigError, SandboxUnavailableError

Sandbox = Literal["bwrap", "rlimits"]
SANDBOXES = ("bwrap", "rlimits")
UNPRIVILEGED_UID = 65534  # nobody

# Runs first in the sandboxed interpreter: read the code, set the limits, drop root, run the code as __main__.
LAUNCHER = r"""
import json, linecache, os, resource, sys
lim = json.loads(sys.argv[1]); code = sys.stdin.read(); sys.stdin.close()
if os.getuid() == 0:
    if lim["chown"]:
        os.chown(".", lim["uid"], lim["uid"])
    os.setgroups([]); os.setgid(lim["uid"]); os.setuid(lim["uid"])
for name, value in lim["rlimits"].items():
    resource.setrlimit(getattr(resource, name), (value, value + 1 if name == "RLIMIT_CPU" else value))
linecache.cache["<code>"] = (len(code), None, code.splitlines(True), "<code>")
sys.argv = ["<code>"]; del lim, name, value
try:
    exec(compile(code, "<code>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
except (SystemExit, KeyboardInterrupt):
    raise
except BaseException as e:  # the traceback from the model's code on, without this launcher's frame
    import traceback; traceback.print_exception(type(e), e, e.__traceback__.tb_next); sys.exit(1)
"""


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one call may use. ``processes`` counts every process of the sandbox uid on the machine (the kernel's
    ``RLIMIT_NPROC``), so concurrent calls share it; ``output_bytes`` caps stdout and stderr together and each file
    the code writes; ``work_bytes`` is the size of the ``/work`` tmpfs (bwrap only)."""

    cpu_s: int = 5
    wall_s: float = 10.0
    memory_bytes: int = 512 * 2**20
    processes: int = 16
    open_files: int = 64
    output_bytes: int = 64 * 2**10
    work_bytes: int = 16 * 2**20

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"Limits.{field.name} must be a positive finite number, got {value!r}")

    def rlimits(self) -> dict[str, int]:
        return {
            "RLIMIT_CPU": int(self.cpu_s),
            "RLIMIT_AS": int(self.memory_bytes),
            "RLIMIT_NPROC": int(self.processes),
            "RLIMIT_NOFILE": int(self.open_files),
            "RLIMIT_FSIZE": int(self.output_bytes),
            "RLIMIT_CORE": 0,
        }


@dataclasses.dataclass(frozen=True)
class RunResult:
    """How a run ended: the exit status (negative: killed by that signal), whether it ran past the wall-clock limit,
    its output (at most ``Limits.output_bytes``) and whether the output reached that cap."""

    returncode: int
    timed_out: bool
    output: str
    output_full: bool = False


def interpreter() -> tuple[str, str]:
    """The interpreter the code runs on (this one's real file) and the prefix its standard library lives under."""
    return os.path.realpath(sys.executable), os.path.realpath(sys.base_prefix)


def bwrap_command(bwrap: str, limits: Limits) -> list[str]:
    """The bubblewrap command line up to the interpreter: namespaces, the read-only root and the work tmpfs."""
    exe, prefix = interpreter()
    cmd = [
        bwrap,
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            cmd += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            cmd += ["--ro-bind", top, top]
    for path in sorted({prefix, os.path.dirname(exe)}):
        if not path.startswith("/usr/"):  # its parents traversable by the dropped uid (/root is 0700 outside)
            parents = [p for p in _ancestors(path) if not os.path.islink(p)]
            cmd += [*(arg for p in parents for arg in ("--perms", "0755", "--dir", p)), "--ro-bind", path, path]
    cmd += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(int(limits.work_bytes)),
        "--tmpfs",
        "/work",
        "--chdir",
        "/work",
        "--clearenv",
        "--setenv",
        "HOME",
        "/work",
        "--setenv",
        "TMPDIR",
        "/work",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--remount-ro",
        "/",
    ]
    return cmd


def _ancestors(path: str) -> list[str]:
    """``/a/b/c`` -> ``["/a", "/a/b"]``."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def run_python(
    code: str, limits: Limits = Limits(), sandbox: Sandbox = "bwrap", bwrap: str = "bwrap", uid: int = UNPRIVILEGED_UID
) -> RunResult:
    """Run ``code`` once, bounded by ``limits``, under ``sandbox``; under bwrap, return only once every process of
    the call is gone."""
    exe, _ = interpreter()
    launch = {"rlimits": limits.rlimits(), "uid": uid, "chown": sandbox == "bwrap"}
    argv = [exe, "-I", "-S", "-c", LAUNCHER, json.dumps(launch)]
    info_r, info_w = os.pipe()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryDirectory(prefix="agentgym-python-") as work:
        if sandbox == "bwrap":
            argv = [*bwrap_command(bwrap, limits), "--info-fd", str(info_w), "--", *argv]
        else:
            os.chmod(work, 0o777)  # the dropped uid works here
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=work,
                env={"PATH": "/usr/bin:/bin", "HOME": work, "TMPDIR": work},
                start_new_session=True,
                pass_fds=(info_w,),
            )
        finally:
            os.close(info_w)
        timed_out = False
        try:
            proc.communicate(code.encode("utf-8", "replace"), timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc.pid)
            proc.wait()
            _end_namespace(info_r)
        full = out.seek(0, os.SEEK_END) >= limits.output_bytes
        out.seek(0)
        output = out.read(int(limits.output_bytes)).decode("utf-8", "replace")
    return RunResult(proc.returncode, timed_out, output, full)


def _end_namespace(info_r: int, timeout: float = 10.0) -> None:
    """Kill the sandbox's pid 1 (``--info-fd`` names it as ``child-pid``), and with it every process of its pid
    namespace, and wait (at most ``timeout``) until it has exited. bwrap's monitor returns when the code's process
    exits, but its pid 1 waits for every other process left behind (a daemon the code started) before it exits.
    Closes ``info_r``."""
    text = b""
    try:
        os.set_blocking(info_r, False)
        with contextlib.suppress(BlockingIOError):
            text = os.read(info_r, 65536)
    finally:
        os.close(info_r)
    with contextlib.suppress(ValueError, TypeError, KeyError):  # no info: the rlimits sandbox, or bwrap failed
        pid = int(json.loads(text)["child-pid"])
        with contextlib.suppress(ProcessLookupError):  # already gone
            pidfd = os.pidfd_open(pid)  # a pidfd, so a reused pid is never signalled
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                select.select([pidfd], [], [], timeout)  # readable once the process has exited
            finally:
                os.close(pidfd)


def _kill_group(pgid: int) -> None:
    """SIGKILL the call's process group (bwrap's pid namespace dies with its init; see ``--die-with-parent``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


@functools.lru_cache(maxsize=8)
def bwrap_problem(bwrap: str = "bwrap") -> str | None:
    """``None`` when ``bwrap`` can run code here, else why not (missing, or its stderr). Probed once per path."""
    path = shutil.which(bwrap)
    if path is None:
        return f"{bwrap!r} is not on PATH (install Debian's bubblewrap: apt-get install -y bubblewrap)"
    result = run_python("print(6 * 7)", Limits(wall_s=30.0), "bwrap", path)
    if result.returncode != 0 or result.output.strip() != "42":
        return (
            f"{path} could not run Python in a sandbox here (exit {result.returncode}): {result.output.strip()[:500]}"
        )
    return None


def describe_end(result: RunResult, limits: Limits, sandbox: Sandbox) -> str | None:
    """A line saying how a run that did not exit 0 ended, naming the limit it hit; ``None`` for a clean exit."""
    code = result.returncode
    if result.timed_out:
        return f"[stopped: the code ran past the {limits.wall_s:g} s time limit]"
    if code == 0 and not result.output_full:
        return None
    # a signal: a negative status, or (bwrap reports its child's death by signal N as exit 128 + N) above 128
    sig = -code if code < 0 else code - 128 if sandbox == "bwrap" and code > 128 else None
    if sig == signal.SIGXCPU:
        return f"[stopped: the code used its {limits.cpu_s} s of CPU time]"
    if sig == signal.SIGXFSZ or result.output_full:  # Python ignores SIGXFSZ: its write fails with EFBIG
        return f"[stopped: the output (or a file) went past {limits.output_bytes} bytes]"
    if sig is None or sig not in signal.valid_signals():
        return f"[exit code {code}]"
    return f"[killed by signal {signal.Signals(sig).name}]"


class PythonTool(BaseTool):
    """The ``python`` tool: runs a program in a sandbox (see the module docstring) and answers what it printed.

    ``sandbox="bwrap"`` refuses to start (:class:`SandboxUnavailableError`) where bwrap cannot run; ``"rlimits"``
    is a plain subprocess with the same limits and is not isolation (a warning says so)."""

    name = "python"
    description = (
        "Run a Python 3 program (standard library only) and see what it prints; print the values you need. "
        "Each call starts fresh: nothing is kept between calls. No network, no files outside the work dir."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "a complete program, for example print(12 * 7 / 3)"}},
        "required": ["code"],
        "additionalProperties": False,
    }
    timeout = None  # each call is bounded by its own wall-clock limit, and its processes are killed past it
    max_code_chars = 20_000

    def __init__(
        self,
        sandbox: Sandbox = "bwrap",
        limits: Limits | None = None,
        *,
        bwrap: str = "bwrap",
        uid: int = UNPRIVILEGED_UID,
    ) -> None:
        if sandbox not in SANDBOXES:
            raise ConfigError(f"PythonTool: sandbox must be one of {list(SANDBOXES)}, got {sandbox!r}")
        if limits is not None and not isinstance(limits, Limits):
            raise ConfigError(f"PythonTool: limits must be a Limits, got {type(limits).__name__}")
        self.sandbox, self.limits, self.bwrap, self.uid = sandbox, limits or Limits(), bwrap, uid
        if sandbox == "bwrap":
            problem = bwrap_problem(bwrap)
            if problem is not None:
                raise SandboxUnavailableError(
                    f"the python tool needs a sandbox and none can be made here: {problem}. Install bubblewrap where "
                    "it can create namespaces, or opt into sandbox='rlimits' (a plain subprocess with rlimits; it is "
                    "NOT isolation: the code can read files, open sockets and write where its uid may)"
                )
        else:
            warnings.warn(
                "PythonTool(sandbox='rlimits') runs model code in a plain subprocess with rlimits: this is "
                "not isolation",
                RuntimeWarning,
                stacklevel=2,
            )

    def __call__(self, code: str) -> ToolResult:  # type: ignore[override]
        if len(code) > self.max_code_chars:
            return ToolResult(False, f"Error: the program is longer than {self.max_code_chars} characters.")
        result = run_python(code, self.limits, self.sandbox, self.bwrap, self.uid)
        end = describe_end(result, self.limits, self.sandbox)
        output = truncate(result.output, self.max_output_chars - 200)  # room for the end line, which must be seen
        text = output if end is None else f"{output}\n{end}".lstrip("\n")
        return ToolResult(end is None, text or "(the program printed nothing; print the values you need)")
