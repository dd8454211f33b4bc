"""Each study's `card` profile measures what its scorecard's claims ask and nothing else, in rounds: every
checkable claim's cells are measured by a runnable scenario (or the scenario is skipped for a reason this machine
lacks, which the card then says), no workload runs that no claim names, and the trials go to the open claims."""
from __future__ import annotations

import pytest

from vnetbench.results import scorecard
from vnetbench.capabilities import detect
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import Rounds, load

STUDIES = ["s1", "s2", "s3", "s4", "s5"]


@pytest.fixture(scope="module")
def caps():
    return detect()


@pytest.mark.parametrize("study", STUDIES)
def test_the_card_profile_measures_every_claim_and_nothing_else(study, caps):
    loaded = load(f"suite:{study}", "card")
    exp = loaded.experiment
    assert isinstance(exp.repetitions, Rounds) and exp.repetitions.rounds[0] >= 5, exp.repetitions
    assert exp.repetitions.budget <= 15 * 60
    scenarios = expand(exp, caps)
    cov = scorecard.coverage(exp.model_dump(), scenarios)
    assert cov.claims >= 2
    assert not cov.unneeded, cov.unneeded
    # a cell no runnable scenario measures is one whose scenario this machine skips, with the reason
    assert all(x.endswith(")") and "(" in x for x in cov.unmeasured), cov.unmeasured


def test_suites_shows_each_profile_s_trials_and_tool_time():
    """`suites` says what each profile asks: trials and the tools' own time; a card from its first round to its last."""
    import os
    import re
    from conftest import vnetbench
    out = vnetbench("suites", env=os.environ | {"COLUMNS": "250"}).stdout
    cards = re.findall(r"card: (\d+)\.\.(\d+) trials, (\d+) min\.\.(\d+) min, budget 15 min", out)
    assert len(cards) == 5 and all(int(a) < int(b) and int(c) <= int(d) for a, b, c, d in cards), out
    assert len(re.findall(r"smoke: \d+ trials", out)) == 5 and "full: 4500 trials" in out, out


def test_suites_and_metrics_speak_json():
    import json
    from conftest import vnetbench
    suites = json.loads(vnetbench("suites", "--json").stdout)
    assert [s["suite"] for s in suites] == [f"suite:s{i}" for i in range(1, 6)]
    assert all("card" in s["profiles"] and "budget 15 min" in s["profiles"]["card"] for s in suites)
    metrics = {m["metric"]: m for m in json.loads(vnetbench("metrics", "--json").stdout)}
    assert metrics["throughput_bps"]["unit"] == "bit/s" and metrics["throughput_bps"]["better"] == "higher"
