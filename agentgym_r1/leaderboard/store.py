"""The results store: SQLite (standard library) with an append-only JSONL journal beside it.

Every finished episode is written at once, in its own transaction, to the database and, flushed, to the journal
``<db>.jsonl``. A run killed at any moment therefore loses nothing that finished, and is resumed by running it again:
a run is keyed by what defines it (env id, source, env options, policy, seed), and episodes already stored are skipped.

A database that cannot be read (a crash of the disk, a file overwritten by something else) is kept aside as
``<db>.corrupt-<time>``, and a fresh database is rebuilt from the journal; :attr:`ResultsStore.recovery` says what
happened. Several processes may write at once (WAL mode, a busy timeout), one connection each: a write that finds
the database locked past SQLite's busy timeout (another process in a long transaction) is tried again, with backoff,
for ``retry_for`` seconds before :class:`ResultsFileError`; it lands once, or not at all.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from agentgym_r1.core.retry import retry_call
from agentgym_r1.error import ConfigError, ResultsFileError
from agentgym_r1.leaderboard.journal import BadLine, BadLines, check_record, finite_metrics, read_journal

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL, suite TEXT, env_id TEXT NOT NULL, env_version TEXT,
    source TEXT, policy TEXT NOT NULL, policy_kind TEXT, seed INTEGER, episodes INTEGER, package_version TEXT,
    git_commit TEXT, started_at TEXT, updated_at TEXT, status TEXT, message TEXT, env_kwargs TEXT
);
CREATE TABLE IF NOT EXISTS episodes (
    run_id INTEGER NOT NULL REFERENCES runs(id), idx INTEGER NOT NULL, seed INTEGER, task_id TEXT,
    success INTEGER, reward REAL, turns INTEGER, invalid INTEGER, truncated INTEGER, metrics TEXT, error TEXT,
    seconds REAL, finished_at TEXT, PRIMARY KEY (run_id, idx)
);
CREATE TABLE IF NOT EXISTS trainings (
    key TEXT PRIMARY KEY, env_id TEXT NOT NULL, source TEXT, env_kwargs TEXT, status TEXT, message TEXT,
    before_policy TEXT, after_policy TEXT, steps INTEGER, curve TEXT, budget TEXT, checkpoint TEXT, pid INTEGER,
    started_at TEXT, updated_at TEXT
);
"""
T = TypeVar("T")
RUN_FIELDS = (
    "key",
    "suite",
    "env_id",
    "env_version",
    "source",
    "policy",
    "policy_kind",
    "seed",
    "episodes",
    "package_version",
    "git_commit",
    "started_at",
    "updated_at",
    "status",
    "message",
    "env_kwargs",
)


@dataclass
class RunMeta:
    """What defines a run and where it came from. ``key`` identifies it for resuming."""

    env_id: str
    source: str
    policy: str
    seed: int
    episodes: int
    suite: str = ""
    policy_kind: str = "baseline"
    env_version: str = ""
    package_version: str = ""
    git_commit: str | None = None
    started_at: str = ""
    updated_at: str = ""
    status: str = "running"
    message: str | None = None
    key: str = ""
    samples: int = 1  # plays of each task (the board tells tasks apart by their seed); not a column
    env_kwargs: str = ""  # the env's options beyond its source (``--env-kwargs``), as canonical JSON; "" for none

    def __post_init__(self) -> None:
        if not self.key:
            parts: list[Any] = [self.env_id, self.source, self.policy, self.seed]
            extra = {
                **({"samples": self.samples} if self.samples != 1 else {}),
                **({"env_kwargs": json.loads(self.env_kwargs)} if self.env_kwargs else {}),
            }
            self.key = json.dumps(parts + ([extra] if extra else []), separators=(",", ":"), sort_keys=True)
        if not self.env_version:
            self.env_version = self.env_id.rpartition("-")[2] if "-v" in self.env_id else ""
        self.started_at = self.started_at or now()
        self.updated_at = self.updated_at or self.started_at


