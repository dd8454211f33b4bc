"""A new workload is one module: dropped into vnetbench/workloads/ of a copy of the package, with no other file
changed, it is found (its tool by doctor's table and the matrix), runs in a real campaign, stores its metrics with
their units, counts as a distribution, and adaptive repetitions stop on its main metric."""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A real tool (ping, under a tool name no other workload declares: without the registry collecting it, every
# scenario would be skipped as "not installed") and a metric of its own, one sample per echo.
TOY = '''
"""toyecho: ICMP echoes, one sample per reply, under a metric of its own (the test of the workload seam)."""
from __future__ import annotations

import re
from typing import Literal, Sequence

from pydantic import Field

from ..core.sample import Metric, Sample
from . import register
from .base import Command, Pair, Params, Tool, Workload, bounded


class ToyParams(Params):
    type: Literal["toyecho"] = "toyecho"
    count: int = Field(4, ge=1, le=100)


@register
class ToyEcho(Workload):
    kind = "toyecho"
    Params = ToyParams
    tool = "toy-ping"
    tools = {"toy-ping": Tool("iputils-ping", ["ping", "-V"], r"iputils[- ](\\S+)")}
    main_metric = "toy_rtt_s"
    metrics = frozenset({"toy_rtt_s"})
    catalogue = (Metric("toy_rtt_s", "s", "lower", "a toy's ICMP echo round trip, one per echo", per_event=True),)

    def expected_duration(self) -> float:
        return self.params.count * 0.05

    def _argv(self, pair: Pair) -> list[str]:
        return ["ping", "-n", "-c", str(self.params.count), "-i", "0.05", "-w", "10", pair.server.addr]

    def commands(self, pairs: Sequence[Pair]) -> list[Command]:
        return [Command(pair.client.node.name, self._argv(pair)) for pair in pairs]

    def run(self, pairs: Sequence[Pair]) -> list[Sample]:
        out = []
        for pair in pairs:
            text, _ = bounded(pair.client.node.spawn(self._argv(pair)), 20, "toy ping")
            out += [Sample.of("toy_rtt_s", float(ms) / 1e3, pair=pair.index)
                    for ms in re.findall(r"time=([\\d.]+) ms", text)]
        return out
'''

SPEC = """\
name: toy
repetitions: {min: 2, max: 5, target: 0.9}
workloads:
  - {type: toyecho, count: 4}
"""


@pytest.fixture
def copy(tmp_path):
    """The package copied, plus one new module in workloads/; nothing else changed."""
    root = tmp_path / "src"
    shutil.copytree(ROOT / "vnetbench", root / "vnetbench", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "vnetbench" / "workloads" / "toyecho.py").write_text(TOY)
    return root


def _run(copy: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(copy)}
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=copy, timeout=600)
    assert not check or proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_a_new_workload_module_is_collected_by_every_catalogue(copy):
    got = json.loads(_run(copy, "-c", """if 1:
        import json
        import vnetbench
        from vnetbench import capabilities
        from vnetbench.results import dataset
        from vnetbench.run import adaptive
        from vnetbench.catalog import METRICS
        from types import SimpleNamespace
        from vnetbench.experiment.spec import loads
        loads("name: t\\nworkloads: [{type: toyecho}]\\n")  # the spec's checks know it
        print(json.dumps({"from": vnetbench.__file__, "unit": METRICS["toy_rtt_s"].unit,
                          "tool": list(capabilities.TOOLS["toy-ping"]), "event": "toy_rtt_s" in dataset.DISTRIBUTIONS,
                          "main": adaptive.main_metric(SimpleNamespace(kind="toyecho", params=None))}))""").stdout)
    assert got["from"].startswith(str(copy))  # the copy, not the checkout
    assert got["unit"] == "s" and got["tool"][1] == ["ping", "-V"] and got["event"] and got["main"] == "toy_rtt_s"
    # the original package knows nothing of it: the module alone did it
    proc = subprocess.run([sys.executable, "-c", "from vnetbench.catalog import METRICS; print('toy_rtt_s' in METRICS)"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.stdout.strip() == "False", proc.stderr


@pytest.mark.net
def test_a_new_workload_module_runs_stores_its_metrics_and_stops_adaptively(copy, tmp_path, state_dir):
    spec, db = tmp_path / "toy.yaml", tmp_path / "toy.db"
    spec.write_text(SPEC)
    _run(copy, "-m", "vnetbench", "run", str(spec), "--db", str(db), "--no-progress")
    with sqlite3.connect(db) as c:
        trials = c.execute("SELECT kind, status FROM trials").fetchall()
        samples = c.execute("SELECT metric, unit, value FROM samples s JOIN trials t ON s.trial = t.id "
                            "WHERE t.kind = 'toyecho' AND metric = 'toy_rtt_s'").fetchall()
        ((status, reason),) = c.execute("SELECT status, reason FROM scenarios").fetchall()
    assert trials and all(t == ("toyecho", "ok") for t in trials), trials
    assert 2 <= len(trials) <= 5
    # 4 echoes a trial between two namespaces of this machine: each a real round trip, well under a second
    assert len(samples) >= 3 * len(trials) and all(u == "s" and 0 < v < 1 for _, u, v in samples), samples
    assert status == "done" and "toy_rtt_s (toyecho)" in reason, reason
    # the two-stage rule: the run stops where its pilot planned (or at max), and says so naming the main metric
    assert reason.startswith((f"stopped after {len(trials)}", "reached max 5")), reason
    shown = _run(copy, "-m", "vnetbench", "show", "--db", str(db)).stdout
    assert "toy_rtt_s" in shown  # its main metric is in show's default table, named nowhere but in its module
