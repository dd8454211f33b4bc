"""Results in SQLite (one file, WAL). A trial and all its samples are committed in one transaction when the
trial finishes, before the next starts: a crash loses at most the trial that was running."""
from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .sample import Sample

DEFAULT_DB = "vnetbench.db"

SCHEMA = """
CREATE TABLE IF NOT EXISTS campaigns (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, created REAL NOT NULL, finished REAL, status TEXT NOT NULL,
    source TEXT, spec_text TEXT NOT NULL, spec_sha256 TEXT NOT NULL, environment TEXT, prefix TEXT);
CREATE TABLE IF NOT EXISTS scenarios (
    campaign INTEGER NOT NULL REFERENCES campaigns(id), idx INTEGER NOT NULL, key TEXT NOT NULL,
    levels TEXT NOT NULL, labels TEXT NOT NULL, status TEXT NOT NULL, reason TEXT,
    implementation TEXT, notes TEXT, PRIMARY KEY (campaign, idx));
CREATE TABLE IF NOT EXISTS trials (
    id INTEGER PRIMARY KEY, campaign INTEGER NOT NULL, scenario INTEGER NOT NULL, repetition INTEGER NOT NULL,
    workload INTEGER NOT NULL, kind TEXT NOT NULL, params TEXT, status TEXT NOT NULL, error TEXT,
    started REAL, finished REAL, metadata TEXT, UNIQUE (campaign, scenario, repetition, workload));
CREATE TABLE IF NOT EXISTS samples (
    trial INTEGER NOT NULL REFERENCES trials(id), metric TEXT NOT NULL, value REAL NOT NULL, unit TEXT NOT NULL,
    t REAL, metadata TEXT);
CREATE INDEX IF NOT EXISTS samples_trial ON samples(trial);
CREATE INDEX IF NOT EXISTS trials_campaign ON trials(campaign, scenario);
"""


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


class Store:
    def __init__(self, path: str | Path = DEFAULT_DB):
        self.path = Path(path)
        self.db = sqlite3.connect(self.path, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    # ---- campaigns ---------------------------------------------------------------------------------------
    def new_campaign(self, name: str, source: str, spec_text: str, sha: str, environment: dict) -> int:
        with self.db:
            cur = self.db.execute(
                "INSERT INTO campaigns (name, created, status, source, spec_text, spec_sha256, environment) "
                "VALUES (?, ?, 'running', ?, ?, ?, ?)", (name, time.time(), source, spec_text, sha, json.dumps(environment)))
        return cur.lastrowid

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
                if str(ref).isdigit() else None
        return self._campaign(row) if row else None

    @staticmethod
    def _campaign(row: sqlite3.Row) -> Campaign:
        d = dict(row)
        d["environment"] = json.loads(d["environment"] or "{}")
        return Campaign(**d)

    # ---- scenarios ---------------------------------------------------------------------------------------
    def put_scenario(self, cid: int, idx: int, key: str, levels: dict, labels: dict, status: str,
                     reason: str | None, implementation: dict, notes: list[str]) -> None:
        with self.db:
            self.db.execute(
                "INSERT INTO scenarios VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (campaign, idx) DO UPDATE SET "
                "status = excluded.status, reason = excluded.reason, implementation = excluded.implementation, "
                "notes = excluded.notes",
                (cid, idx, key, json.dumps(levels), json.dumps(labels), status, reason,
                 json.dumps(implementation), json.dumps(notes)))

    def set_scenario(self, cid: int, idx: int, status: str, reason: str | None = None) -> None:
        with self.db:
            self.db.execute("UPDATE scenarios SET status = ?, reason = ? WHERE campaign = ? AND idx = ?",
                            (status, reason, cid, idx))

    def scenarios(self, cid: int) -> list[dict]:
        rows = self.db.execute("SELECT * FROM scenarios WHERE campaign = ? ORDER BY idx", (cid,))
        out = []
        for r in rows:
            d = dict(r)
            for k in ("levels", "labels", "implementation", "notes"):
                d[k] = json.loads(d[k] or "null")
            out.append(d)
        return out

    # ---- trials ------------------------------------------------------------------------------------------
    def done_trials(self, cid: int) -> set[tuple[int, int, int]]:
        rows = self.db.execute("SELECT scenario, repetition, workload FROM trials WHERE campaign = ?", (cid,))
        return {tuple(r) for r in rows}

    def save_trial(self, cid: int, scenario: int, repetition: int, workload: int, kind: str, params: dict,
                   status: str, error: str | None, started: float, finished: float, samples: list[Sample],
                   metadata: dict | None = None) -> int:
        with self.db:
            cur = self.db.execute(
                "INSERT INTO trials (campaign, scenario, repetition, workload, kind, params, status, error, started, "
                "finished, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (cid, scenario, repetition, workload, kind, json.dumps(params), status, error, started, finished,
                 json.dumps(metadata or {})))
            tid = cur.lastrowid
            self.db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?, ?)",
                                [(tid, s.metric, s.value, s.unit, s.t, json.dumps(s.metadata)) for s in samples])
        return tid

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
        for r in rows:
            d = dict(r)
            d["metadata"] = json.loads(d["metadata"] or "{}")
            d["labels"] = json.loads(d["labels"])
            d["implementation"] = json.loads(d["implementation"] or "{}")
            yield d
