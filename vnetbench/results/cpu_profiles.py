"""The folded stacks of profiled trials: stored compressed beside the trial, read back per trial or per scenario.

Kept in a table of their own (created on first use, so files without profiles stay as they were): a profile is
supplementary to the trial's samples, which carry its figures (profile_share_ratio per mechanism)."""
from __future__ import annotations

import sqlite3
from collections import Counter

from ..probes.profile import compress, decompress
from .store import Store

TABLE = "CREATE TABLE IF NOT EXISTS profiles (trial INTEGER PRIMARY KEY REFERENCES trials(id), folded BLOB NOT NULL)"


def save(store: Store, trial: int, folded: dict[str, int]) -> None:
    with store.db:
        store.db.execute(TABLE)
        store.db.execute("INSERT OR REPLACE INTO profiles VALUES (?, ?)", (trial, compress(folded)))


def _rows(store: Store, sql: str, args: tuple) -> list[sqlite3.Row]:
    if not store.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'profiles'").fetchone():
        return []
    return store.db.execute(sql, args).fetchall()


def of_trial(store: Store, trial: int) -> dict[str, int] | None:
    rows = _rows(store, "SELECT folded FROM profiles WHERE trial = ?", (trial,))
    return decompress(rows[0][0]) if rows else None


def trials(store: Store, cid: int) -> dict[int, tuple[int, int]]:
    """trial id -> (scenario, workload) of every profiled trial of a campaign."""
    rows = _rows(store, "SELECT t.id, t.scenario, t.workload FROM profiles p JOIN trials t ON t.id = p.trial "
                        "WHERE t.campaign = ? AND t.status = 'ok' ORDER BY t.id", (cid,))
    return {r[0]: (r[1], r[2]) for r in rows}


def of_scenario(store: Store, cid: int, scenario: int, workload: int | None = None) -> dict[str, int]:
    """Every ok trial's stacks of one scenario (and workload) added up: for a flame graph, not for statistics."""
    total: Counter = Counter()
    for tid, (sc, wl) in trials(store, cid).items():
        if sc == scenario and (workload is None or wl == workload):
            total.update(of_trial(store, tid) or {})
    return dict(total)


def write_folded(folded: dict[str, int], out) -> int:
    """stackcollapse format ('frame;frame;frame count'), which FlameGraph and speedscope read."""
    for stack, n in sorted(folded.items()):
        out.write(f"{stack} {n}\n")
    return len(folded)


def export(store: Store, cid: int, trial: int | None = None, scenario: int | None = None) -> dict[str, int]:
    """The stacks `export --format folded` writes: one trial's, one scenario's added up, or every profiled trial's
    with the scenario as the root frame (so one file still keeps the scenarios apart)."""
    profiled = trials(store, cid)
    if not profiled:
        raise ValueError(f"campaign {cid} has no profiled trial: set `profile: true` on a workload")
    if trial is not None:
        if trial not in profiled:
            raise ValueError(f"--trial {trial}: not a profiled trial of campaign {cid} (profiled: "
                             f"{', '.join(map(str, list(profiled)[:10]))}{' ...' if len(profiled) > 10 else ''})")
        return of_trial(store, trial) or {}
    if scenario is not None:
        if scenario not in {sc for sc, _ in profiled.values()}:
            raise ValueError(f"--scenario {scenario}: no profiled trial in that scenario of campaign {cid}")
        return of_scenario(store, cid, scenario)
    out: Counter = Counter()
    for tid, (sc, _) in profiled.items():
        out.update({f"scenario_{sc};{k}": v for k, v in (of_trial(store, tid) or {}).items()})
    return dict(out)
