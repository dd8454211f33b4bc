"""Samples out, one line per sample, for other tools."""
from __future__ import annotations

import csv
import datetime as dt
import json
from typing import IO

from .sample import absolute
from .store import Store

FIELDS = ("campaign", "trial", "repetition", "scenario", "workload", "metric", "value", "unit", "t",
          "implementation", "timestamp", "metadata")


def records(store: Store, cid: int):
    for s in store.samples(cid):
        ts = absolute(s["t"], s["started"]) or s["started"]
        yield {"campaign": cid, "trial": s["trial"], "repetition": s["repetition"], "scenario": s["labels"],
               "scenario_index": s["scenario"], "workload": s["workload"], "metric": s["metric"],
               "value": s["value"], "unit": s["unit"], "t": s["t"], "implementation": s["implementation"],
               "timestamp": dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(), "metadata": s["metadata"]}


def write(store: Store, cid: int, fmt: str, out: IO[str]) -> int:
    n = 0
    if fmt == "jsonl":
        for rec in records(store, cid):
            out.write(json.dumps(rec) + "\n")
            n += 1
        return n
    writer = None
    for rec in records(store, cid):
        flat = {k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in rec.items()}
        if writer is None:
            writer = csv.DictWriter(out, fieldnames=list(flat))
            writer.writeheader()
        writer.writerow(flat)
        n += 1
    return n


def raw_record(store: Store, tid: int) -> dict | None:
    """One trial's exact commands (argv, where each ran, the full command line) and what each tool printed, with
    the trial's identity: enough to parse its output again or to run it again. None: no such trial."""
    from . import rawlog
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