@dataclass
class TrainingRecord:
    """An agent trained in a run (the quick suite's tiny agent): where it stands, its held-out learning curve and
    which stored runs are its rows. ``status`` is ``running`` while it trains, then ``done``, ``failed`` or
    ``interrupted``; a record left ``running`` by a process that is gone was killed."""

    key: str
    env_id: str
    source: str
    env_kwargs: str = ""  # the held-out episodes' env options, as canonical JSON (those of its rows)
    status: str = "running"
    message: str | None = None
    before_policy: str = ""  # the policy specs of its two rows (hf:CHECKPOINT?...)
    after_policy: str = ""
    steps: int = 0  # RL steps planned
    curve: list[list[float]] = field(default_factory=list)  # [step, held-out success] points
    budget: dict[str, Any] = field(default_factory=dict)
    checkpoint: str = ""
    pid: int = 0
    started_at: str = ""
    updated_at: str = ""


TRAINING_FIELDS = tuple(TrainingRecord.__dataclass_fields__)


@dataclass
class EpisodeRecord:
    idx: int
    seed: int
    task_id: str | None
    success: bool
    reward: float
    turns: int
    invalid: int
    truncated: bool = False
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0
    finished_at: str = ""


def _clean_episode(ep: EpisodeRecord) -> None:
    """The episode's numbers as plain Python values (numpy's too), so its journal line replays; non-finite numbers
    are never stored: a metric that is NaN or infinite is left out, a non-finite reward counts as 0 (as the envs
    count non-finite reward parts), each with a RuntimeWarning naming the episode."""
    ep.idx, ep.seed, ep.turns, ep.invalid = int(ep.idx), int(ep.seed), int(ep.turns), int(ep.invalid)
    ep.success, ep.truncated = bool(ep.success), bool(ep.truncated)
    ep.task_id = None if ep.task_id is None else str(ep.task_id)
    ep.error = None if ep.error is None else str(ep.error)
    ep.metrics, dropped = finite_metrics(ep.metrics)
    ep.reward, ep.seconds = float(ep.reward), float(ep.seconds)
    if not math.isfinite(ep.reward):
        ep.reward, dropped = 0.0, [*dropped, "reward"]
    if not math.isfinite(ep.seconds):
        ep.seconds = 0.0
    if dropped:
        warnings.warn(
            f"episode {ep.idx} (task {ep.task_id}) had non-finite {dropped}; the metrics are left out and a "
            "reward counts as 0. Check the env's metrics and reward function.",
            RuntimeWarning,
            stacklevel=3,
        )


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _locked(e: BaseException) -> bool:
    """Another connection holds the database ("database is locked", "database table is locked", "busy")."""
    return isinstance(e, sqlite3.OperationalError) and any(w in str(e) for w in ("locked", "busy"))


