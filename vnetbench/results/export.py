"""Samples out, one line per sample, for other tools: JSON lines (nested, as stored), or a flat typed table (CSV,
Parquet) with one column per fact.

Every sample carries what it measures (sample.dimensions: scope, which, direction, pair, role), its workload's name
and its trial's status, error and flags (noisy and why, retried after a hang), so an invalid or noisy trial's
numbers can be filtered out. Samples of failed, invalid and noisy trials are all exported: the status says which.

The flat table has a stable typed schema: the fixed COLUMNS below, then `factor_<name>` per factor (a number when
every scenario's level of it is one), `impl_<element>` per datapath element and `meta_<key>` for any other
metadata (typed by its values). No cell holds JSON; a pair is a number (`all_pairs` marks a sum over the pairs).
"""
from __future__ import annotations

import csv
import datetime as dt
import json
import math
from pathlib import Path
from typing import IO, Any, Iterator

from ..core.sample import absolute, dimensions
from ..system import rawlog
from . import dataset
from .store import Store

FORMATS = ("jsonl", "csv", "parquet")

# name -> type of the fixed columns: int, float, bool or str (Parquet: int64, float64, bool, string; all nullable)
COLUMNS: dict[str, str] = {
    "campaign": "int", "scenario": "int", "trial": "int", "repetition": "int", "workload_index": "int",
    "workload": "str", "workload_kind": "str", "trial_status": "str", "trial_error": "str", "noisy": "bool",
    "noisy_reasons": "str", "trial_flags": "str", "retried_after": "str", "metric": "str", "value": "float",
    "unit": "str", "t": "float", "timestamp": "time", "scope": "str", "which": "str", "direction": "str", "pair": "int",
    "all_pairs": "bool", "role": "str", "series": "bool", "cpu": "int", "window_start": "float",
    "window_end": "float",
}
# metadata keys the fixed columns already carry (or that name the same thing as Dims)
_DONE = {"pair", "direction", "role", "series", "cpu", "window", "scope", "vm", "process", "background_workload",
         "background_name"}


def _trial_facts(store: Store, cid: int) -> tuple[dict[int, dict], dict[tuple[int, int], str]]:
    trials = {t["id"]: t for t in store.trials(cid)}
    return trials, dataset.workload_names(trials.values())


def records(store: Store, cid: int) -> Iterator[dict[str, Any]]:
    """JSON lines: the stored sample (scenario labels, implementation and metadata nested) with its Dims, its
    workload's name and its trial's status and flags."""
    trials, names = _trial_facts(store, cid)
    for s in store.samples(cid):
        t = trials[s["trial"]]
        ts = absolute(s["t"], s["started"]) or s["started"]
        yield {"campaign": cid, "trial": s["trial"], "repetition": s["repetition"], "scenario": s["labels"],
               "scenario_index": s["scenario"], "workload": s["workload"],
               "workload_name": names.get((s["scenario"], s["workload_index"]), s["workload"]),
               "trial_status": t["status"], "trial_error": t["error"], "noisy": (t["metadata"] or {}).get("noisy", []),
               "flags": (t["metadata"] or {}).get("flags", []), "metric": s["metric"], "value": s["value"], "unit": s["unit"], "t": s["t"],
               "dims": dimensions(s["metadata"]).as_dict(), "implementation": s["implementation"],
               "timestamp": _iso(ts), "metadata": s["metadata"]}


def _iso(ts: float | None) -> str | None:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat() if ts is not None else None


