import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """A private ledger directory, so tests never see (or clean) other runs on the machine."""
    d = tmp_path / "state"
    monkeypatch.setenv("VNETBENCH_STATE_DIR", str(d))
    return d


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def vnetbench(*args, env=None, check=True, timeout=600):
    proc = subprocess.run([sys.executable, "-m", "vnetbench", *map(str, args)], capture_output=True, text=True,
                          env=env or os.environ.copy(), timeout=timeout, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"vnetbench {args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc
