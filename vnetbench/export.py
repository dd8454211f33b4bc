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