def flat_records(store: Store, cid: int) -> Iterator[dict[str, Any]]:
    """One flat row per sample: scalars only, no JSON in any cell."""
    trials, names = _trial_facts(store, cid)
    for s in store.samples(cid):
        t, meta = trials[s["trial"]], s["metadata"]
        tmeta = t["metadata"] or {}
        d = dimensions(meta)
        window = meta.get("window") if isinstance(meta.get("window"), list) and len(meta["window"]) == 2 else None
        row = {"campaign": cid, "scenario": s["scenario"], "trial": s["trial"], "repetition": s["repetition"],
               "workload_index": s["workload_index"],
               "workload": names.get((s["scenario"], s["workload_index"]), s["workload"]), "workload_kind": s["workload"],
               "trial_status": t["status"], "trial_error": t["error"], "noisy": bool(tmeta.get("noisy")),
               "noisy_reasons": "; ".join(map(str, tmeta.get("noisy") or [])) or None,
               "trial_flags": "; ".join(map(str, tmeta.get("flags") or [])) or None,
               "retried_after": tmeta.get("retried_after"), "metric": s["metric"], "value": s["value"],
               "unit": s["unit"], "t": s["t"], "timestamp": _iso(absolute(s["t"], s["started"]) or s["started"]),
               "scope": d.scope, "which": d.which or None, "direction": d.direction or None,
               "pair": int(d.pair) if d.pair.isdigit() else None, "all_pairs": d.pair == "all",
               "role": d.role or None, "series": bool(meta.get("series")),
               "cpu": meta["cpu"] if isinstance(meta.get("cpu"), int) else None,
               "window_start": window[0] if window else None, "window_end": window[1] if window else None}
        row |= {f"factor_{k}": v for k, v in s["labels"].items()}
        row |= {f"impl_{k}": v for k, v in (s["implementation"] or {}).items()}
        row |= {f"meta_{k}": _scalar(v) for k, v in meta.items() if k not in _DONE}
        yield row


def _scalar(v: Any) -> Any:
    """A cell: numbers, text and booleans as they are; a list as its items joined with ';' (never JSON)."""
    if isinstance(v, (list, tuple)):
        return ";".join(str(x) for x in v)
    if isinstance(v, dict):
        return ";".join(f"{k}={x}" for k, x in v.items())
    return v


def _kind(values: list[Any]) -> str:
    """The one type of a column: int, float, bool or str (numbers stay numbers when every value is one)."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return "bool"
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "int"
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return "float"
    if present and all(isinstance(v, str) and _number(v) is not None for v in present):
        return "float" if any(not isinstance(_number(v), int) for v in present) else "int"
    return "str"


def _number(text: str) -> int | float | None:
    """'8' -> 8, '1.5' -> 1.5, 'vxlan' -> None (a factor's level as the scenario labels it)."""
    try:
        return int(text)
    except ValueError:
        try:
            x = float(text)
            return x if math.isfinite(x) else None
        except ValueError:
            return None


def _cast(v: Any, kind: str) -> Any:
    if v is None:
        return False if kind == "bool" else None  # a flag a sample does not carry is not set
    if kind == "int":
        return int(v) if not isinstance(v, str) else int(_number(v))
    if kind == "float":
        return float(v) if not isinstance(v, str) else float(_number(v))
    if kind == "bool":
        return bool(v)
    if kind == "time":
        return dt.datetime.fromisoformat(v) if isinstance(v, str) else v
    return str(v)


def typed_levels(labels: list[dict]) -> list[dict]:
    """Each scenario's factor levels with the flat table's types: a factor whose every level is a number is numbers
    (`show --json` and the Parquet file say mtu 1500 alike), the rest text."""
    kinds = {k: _kind([lv.get(k) for lv in labels]) for k in dict.fromkeys(k for lv in labels for k in lv)}
    return [{k: _cast(v, kinds[k]) for k, v in lv.items()} for lv in labels]


def table(store: Store, cid: int) -> tuple[list[str], dict[str, str], list[dict[str, Any]]]:
    """(column names, column -> type, rows with every cell cast to its column's type)."""
    rows = list(flat_records(store, cid))
    extra = list(dict.fromkeys(k for r in rows for k in r if k not in COLUMNS))
    extra.sort(key=lambda k: (("factor_", "impl_", "meta_").index(k.split("_")[0] + "_"), k))
    kinds = dict(COLUMNS) | {k: _kind([r.get(k) for r in rows]) for k in extra}
    names = [*COLUMNS, *extra]
    return names, kinds, [{k: _cast(r.get(k), kinds[k]) for k in names} for r in rows]


def write(store: Store, cid: int, fmt: str, out: IO[str]) -> int:
    n = 0
    if fmt == "jsonl":
        for rec in records(store, cid):
            out.write(json.dumps(rec) + "\n")
            n += 1
        return n
    names, _, rows = table(store, cid)
    writer = csv.DictWriter(out, fieldnames=names)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v.isoformat() if isinstance(v, dt.datetime) else v)
                         for k, v in row.items()})
        n += 1
    return n


