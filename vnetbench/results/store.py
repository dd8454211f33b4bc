"""Results in SQLite (one file, WAL). A trial and all its samples are committed in one transaction when the
trial finishes, before the next starts: a crash loses at most the trial that was running.

The file carries its schema version (PRAGMA user_version): an older file is migrated when opened for writing, a
newer one is refused. Reading commands open the file read-only, so a read-only file or directory can be read.
Every database fault becomes a StoreError: one line naming the file, what is wrong and what to do."""
from __future__ import annotations

import functools
import inspect
import json
import math
import os
import sqlite3
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

from ..core.sample import Sample

DEFAULT_DB = "vnetbench.db"
SCHEMA_VERSION = 3
# Each trial's commands and raw tool output (rawlog.pack: zlib-compressed JSON), apart from the samples: only
# `export --raw` reads it.
RAW_TABLE = "CREATE TABLE IF NOT EXISTS trial_raw (trial INTEGER PRIMARY KEY REFERENCES trials(id), data BLOB NOT NULL)"
# version -> statements bringing a file of the version before it up to it (1: the first, unversioned schema)
MIGRATIONS: dict[int, list[str]] = {
    2: ["ALTER TABLE campaigns ADD COLUMN pid INTEGER", "ALTER TABLE campaigns ADD COLUMN pid_start INTEGER",
        "ALTER TABLE scenarios ADD COLUMN environment TEXT"],
    3: [RAW_TABLE],
}
def seconds_from_env(raw: str | None, default: float = 30.0) -> float | None:
    """$VNETBENCH_DB_TIMEOUT as seconds; None when it is not a number of seconds (the CLI says so, exit 2: read at
    import, 'abc' was a traceback before any command ran)."""
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


_env_timeout = seconds_from_env(os.environ.get("VNETBENCH_DB_TIMEOUT"))
LOCK_TIMEOUT_S = 30.0 if _env_timeout is None else _env_timeout


def storable_id(n: int) -> bool:
    """An id SQLite can hold: a larger one (`show 999999999999999999999`) was an OverflowError traceback; it is
    simply no campaign or trial."""
    return 0 <= n < 2 ** 63


class StoreError(Exception):
    """A results-file fault, as one line for the user."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS campaigns (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, created REAL NOT NULL, finished REAL, status TEXT NOT NULL,
    source TEXT, spec_text TEXT NOT NULL, spec_sha256 TEXT NOT NULL, environment TEXT, prefix TEXT,
    pid INTEGER, pid_start INTEGER);
CREATE TABLE IF NOT EXISTS scenarios (
    campaign INTEGER NOT NULL REFERENCES campaigns(id), idx INTEGER NOT NULL, key TEXT NOT NULL,
    levels TEXT NOT NULL, labels TEXT NOT NULL, status TEXT NOT NULL, reason TEXT,
    implementation TEXT, notes TEXT, environment TEXT, PRIMARY KEY (campaign, idx));
CREATE TABLE IF NOT EXISTS trials (
    id INTEGER PRIMARY KEY, campaign INTEGER NOT NULL, scenario INTEGER NOT NULL, repetition INTEGER NOT NULL,
    workload INTEGER NOT NULL, kind TEXT NOT NULL, params TEXT, status TEXT NOT NULL, error TEXT,
    started REAL, finished REAL, metadata TEXT, UNIQUE (campaign, scenario, repetition, workload));
CREATE TABLE IF NOT EXISTS samples (
    trial INTEGER NOT NULL REFERENCES trials(id), metric TEXT NOT NULL, value REAL NOT NULL, unit TEXT NOT NULL,
    t REAL, metadata TEXT);
CREATE INDEX IF NOT EXISTS samples_trial ON samples(trial);
CREATE INDEX IF NOT EXISTS trials_campaign ON trials(campaign, scenario);
""" + RAW_TABLE + ";\n"


