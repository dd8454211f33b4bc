"""One experiment file run for a bench script, or a previous run's results read instead (its --db)."""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
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