ARROW = {"int": "int64", "float": "float64", "bool": "bool_", "str": "string"}  # and "time": UTC microseconds


def write_parquet(store: Store, cid: int, path: Path) -> int:
    """The flat table as Parquet with an explicit schema (pyarrow): the fixed columns keep their types whatever the
    campaign holds; the timestamp is a UTC timestamp; the file says which campaign, spec and vnetbench it holds."""
    import pyarrow as pa  # lazily: only Parquet needs it, and it takes a while to load
    import pyarrow.parquet as pq
    names, kinds, rows = table(store, cid)
    camp = store.campaign(cid)
    about = {"vnetbench.campaign": json.dumps({"id": camp.id, "name": camp.name, "status": camp.status,
                                               "created": _iso(camp.created), "finished": _iso(camp.finished)}),
             "vnetbench.spec": camp.spec_text, "vnetbench.spec_sha256": camp.spec_sha256,
             "vnetbench.version": _version()}
    schema = pa.schema([pa.field(k, pa.timestamp("us", tz="UTC") if kinds[k] == "time"
                                 else getattr(pa, ARROW[kinds[k]])()) for k in names], metadata=about)
    arrays = [pa.array([r[k] for r in rows], type=schema.field(k).type) for k in names]
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), path)
    return len(rows)


def raw_record(store: Store, tid: int) -> dict | None:
    """One trial's exact commands (argv, where each ran, the full command line) and what each tool printed, with
    the trial's identity: enough to parse its output again or to run it again. None: no such trial."""
    trial = store.trial(tid)
    if trial is None:
        return None
    blob = store.raw(tid)
    record = rawlog.unpack(blob) if blob is not None else {"format": None, "commands": []}
    return {"trial": tid, "campaign": trial["campaign"], "scenario": trial["scenario"],
            "repetition": trial["repetition"], "workload": trial["kind"], "workload_index": trial["workload"],
            "params": trial["params"], "status": trial["status"], "error": trial["error"],
            "started": trial["started"], "finished": trial["finished"], "recorded": blob is not None, **record}


def raw_script(record: dict) -> str:
    """The trial's commands as a shell script: each started in the background at the moment it started in the trial
    (a sleep for each gap of 0.1 s or more: a client after its server, a ping once the load runs), then waited for."""
    import shlex
    lines = ["#!/bin/sh", f"# trial {record['trial']} of campaign {record['campaign']}: scenario {record['scenario']}, "
             f"repetition {record['repetition']}, {record['workload']}; the run's namespaces must exist (they are "
             f"removed after a run: `vnetbench plan` prints the commands that build them)"]
    previous = None
    for c in record["commands"]:
        if previous is not None and c["started"] - previous >= 0.1:
            lines.append(f"sleep {c['started'] - previous:.1f}")
        previous = c["started"]
        lines.append(f"# {c.get('label') or c['argv'][0]} (in {c['where']})")
        lines.append(shlex.join(c["command_line"]) + " &")
    return "\n".join(lines + ["wait", ""])


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("vnetbench")
    except PackageNotFoundError:
        return "unknown"