@dataclass
class Campaign:
    id: int
    name: str
    created: float
    finished: float | None
    status: str
    source: str
    spec_text: str
    spec_sha256: str
    environment: dict
    prefix: str | None
    pid: int | None = None         # the process running (or last running) the campaign, and its start time:
    pid_start: int | None = None   # a live one refuses a second `run --resume`

    @functools.cached_property
    def spec(self) -> dict:
        """The stored spec file as plain data (parsed once, for the report and the studies' analyses); {} if it is
        not a YAML mapping."""
        import yaml
        try:  # libyaml's parser where PyYAML has it (its wheels do): 20 times the pure-Python one
            data = yaml.load(self.spec_text or "", Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
        except yaml.YAMLError:
            return {}
        return data if isinstance(data, dict) else {}


def describe(exc: BaseException, path: Path, timeout: float = LOCK_TIMEOUT_S) -> str:
    """One line for a database fault: the file, what is wrong, what to do."""
    msg = str(exc)
    low = msg.lower()
    if "locked" in low or "busy" in low:
        return (f"results file {path} is locked by another process (waited {timeout:g} s): let it finish, "
                f"or use another --db")
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return f"results file {path} is not a vnetbench results file or is damaged ({msg}); use another --db"
    if "full" in low:
        return f"the disk holding {path} is full ({msg}); free some space"
    if "readonly" in low or "read-only" in low:
        return (f"results file {path} is read-only ({msg}): `run` needs a writable file and directory; "
                f"list, show, export and report can read it")
    if "unable to open" in low:
        return (f"cannot open results file {path} ({msg}): check that its directory exists and is writable, "
                f"or pass another --db")
    return f"results file {path}: {msg}"


def _guarded(fn):
    """Store methods raise StoreError (one line) instead of sqlite3's and the OS's errors."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(self, *args, **kwargs):
            try:
                yield from fn(self, *args, **kwargs)
            except (sqlite3.Error, OSError) as exc:
                raise StoreError(describe(exc, self.path, self.timeout)) from exc
        return gen

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(describe(exc, self.path, self.timeout)) from exc
    return wrapper


class Store:
    def __init__(self, path: str | Path = DEFAULT_DB, readonly: bool = False, timeout: float = LOCK_TIMEOUT_S):
        self.path = Path(path)
        self.timeout = timeout
        self.readonly = readonly
        if self.path.is_dir():
            raise StoreError(f"results file {path} is a directory: --db takes a file, e.g. {self.path / DEFAULT_DB}")
        if readonly and not self.path.exists():
            raise StoreError(f"no results file {path}; run an experiment first or pass --db")
        if not readonly and not self.path.parent.is_dir():
            raise StoreError(f"cannot create results file {path}: directory {self.path.parent} does not exist")
        if not readonly and not (os.access(self.path.parent, os.W_OK) and
                                 (not self.path.exists() or os.access(self.path, os.W_OK))):
            raise StoreError(f"results file {path} is read-only (or its directory is): `run` needs a writable file "
                             f"and directory (SQLite writes its journal beside the file); list, show, export and "
                             f"report can read it")
        try:
            self.db = self._open_readonly() if readonly else self._open()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(describe(exc, self.path, timeout)) from exc

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=self.timeout)
        db.row_factory = sqlite3.Row
        self._check_version(db)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("BEGIN IMMEDIATE")  # two runs opening one old file must not both migrate it
        try:
            version = self._check_version(db)
            has_tables = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'campaigns'").fetchone()
            if not has_tables:
                for stmt in filter(str.strip, SCHEMA.split(";")):
                    db.execute(stmt)
            else:
                for v in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                    for stmt in MIGRATIONS[v]:
                        db.execute(stmt)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return db

    def _open_readonly(self) -> sqlite3.Connection:
        uri = f"file:{quote(str(self.path.resolve()))}"
        try:
            db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=self.timeout)
            self._check_version(db)
        except sqlite3.OperationalError:
            # A WAL file in a directory we cannot write (no -shm to create): read it as an immutable file.
            db = sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=self.timeout)
            self._check_version(db)
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'campaigns'").fetchone():
            raise StoreError(f"{self.path} is not a vnetbench results file (it has no campaigns); use another --db")
        db.row_factory = sqlite3.Row
        return db

    def _check_version(self, db: sqlite3.Connection) -> int:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"results file {self.path} was written by a newer vnetbench (schema {version}; this "
                             f"one reads up to {SCHEMA_VERSION}): upgrade vnetbench to read it")
        return version

    def close(self) -> None:
        self.db.close()

    # ---- campaigns ---------------------------------------------------------------------------------------
    def new_campaign(self, name: str, source: str, spec_text: str, sha: str, environment: dict,
                     owner: tuple[int, int | None] | None = None) -> int:
        pid, start = owner or (None, None)
        with self.db:
            cur = self.db.execute(
                "INSERT INTO campaigns (name, created, status, source, spec_text, spec_sha256, environment, pid, "
                "pid_start) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?)",
                (name, time.time(), source, spec_text, sha, json.dumps(environment), pid, start))
        return cur.lastrowid

    def claim(self, cid: int, owner: tuple[int, int | None], alive) -> int | None:
        """Make `owner` (pid, start time) the campaign's process, unless another live one holds it: then return
        that one's pid. Checked and written in one transaction, so two resumes cannot both win."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            row = self.db.execute("SELECT pid, pid_start FROM campaigns WHERE id = ?", (cid,)).fetchone()
            if row and row["pid"] is not None and row["pid"] != owner[0] and alive(row["pid"], row["pid_start"]):
                self.db.execute("ROLLBACK")
                return row["pid"]
            self.db.execute("UPDATE campaigns SET pid = ?, pid_start = ? WHERE id = ?", (*owner, cid))
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        return None

    def set_campaign(self, cid: int, **fields: Any) -> None:
        if "environment" in fields:
            fields["environment"] = json.dumps(fields["environment"])
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self.db:
            self.db.execute(f"UPDATE campaigns SET {cols} WHERE id = ?", (*fields.values(), cid))

    def campaigns(self) -> list[Campaign]:
        return [self._campaign(r) for r in self.db.execute("SELECT * FROM campaigns ORDER BY id")]

    def campaign(self, ref: str | int) -> Campaign | None:
        if str(ref) == "last":
            row = self.db.execute("SELECT * FROM campaigns ORDER BY id DESC LIMIT 1").fetchone()
        else:
            row = self.db.execute("SELECT * FROM campaigns WHERE id = ?", (int(ref),)).fetchone() \
                if str(ref).isdigit() and storable_id(int(ref)) else None
        return self._campaign(row) if row else None

    @staticmethod
    def _campaign(row: sqlite3.Row) -> Campaign:
        known = {f.name for f in fields(Campaign)}
        d = {k: v for k, v in dict(row).items() if k in known}  # an older file lacks the newer columns
        d["environment"] = json.loads(d["environment"] or "{}")
        return Campaign(**d)

    # ---- scenarios ---------------------------------------------------------------------------------------
    def put_scenario(self, cid: int, idx: int, key: str, levels: dict, labels: dict, status: str,
                     reason: str | None, implementation: dict, notes: list[str]) -> None:
        with self.db:
            self.db.execute(
                "INSERT INTO scenarios (campaign, idx, key, levels, labels, status, reason, implementation, notes) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (campaign, idx) DO UPDATE SET "
                "status = excluded.status, reason = excluded.reason, implementation = excluded.implementation, "
                "notes = excluded.notes",
                (cid, idx, key, json.dumps(levels), json.dumps(labels), status, reason,
                 json.dumps(implementation), json.dumps(notes)))

    def set_scenario(self, cid: int, idx: int, status: str, reason: str | None = None) -> None:
        with self.db:
            self.db.execute("UPDATE scenarios SET status = ?, reason = ? WHERE campaign = ? AND idx = ?",
                            (status, reason, cid, idx))

    def set_scenario_environment(self, cid: int, idx: int, environment: dict) -> None:
        """What the built scenario's interfaces looked like (MTU, qdiscs, offloads per node)."""
        with self.db:
            self.db.execute("UPDATE scenarios SET environment = ? WHERE campaign = ? AND idx = ?",
                            (json.dumps(environment), cid, idx))

    def scenarios(self, cid: int) -> list[dict]:
        rows = self.db.execute("SELECT * FROM scenarios WHERE campaign = ? ORDER BY idx", (cid,))
        out = []
        for r in rows:
            d = dict(r)
            for k in ("levels", "labels", "implementation", "notes", "environment"):
                d[k] = json.loads(d.get(k) or "null")
            out.append(d)
        return out

    # ---- trials ------------------------------------------------------------------------------------------
    def done_trials(self, cid: int) -> set[tuple[int, int, int]]:
        rows = self.db.execute("SELECT scenario, repetition, workload FROM trials WHERE campaign = ?", (cid,))
        return {tuple(r) for r in rows}

    def save_trial(self, cid: int, scenario: int, repetition: int, workload: int, kind: str, params: dict,
                   status: str, error: str | None, started: float, finished: float, samples: list[Sample],
                   metadata: dict | None = None, raw: bytes | None = None) -> int:
        """One trial, its samples and (raw) its commands and tool output, committed together."""
        with self.db:
            cur = self.db.execute(
                "INSERT INTO trials (campaign, scenario, repetition, workload, kind, params, status, error, started, "
                "finished, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (cid, scenario, repetition, workload, kind, json.dumps(params), status, error, started, finished,
                 json.dumps(metadata or {})))
            tid = cur.lastrowid
            self.db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?, ?)",
                                [(tid, s.metric, s.value, s.unit, s.t, json.dumps(s.metadata)) for s in samples])
            if raw is not None:
                self.db.execute("INSERT INTO trial_raw VALUES (?, ?)", (tid, raw))
        return tid

    def trial(self, tid: int) -> dict | None:
        if not storable_id(tid):
            return None
        row = self.db.execute("SELECT * FROM trials WHERE id = ?", (tid,)).fetchone()
        return dict(row) | {"params": json.loads(row["params"] or "{}"),
                            "metadata": json.loads(row["metadata"] or "{}")} if row else None

    def raw(self, tid: int) -> bytes | None:
        """The trial's packed commands and tool output; None if none was kept (a file older than schema 3)."""
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'trial_raw'").fetchone():
            return None
        row = self.db.execute("SELECT data FROM trial_raw WHERE trial = ?", (tid,)).fetchone()
        return row[0] if row else None

    def trials(self, cid: int) -> list[dict]:
        rows = self.db.execute("SELECT * FROM trials WHERE campaign = ? ORDER BY id", (cid,))
        return [dict(r) | {"params": json.loads(r["params"] or "{}"), "metadata": json.loads(r["metadata"] or "{}")}
                for r in rows]

    def samples(self, cid: int) -> Iterator[dict]:
        """Every sample of a campaign joined with its trial and scenario."""
        rows = self.db.execute(
            "SELECT s.metric, s.value, s.unit, s.t, s.metadata, t.id AS trial, t.repetition, t.kind AS workload, "
            "t.workload AS workload_index, "
            "t.started, t.scenario, sc.labels, sc.implementation FROM samples s JOIN trials t ON s.trial = t.id "
            "JOIN scenarios sc ON sc.campaign = t.campaign AND sc.idx = t.scenario WHERE t.campaign = ? "
            "ORDER BY t.id, s.rowid", (cid,))
        scenario: dict[str, dict] = {}  # a scenario's labels and implementation parsed once, shared by its samples
        # Each metadata text parsed once, each sample given its own copy of the mapping (values stay shared, as a
        # trial's samples share their window when they are made): S4's smoke run stores 80,072 samples with 294
        # distinct metadata texts, and json.loads was two thirds of reading them.
        metadata: dict[str, dict] = {}
        for r in rows:
            d = dict(r)
            text = d["metadata"] or "{}"
            meta = metadata.get(text)
            if meta is None:
                meta = metadata[text] = json.loads(text)
            d["metadata"] = dict(meta) if isinstance(meta, dict) else json.loads(text)
            for col in ("labels", "implementation"):
                text = d[col] or "{}"
                d[col] = scenario[text] if text in scenario else scenario.setdefault(text, json.loads(text))
            yield d


for _name, _fn in list(vars(Store).items()):
    if not _name.startswith("_") and inspect.isfunction(_fn) and _name != "close":
        setattr(Store, _name, _guarded(_fn))
