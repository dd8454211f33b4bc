"""Spec validation: one line per problem naming file:line, field, what is wrong and what is allowed."""
import subprocess
import sys
import textwrap

import pytest

from vnetbench.experiment.spec import SpecError, loads
from vnetbench.core.units import human, parse_rate

GOOD = """\
name: demo
repetitions: 2
factors:
  overlay: [none, vxlan]
  placement: cross-host
  protocol: [tcp, udp]
workloads:
  - type: iperf3
    duration: 1
  - type: ping
    count: 5
"""


def errors(text: str) -> list[str]:
    with pytest.raises(SpecError) as exc:
        loads(textwrap.dedent(text), "x.yaml")
    return exc.value.lines


def test_good_spec_loads_and_hashes():
    spec = loads(GOOD, "good.yaml")
    assert spec.experiment.repetitions == 2
    assert len(spec.sha256) == 64 and spec.sha256 != loads(GOOD + "\n# changed\n").sha256


def test_three_mistakes_three_lines_with_line_numbers():
    lines = errors("""\
        name: demo
        repetitions: 0
        factors:
          overlay: [none, vxlna]
        workloads:
          - type: iperf3
            duraton: 1
        """)
    assert len(lines) == 3, lines
    assert lines[0].startswith("x.yaml:2: repetitions:") and "greater than or equal to 1" in lines[0]
    assert lines[1].startswith("x.yaml:7: workloads[0].duraton:") and "iperf3 has no parameter" in lines[1]
    assert lines[2].startswith("x.yaml:4: factors.overlay[1]:") and "allowed: " in lines[2] and "vxlan" in lines[2]


@pytest.mark.parametrize("text, where, words", [
    ("name: d\nworkloads: [{type: ping}]\nbogus: 1\n", "x.yaml:3: bogus:", "unknown field"),
    ("name: d\nfactors: {colour: red}\nworkloads: [{type: ping}]\n", "factors.colour:", "unknown factor"),
    ("name: d\nfactors: {pairs: [1, 999]}\nworkloads: [{type: ping}]\n", "factors.pairs[1]:", "from 1 to 500"),
    ("name: d\nfactors: {placement: [moon]}\nworkloads: [{type: ping}]\n", "factors.placement[0]:", "same-host"),
    ("name: d\nworkloads: [{type: quake}]\n", "workloads[0].type:", "not a workload"),
    ("name: d\n", "workloads:", "required field is missing"),
    ("name: 'bad name!'\nworkloads: [{type: ping}]\n", "name:", "letters, digits"),
    ("name: d\nexclude: [{flavour: x}]\nworkloads: [{type: ping}]\n", "exclude[0].flavour:", "not a factor"),
    ("name: d\nunderlay: {rate: fast}\nworkloads: [{type: ping}]\n", "underlay.rate:", "'100M'"),
    ("name: d\nunderlay: {delay: soon}\nworkloads: [{type: ping}]\n", "underlay.delay:", "'10ms'"),
    ("name: d\nunderlay: {loss: 150%}\nworkloads: [{type: ping}]\n", "underlay.loss:", "0 to 100 %"),
    ("name: d\nunderlay: {jitter: 1ms}\nworkloads: [{type: ping}]\n", "underlay", "give delay too"),
    ("name: d\nfactors: {switch: {type: linuxbridge, colour: 1}}\nworkloads: [{type: ping}]\n", "factors.switch:", "no option 'colour'"),
    ("name: [unclosed\n", "x.yaml", "not valid YAML"),
    ("- a list\n", "x.yaml", "must be a mapping"),
])
def test_each_mistake_is_one_clear_line(text, where, words):
    lines = errors(text)
    assert len(lines) == 1, lines
    assert where in lines[0] and words in lines[0], lines[0]


def test_workload_factor_levels_are_validated_against_the_workload():
    lines = errors("name: d\nfactors: {protocol: [tcp, sctp]}\nworkloads: [{type: iperf3}]\n")
    assert len(lines) == 1 and "factors.protocol[1]" in lines[0] and "iperf3" in lines[0]


def test_cli_exits_2_without_traceback_and_builds_nothing(tmp_path, state_dir):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: d\nrepetitions: -1\nfactors: {overlay: [vxlna], pairs: 0}\nworkloads: [{type: ping}]\n")
    proc = subprocess.run([sys.executable, "-m", "vnetbench", "run", str(bad), "--db", str(tmp_path / "r.db")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 3, proc.stderr
    # every object is recorded in the state dir before it is created: an empty state dir means nothing was built
    assert not state_dir.exists() or not any(state_dir.iterdir())
    assert not (tmp_path / "r.db").exists()


def test_rates_and_human_units():
    assert parse_rate("100M") == 100_000_000
    assert parse_rate("10gbit") == 10_000_000_000
    assert parse_rate("1.5 Gbit/s") == 1_500_000_000
    assert parse_rate(2_000_000) == 2_000_000
    with pytest.raises(ValueError):
        parse_rate("0")
    assert human(9.41e9, "bit/s") == "9.41 Gbit/s"
    assert human(45.2e-6, "s") == "45.2 µs"
    assert human(0.031, "ratio") == "3.1 %"