def _seconds(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0):
        raise ConfigError(f"ResultsStore {name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


class ResultsStore:
    """Runs and their episodes in ``path`` (SQLite), journaled to ``path + ".jsonl"``.

    ``busy_timeout``: seconds SQLite itself waits for another connection's lock on each statement. ``retry_for``:
    seconds a write (or the opening) that still finds the database locked is tried again, with backoff, before
    :class:`ResultsFileError`.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 60.0, retry_for: float = 600.0) -> None:
        self.busy_timeout = _seconds("busy_timeout", busy_timeout)
        self.retry_for = _seconds("retry_for", retry_for)
        self.path = Path(path)
        self.journal = Path(f"{self.path}.jsonl")
        self.recovery: str | None = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = self._open_when_free()
        except sqlite3.DatabaseError as e:
            self.db = self._recover(e)
        else:
            self._rebuild_if_emptied()

    # -- opening and recovery ---------------------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(SCHEMA)
            self._add_env_kwargs_column(db)
            check = db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {check}")
            db.execute("SELECT count(*) FROM episodes").fetchone()
        except sqlite3.DatabaseError:
            db.close()
            raise
        db.row_factory = sqlite3.Row
        return db

    @staticmethod
    def _add_env_kwargs_column(db: sqlite3.Connection) -> None:
        """A file written before runs recorded their env options gets the column (empty for its runs)."""
        if "env_kwargs" in {r[1] for r in db.execute("PRAGMA table_info(runs)")}:
            return
        try:
            db.execute("ALTER TABLE runs ADD COLUMN env_kwargs TEXT")
        except sqlite3.OperationalError as e:  # another process added it first
            if "duplicate column" not in str(e):
                raise

    def _open_when_free(self) -> sqlite3.Connection:
        """:meth:`_open`, waiting while another process holds the file: "locked" and "busy" (switching to WAL, creating
        the schema while a parallel job writes) are not corruption, and must never send the file to :meth:`_recover`."""
        try:
            return retry_call(lambda: self._open(), retry_if=_locked, within=self.retry_for, max_wait=2.0)
        except sqlite3.OperationalError as e:
            raise ResultsFileError(f"cannot open {self.path}: {e}") from e

    def _write(self, fn: Callable[[], T]) -> T:
        """``fn()`` (statements on ``self.db`` that are safe to run again: upserts), tried again while another
        process holds the database past the busy timeout, for ``retry_for`` seconds."""
        try:
            return retry_call(fn, retry_if=_locked, within=self.retry_for, first_wait=0.2, max_wait=5.0)
        except sqlite3.OperationalError as e:
            hint = (
                (
                    f" (still locked after {self.retry_for:g} s of retries: another process holds it; stop it or "
                    "wait, then run again: stored episodes are kept)"
                )
                if _locked(e)
                else ""
            )
            raise ResultsFileError(f"cannot write to {self.path}: {e}{hint}") from e

    def _recover(self, error: Exception) -> sqlite3.Connection:
        backup = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        os.replace(self.path, backup)
        for suffix in ("-wal", "-shm"):
            side = Path(f"{self.path}{suffix}")
            if side.exists():
                os.replace(side, Path(f"{backup}{suffix}"))
        try:
            db = self._open()
        except sqlite3.DatabaseError as e:  # pragma: no cover - a directory we cannot write a database in
            raise ResultsFileError(f"cannot create a results database at {self.path}: {e}") from e
        runs, episodes, bad = self._replay(db)
        self.recovery = (
            f"results file {self.path} could not be read ({error}); kept it as {backup} and rebuilt "
            f"{episodes} episode(s) of {runs} run(s) from the journal {self.journal}{bad}"
        )
        return db

    def _rebuild_if_emptied(self) -> None:
        """A database with no runs beside a journal that has some (the file was deleted or truncated to 0 bytes,
        which SQLite opens as a fresh empty database): rebuild it from the journal, so ``show`` shows the results and
        ``run`` does not play again (and journal again) what is already done. Replaying is idempotent, so two
        processes doing it at once agree."""
        if not self.journal.exists() or self.journal.stat().st_size == 0:
            return
        if self.db.execute("SELECT count(*) FROM runs").fetchone()[0]:
            return
        runs, episodes, bad = self._write(lambda: self._replay(self.db))
        self.recovery = (
            f"results file {self.path} was empty or missing; rebuilt {episodes} episode(s) of {runs} "
            f"run(s) from the journal {self.journal}{bad}"
        )

    def _replay(self, db: sqlite3.Connection) -> tuple[int, int, BadLines]:
        """Store every journal line that passes its checks (:mod:`agentgym_r1.leaderboard.journal`); the others are
        skipped, counted and named in the returned :class:`BadLines`, and the lines after them replayed."""
        runs: dict[str, int] = {}
        episodes, bad = 0, BadLines()
        if not self.journal.exists():
            return 0, 0, bad
        for lineno, entry in read_journal(self.journal, bad):
            try:
                episodes += self._replay_entry(db, entry, runs)
            except (BadLine, ValueError, TypeError, OverflowError, RecursionError, sqlite3.InterfaceError) as e:
                bad.add(lineno, str(e) if isinstance(e, BadLine) else f"{type(e).__name__}: {str(e)[:80]}")
        if bad.count:
            warnings.warn(f"results journal {self.journal}: {bad.describe()}", RuntimeWarning, stacklevel=2)
        return len(runs), episodes, bad

    def _replay_entry(self, db: sqlite3.Connection, entry: dict[str, Any], runs: dict[str, int]) -> int:
        """Store one checked journal line; 1 if it was an episode."""
        unknown = sorted(set(entry) - {"run", "episode", "training"})
        if unknown or ("training" in entry) == ("run" in entry):
            raise BadLine(f"keys {sorted(entry)}: expected run (with an optional episode) or training")
        if "training" in entry:
            self._upsert_training(db, check_record(TrainingRecord, entry["training"]))
            return 0
        run = check_record(RunMeta, entry["run"])
        episode = check_record(EpisodeRecord, entry["episode"]) if "episode" in entry else None
        runs[run.key] = run_id = self._upsert_run(db, run)
        if episode is not None:
            self._insert_episode(db, run_id, episode)
        return int(episode is not None)

    # -- writing ----------------------------------------------------------------------------------------------------
    def _journal(self, entry: dict[str, Any]) -> None:
        with self.journal.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    @staticmethod
    def _upsert_run(db: sqlite3.Connection, run: RunMeta) -> int:
        values = [getattr(run, k) for k in RUN_FIELDS]
        updates = ", ".join(f"{k}=excluded.{k}" for k in RUN_FIELDS if k not in ("key", "started_at"))
        db.execute(
            f"INSERT INTO runs ({', '.join(RUN_FIELDS)}) VALUES ({', '.join('?' * len(RUN_FIELDS))}) "
            f"ON CONFLICT(key) DO UPDATE SET {updates}",
            values,
        )
        return int(db.execute("SELECT id FROM runs WHERE key = ?", (run.key,)).fetchone()[0])

    @staticmethod
    def _insert_episode(db: sqlite3.Connection, run_id: int, ep: EpisodeRecord) -> None:
        db.execute(
            "INSERT OR REPLACE INTO episodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                ep.idx,
                ep.seed,
                ep.task_id,
                int(ep.success),
                float(ep.reward),
                ep.turns,
                ep.invalid,
                int(ep.truncated),
                json.dumps(ep.metrics),
                ep.error,
                ep.seconds,
                ep.finished_at,
            ),
        )

    @staticmethod
    def _upsert_training(db: sqlite3.Connection, rec: TrainingRecord) -> None:
        values = [json.dumps(v) if k in ("curve", "budget") else v for k, v in asdict(rec).items()]
        db.execute(
            f"INSERT OR REPLACE INTO trainings ({', '.join(TRAINING_FIELDS)}) "
            f"VALUES ({', '.join('?' * len(TRAINING_FIELDS))})",
            values,
        )

    def save_training(self, rec: TrainingRecord) -> None:
        """Store (or update) a training record: committed and journaled before returning, like an episode."""
        rec.started_at = rec.started_at or now()
        rec.updated_at = now()
        self._write(lambda: self._upsert_training(self.db, rec))
        self._journal({"training": asdict(rec)})

    def trainings(self) -> list[TrainingRecord]:
        rows = self.db.execute(f"SELECT {', '.join(TRAINING_FIELDS)} FROM trainings ORDER BY env_id, key").fetchall()
        return [
            TrainingRecord(
                **{
                    k: json.loads(r[k] or ("[]" if k == "curve" else "{}")) if k in ("curve", "budget") else r[k]
                    for k in TRAINING_FIELDS
                }
            )
            for r in rows
        ]

    def begin_run(self, run: RunMeta) -> int:
        """Create or update the run (its status, episode count and metadata) and return its id."""
        run.updated_at = now()
        run_id = self._write(lambda: self._upsert_run(self.db, run))
        self._journal({"run": asdict(run)})
        return run_id

    def add_episode(self, run: RunMeta, run_id: int, ep: EpisodeRecord) -> None:
        """Store one finished episode: committed to the database and flushed to the journal before returning."""
        ep.finished_at = ep.finished_at or now()
        _clean_episode(ep)
        self._write(lambda: self._insert_episode(self.db, run_id, ep))
        self._journal({"run": asdict(run), "episode": asdict(ep)})

    def finish_run(self, run: RunMeta, status: str, message: str | None = None) -> None:
        run.status, run.message = status, message
        self.begin_run(run)

    # -- reading ----------------------------------------------------------------------------------------------------
    def done_indices(self, run_id: int) -> set[int]:
        return {r[0] for r in self.db.execute("SELECT idx FROM episodes WHERE run_id = ?", (run_id,))}

    def runs(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.execute("SELECT * FROM runs ORDER BY env_id, policy, seed")]

    def episodes(self, run_id: int) -> list[EpisodeRecord]:
        rows = self.db.execute("SELECT * FROM episodes WHERE run_id = ? ORDER BY idx", (run_id,)).fetchall()
        # A file written before non-finite metrics were refused may hold NaN (JSON's NaN) or a NULL reward (SQLite's
        # NaN): read as absent and 0, so the board is drawn.
        return [
            EpisodeRecord(
                r["idx"],
                r["seed"],
                r["task_id"],
                bool(r["success"]),
                r["reward"] or 0.0,
                r["turns"],
                r["invalid"],
                bool(r["truncated"]),
                finite_metrics(json.loads(r["metrics"] or "{}"))[0],
                r["error"],
                r["seconds"] or 0.0,
                r["finished_at"] or "",
            )
            for r in rows
        ]

    def close(self) -> None:
        self.db.close()
