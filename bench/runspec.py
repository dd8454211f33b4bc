"""What the bench scripts share: one experiment file run (or a previous run's results read instead, its
--db), rounds of campaigns of one spec, and each level's median throughput and CPU per Gbit."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def results(db: Path | None, name: str, spec_text: str) -> Path:
    """db when given; otherwise spec_text written to a new directory, run by vnetbench, and its results file."""
    if db is not None:
        return db
    work = Path(tempfile.mkdtemp(prefix=f"{name}-bench-"))
    spec, db = work / f"{name}.yaml", work / f"{name}.db"
    spec.write_text(spec_text)
    began = time.monotonic()
    subprocess.run([str(ROOT / ".venv/bin/vnetbench"), "run", str(spec), "--db", str(db), "--no-progress"],
                   check=True, stdout=subprocess.DEVNULL)
    print(f"ran in {time.monotonic() - began:.0f} s; results in {db}", file=sys.stderr)
    return db


def medians(db: Path, factor: str) -> dict[str, tuple[float, float, int]]:
    """A factor's label -> (median throughput in Gbit/s, median CPU seconds per Gbit, trials) over campaign 1."""
    out = subprocess.run([sys.executable, "-m", "vnetbench", "show", "1", "--db", str(db), "--json", "-m",
                          "throughput_bps", "-m", "cpu_s_per_gbit"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    got: dict[str, dict[str, list[float]]] = {}
    for r in json.loads(out)["rows"]:
        if not r["role"] and r["stat"] is None:
            got.setdefault(str(r["levels"][factor]), {})[r["metric"]] = [t["value"] for t in r["trials"]]
    return {k: (statistics.median(v["throughput_bps"]) / 1e9, statistics.median(v["cpu_s_per_gbit"]),
                len(v["throughput_bps"])) for k, v in got.items()}


def rounds(spec_text: str, count: int) -> Iterator[tuple[int, Path, float]]:
    """`count` campaigns of the spec, one after another: (round, its results file, the load average before it),
    each yielded once it has run (the files live until the next round is asked for)."""
    with tempfile.TemporaryDirectory() as d:
        for r in range(count):
            spec, db = Path(d) / f"r{r}.yaml", Path(d) / f"r{r}.db"
            spec.write_text(spec_text)
            before = os.getloadavg()[0]
            subprocess.run([sys.executable, "-m", "vnetbench", "run", str(spec), "--db", str(db), "--no-progress"],
                           cwd=ROOT, capture_output=True, check=False)
            yield r + 1, db, before


def relative(factor: str, base: str, got: dict[str, tuple[float, float, int]]) -> list[str]:
    """One line a level: its median throughput and CPU per Gbit, each relative to the `base` level's."""
    ref = got.get(base)
    return [f"  {factor} {level:<18} {gbit:6.2f} Gbit/s  {cost:.3f} CPU s/Gbit"
            + (f" ({gbit / ref[0]:.2f} x, {cost / ref[1]:.2f} x)" if ref else "") + f"  ({n} trials)"
            for level, (gbit, cost, n) in got.items()]
