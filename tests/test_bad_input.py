"""Bad input (issue 8 §2): each mistake is one clear line with file:line, exit 2, nothing built; never a hang, a
traceback or a script line that runs the user's text."""
import random
import re
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import SUITES_DIR, SpecError, load, loads


def errors(text: str, profile: str | None = None) -> list[str]:
    with pytest.raises(SpecError) as exc:
        loads(textwrap.dedent(text), "x.yaml", profile)
    return exc.value.lines


def one_error(text: str, profile: str | None = None) -> str:
    lines = errors(text, profile)
    assert len(lines) == 1, lines
    assert "\n" not in lines[0] and "Value error" not in lines[0] and "Traceback" not in lines[0], lines[0]
    return lines[0]


# ---- YAML itself ------------------------------------------------------------------------------------------------

def bomb(levels: int = 9) -> str:
    lines = ["name: bomb", 'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines + ["workloads: [{type: ping}]", ""])


def merge_bomb(levels: int = 9) -> str:
    lines = ["name: bomb", "m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9}"]
    lines += [f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 9)}]}}" for i in range(1, levels + 1)]
    return "\n".join(lines + ["workloads: [{type: ping}]", ""])


def _limits():
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))   # 1 GB: the bomb took 4 GB before the fix
    resource.setrlimit(resource.RLIMIT_CPU, (20, 20))


@pytest.mark.parametrize("make", [bomb, merge_bomb])
def test_billion_laughs_is_refused_quickly_in_bounded_memory(tmp_path, make):
    path = tmp_path / "bomb.yaml"
    path.write_text(make())
    code = f"from vnetbench.experiment.spec import load, SpecError\ntry:\n    load({str(path)!r})\nexcept SpecError as e:\n" \
           f"    print(*e.lines)\n    raise SystemExit(2)\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=10,
                          preexec_fn=_limits, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert re.fullmatch(r".*bomb\.yaml:\d+: aliases expand this value to more than \d+ values.*\n", proc.stdout)


def test_an_ordinary_alias_still_works_and_errors_inside_it_point_at_a_line():
    text = "name: a\nworkloads:\n  - &w {type: ping, count: 3}\n  - *w\n  - {<<: *w, count: 4}\n"
    spec = loads(text, "x.yaml")
    assert [w.get("count") for w in spec.experiment.workloads] == [3, 3, 4]
    lines = errors("name: a\nworkloads:\n  - &w {type: ping, count: 0}\n  - *w\n")
    assert [ln.split(" ")[0] for ln in lines] == ["x.yaml:3:", "x.yaml:4:"], lines  # the alias's own line


def test_line_index_is_linear_in_the_file():
    """An alias is indexed where it is written; its target is not walked again for every use."""
    from vnetbench.core import yamlread
    doc = yamlread.read(bomb(3))  # 9**4 values when expanded, 6 lines of text
    assert len(doc.lines) < 60, len(doc.lines)


@pytest.mark.parametrize("text, where, words", [
    ("name: d\nx: &a [*a]\nworkloads: [{type: ping}]\n", "x.yaml:2:", "inside the value it refers to"),
    ("name: d\nx: " + "[" * 500 + "]" * 500 + "\nworkloads: [{type: ping}]\n", "x.yaml:2:", "nested more than"),
    ("name: d\nrepetitions: " + "9" * 5000 + "\nworkloads: [{type: ping}]\n", "x.yaml:2:", "digits"),
    ("name: d\ndescription: 2024-13-45\nworkloads: [{type: ping}]\n", "x.yaml:2:", "month must be in 1..12"),
    ("name: d\x00\nworkloads: [{type: ping}]\n", "x.yaml:1:", "#x0000 is not allowed"),
    ("name: d\n\tworkloads: []\n", "x.yaml:2:", "not valid YAML"),
    ("", "x.yaml:", "the file is empty"),
    ("# only a comment\n", "x.yaml:", "the file is empty"),
    ("- name: d\n", "x.yaml:1:", "must be a mapping"),
    ("just text\n", "x.yaml:1:", "not a text"),
    ("name: d\nworkloads: [{type: ping}]\n---\nname: e\n", "x.yaml:3:", "not valid YAML"),
])
def test_broken_yaml_is_one_line(text, where, words):
    line = one_error(text)
    assert line.startswith(where) and words in line, line


def test_duplicate_keys_are_refused_with_both_lines():
    lines = errors("""\
        name: d
        repetitions: 2
        workloads:
          - type: iperf3
            duration: 1
            duration: 5
        repetitions: 3
        """)
    assert len(lines) == 2, lines
    assert any(ln.startswith("x.yaml:7: repetitions: given twice, on lines 2 and 7") for ln in lines), lines
    assert any(ln.startswith("x.yaml:6: workloads[0].duration: given twice, on lines 5 and 6") for ln in lines), lines


def test_a_merge_key_override_is_not_a_duplicate():
    spec = loads("name: d\nworkloads:\n  - &w {type: ping, count: 2}\n  - {<<: *w, count: 5}\n", "x.yaml")
    assert spec.experiment.workloads[1]["count"] == 5


def test_not_utf8_directory_dev_zero_and_missing_file(tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: d\ndescription: caf\u00e9\nworkloads: [{type: ping}]\n".encode("latin-1"))
    with pytest.raises(SpecError) as exc:
        load(bad)
    assert exc.value.lines == [f"{bad}:2: the file is not UTF-8 text (byte 0xe9); save it as UTF-8"]
    for path, words in ((tmp_path, "is a directory"), (Path("/dev/zero"), "characters; a spec has at most"),
                        (tmp_path / "nope.yaml", "cannot read the file: No such file")):
        with pytest.raises(SpecError) as exc:
            load(path)
        assert len(exc.value.lines) == 1 and words in exc.value.lines[0], exc.value.lines
    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbfname: d\nworkloads: [{type: ping}]\n")
    assert load(bom).experiment.name == "d"


def test_suite_names_cannot_leave_the_suites_directory():
    for name in ("suite:../../pyproject", "suite:", "suite:s1/../s2"):
        with pytest.raises(SpecError) as exc:
            load(name)
        assert "no such suite; built-in suites: s1, s2" in exc.value.lines[0]


# ---- fields ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, where, words", [
    ("name: d\nfactors: {pairs: true}\nworkloads: [{type: ping}]\n", "x.yaml:2: factors.pairs:", "whole number"),
    ("name: d\nfactors: {mtu: [1500, yes]}\nworkloads: [{type: ping}]\n", "factors.mtu[1]:", "whole number"),
    ("name: d\nrepetitions: true\nworkloads: [{type: ping}]\n", "x.yaml:2: repetitions:", "not true/false"),
    ("name: d\ncooldown: true\nworkloads: [{type: ping}]\n", "cooldown:", "not true/false"),
    ("name: d\nworkloads: [{type: iperf3, duration: true}]\n", "workloads[0].duration:", "not true/false"),
    ("name: d\nworkloads: [{type: iperf3, streams: on}]\n", "workloads[0].streams:", "not true/false"),
    ("name: d\nworkloads: [{type: ping, pairs: [true]}]\n", "workloads[0].pairs:", "list of pair numbers"),
    ("name: d\nworkloads: [{type: iperf3, duration: -1}]\n", "workloads[0].duration:", "greater than or equal to 1"),
    ("name: d\nrepetitions: 1e9\nworkloads: [{type: ping}]\n", "repetitions:", "valid integer"),
    ("name: d\nrepetitions: 1.0e+9\nworkloads: [{type: ping}]\n", "repetitions:", "less than or equal to 1000"),
    ("name: d\ncooldown: .nan\nworkloads: [{type: ping}]\n", "cooldown:", "finite number"),
    ("name: d\nworkloads: [{type: ping, interval: .inf}]\n", "workloads[0].interval:", "finite number"),
    ("name: d\nfactors: {pairs: 100000000}\nworkloads: [{type: ping}]\n", "factors.pairs:", "from 1 to 500"),
    ("name: d\nworkloads: [ping]\n", "x.yaml:2: workloads[0]:", "valid dictionary"),
    ("name: d\nworkloads: {type: ping}\n", "x.yaml:2: workloads:", "valid list"),
    ("name: d\nfactors: [overlay]\nworkloads: [{type: ping}]\n", "x.yaml:2: factors:", "valid dictionary"),
    ("name: d\nunderlay: [1]\nworkloads: [{type: ping}]\n", "underlay:", "valid dictionary"),
    ("name: d\nfactors: {pairs: [1, 2]}\nworkloads: [{type: ping, pairs: [3]}]\n", "x.yaml:3: workloads[0].pairs:",
     "pair 3 does not exist: this experiment has at most 2 pairs"),
    ("name: d\nworkloads: [{type: ping, target_pair: 2}]\n", "workloads[0].target_pair:", "at most 1 pairs"),
    ("name: d\nexclude: [{}]\nworkloads: [{type: ping}]\n", "x.yaml:2: exclude[0]:", "an empty rule matches every"),
    ("name: d\nfactors: {overlay: [none, vxlan]}\nexclude:\n  - {overlay: none}\n  - {overlay: vxlan}\n"
     "workloads: [{type: ping}]\n", "x.yaml:3: exclude:", "exclude every combination"),
    ("name: d\nworkloads: [{type: [ping]}]\n", "workloads[0].type:", "write the workload's type; allowed:"),
    ("name: d\nworkloads: [{count: 3}]\n", "workloads[0].type:", "allowed: cpuload"),
    ("name: d\nfactors: {overlay: []}\nworkloads: [{type: ping}]\n", "x.yaml:2: factors.overlay:", "no levels"),
    ("name: d\ninclude: [{overlay: vxlna}]\nworkloads: [{type: ping}]\n", "x.yaml:2: include[0].overlay:", "not a known overlay"),
    ("name: d\ninclude: [{pairs: 0}]\nworkloads: [{type: ping}]\n", "include[0].pairs:", "from 1 to 500"),
    ("name: d\nunderlay: {speed: 1G}\nworkloads: [{type: ping}]\n", "x.yaml:2: underlay.speed:", "allowed here: rate"),
    ("name: \"ab\\n\"\nworkloads: [{type: ping}]\n", "x.yaml:1: name:", "letters, digits"),
    ("name: d\nfactors: {overlay: \"x\\ny\"}\nworkloads: [{type: ping}]\n", "factors.overlay:", "'x\\ny' is not a known"),
    ("name: d\nfactors: {overlay: \"\\e[31mred\"}\nworkloads: [{type: ping}]\n", "factors.overlay:", "'\\x1b[31mred'"),
    ("name: d\nrepetitions: {min: 2, max: 4, metric: rtt_s}\nworkloads: [{type: iperf3}]\n",
     "x.yaml:2: repetitions.metric:", "'rtt_s' is not a per-trial metric of iperf3"),
    ("name: d\nrepetitions: {metric: throughput_interval_bps}\nworkloads: [{type: iperf3}]\n",
     "repetitions.metric:", "not a per-trial metric of iperf3"),
    ("name: d\nfactors: {vm_kernel: {type: guest, pairs: [true]}}\nworkloads: [{type: ping}]\n",
     "factors.vm_kernel:", "not true/false"),
    ("name: d\nworkloads: [{type: sockperf, when: {\"\\e[2Jt\": a}}]\nfactors: {\"\\e[2Jt\": [a]}\n",
     "factors.\\x1b[2Jt:", "without control characters"),
])
def test_each_mistake_is_one_line(text, where, words):
    line = one_error(text)
    assert where in line and words in line, line


@pytest.mark.parametrize("text, words", [
    ("name: d\nfactors: {mps: [0]}\nworkloads: [{type: sockperf}]\n", "mps must be at least 1"),
    ("name: d\nworkloads: [{type: netperf, test: UDP_STREAM}]\n", "cannot be rate-limited"),
    ("name: d\nworkloads: [{type: iperf3, streams: 2, processes: 3}]\n", "3 processes need at least 3 streams"),
    ("name: d\nfactors: {encryption: {type: ipsec, protocol: ah, cipher: aes-128-gcm}}\nworkloads: [{type: ping}]\n", ""),
])
def test_pydantic_value_error_prefix_never_shows(text, words):
    line = one_error(text)
    assert words in line and "rror, " not in line, line


def test_a_huge_matrix_is_refused_before_it_is_built():
    text = "name: d\nfactors:\n" + "".join(f"  f{k}: [{', '.join(map(str, range(30)))}]\n" for k in range(6))
    text += "workloads: [{type: ping, when: {" + ", ".join(f"f{k}: 1" for k in range(6)) + "}}]\n"
    line = one_error(text)
    assert line.startswith("x.yaml:2: factors:") and "729000000 combinations" in line, line


# ---- when / exclude ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule, where", [
    ("workloads: [{type: ping, when: {overlay: vxlna}}, {type: ping}]", "x.yaml:3: workloads[0].when.overlay:"),
    ("exclude: [{overlay: vxlna}]\nworkloads: [{type: ping}]", "x.yaml:3: exclude[0].overlay:"),
    ("exclude: [{overlay: [gre, vxlna]}]\nworkloads: [{type: ping}]", "exclude[0].overlay:"),
])
def test_a_level_no_factor_has_is_an_error(rule, where):
    line = one_error("name: d\nfactors: {overlay: [none, vxlan]}\n" + rule + "\n")
    assert where in line and "a level of overlay in this experiment, so this matches nothing; its levels: " \
        "none, vxlan" in line, line


def test_unquoted_on_is_true_and_the_error_says_so():
    line = one_error("name: d\nfactors: {attack: ['off', 'on']}\n"
                     "workloads: [{type: ping}, {type: ping, when: {attack: on}, background: true}]\n")
    assert "True is not a level of attack" in line and "quote the level" in line, line


def test_scorecard_reduce_names_a_row_and_a_reduction():
    card = "name: d\nworkloads: [{type: ping}]\nscorecard: [{id: r1, kind: ratio, study: 1, a: {}, b: {}}]\n"
    line = one_error(card + "scorecard_reduce: {r2: min}\n")
    assert "scorecard_reduce: no scorecard row has id 'r2'" in line, line
    line = one_error(card + "scorecard_reduce: {r1: fastest}\n")
    assert "'fastest' for r1 is no reduction" in line and "min" in line, line
    assert loads(card + "scorecard_reduce: {r1: p10}\n", "x.yaml").experiment.scorecard_reduce == {"r1": "p10"}


def test_a_when_for_a_default_level_and_a_rule_with_one_good_option():
    line = one_error("name: d\nworkloads: [{type: ping, when: {switch: ovs}}]\n")
    assert "its levels: linuxbridge" in line, line
    spec = loads("name: d\nfactors: {overlay: [none, vxlan]}\nexclude: [{overlay: [vxlan, gre]}]\n"
                 "workloads: [{type: ping}]\n", "x.yaml")
    assert len(expand(spec.experiment, None)) == 1


@pytest.mark.parametrize("path", sorted(SUITES_DIR.glob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml")))
def test_every_shipped_spec_and_profile_is_valid_and_so_is_the_text_stored_for_resume(path):
    profiles = yaml.safe_load(path.read_text()).get("profiles") or {}
    for profile in [None, *profiles]:
        spec = load(path, profile)
        assert expand(spec.experiment, None)
        again = loads(spec.text, spec.source)  # what `run --resume` reads: the merged spec, without the profiles
        assert again.experiment == spec.experiment


# ---- profiles -----------------------------------------------------------------------------------------------------

PROFILED = """\
name: p
repetitions: 3
factors: {overlay: [none, vxlan]}
workloads:
  - type: iperf3
    duration: 5
  - type: ping
profiles:
  quick:
    repetitions: 0
    workloads:
      - type: iperf3
        duraton: 1
  odd: [1, 2]
"""


def test_errors_inside_a_profile_point_at_the_profile_lines():
    lines = errors(PROFILED, "quick")
    assert lines[0].startswith("x.yaml:10: repetitions:"), lines
    assert lines[1].startswith("x.yaml:13: workloads[0].duraton:") and "no parameter" in lines[1], lines
    assert len(lines) == 2
    assert one_error(PROFILED, "odd").startswith("x.yaml:14: profiles.odd: write a mapping")
    assert one_error(PROFILED, "full").startswith("x.yaml:8: profiles: no profile 'full'; this file has: quick, odd")


def test_a_profile_that_keeps_a_base_value_points_at_the_base_line():
    text = PROFILED.replace("    repetitions: 0\n", "").replace("        duraton: 1\n", "        duration: 1\n")
    text = text.replace("  odd: [1, 2]\n", "").replace("factors: {overlay: [none, vxlan]}", "factors: {overlay: [none, vxlna]}")
    assert one_error(text, "quick").startswith("x.yaml:3: factors.overlay[1]:")


# ---- ports ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("workloads, words", [
    ("[{type: iperf3}, {type: iperf3, protocol: udp, background: true}]", "iperf3 (background) would listen on port 5201"),
    ("[{type: netperf}, {type: iperf3, port: 12865, background: true}]", "while netperf (workloads[0])"),
    ("[{type: sockperf, port: 8080}, {type: http, background: true}]", "port 8080"),
    ("[{type: iperf3, port: 5200, streams: 2, processes: 2, background: true}, {type: iperf3}]", "port 5201"),
])
def test_two_servers_on_one_port_at_once_are_refused_naming_both(workloads, words):
    line = one_error(f"name: d\nfactors: {{pairs: 2}}\nworkloads: {workloads}\n")
    assert line.startswith("x.yaml:3: workloads[1]") and words in line and "another `port`" in line, line


def test_sequential_foreground_servers_and_other_pairs_servers_may_share_a_port():
    loads("name: d\nworkloads: [{type: iperf3}, {type: iperf3, protocol: udp}]\n", "x.yaml")
    # a flood from pair 2 to pair 1's server uses pair 2's port (5202), not pair 1's
    loads("name: d\nfactors: {pairs: 2}\nworkloads: [{type: iperf3, pairs: [1]}, "
          "{type: iperf3, pairs: [2], target_pair: 1, background: true}]\n", "x.yaml")


def test_with_attach_host_every_pair_shares_the_server_host():
    text = ("name: d\nfactors: {pairs: 2, attach: ATTACH}\nworkloads: [{type: iperf3, pairs: [2]}, "
            "{type: sockperf, port: 5202, pairs: [1], background: true}]\n")
    loads(text.replace("ATTACH", "switch"), "x.yaml")  # pair 1's and pair 2's servers are different VMs
    line = one_error(text.replace("ATTACH", "host"))
    assert "port 5202 of the server host" in line, line


def test_ports_past_65535_are_refused():
    line = one_error("name: d\nfactors: {pairs: 64}\nworkloads:\n  - {type: iperf3, port: 65000, processes: 64, streams: 64}\n")
    assert line.startswith("x.yaml:4: workloads[0].port:"), line
    assert "ports 65000 to 69095" in line and "at most 61440" in line, line
    loads("name: d\nfactors: {pairs: 64}\nworkloads:\n  - {type: iperf3, port: 61440, processes: 64, streams: 64}\n")


# ---- a fuzzer over the shipped specs: whatever a value becomes, only SpecError ------------------------------------

NASTY = [True, False, None, -1, 0, 1e9, 10 ** 30, float("nan"), float("inf"), "", "x\ny", "$(touch x)", [], [[]],
         {}, {"type": None}, [True], "ovs", {"a": {"b": 1}}, 65535, 1.5, "1e9", ["udp", "sctp"]]


def _paths(data, path=()):
    yield path
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _paths(v, path + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _paths(v, path + (i,))


def _copy(data, memo=None):
    """yaml.safe_load(yaml.safe_dump(data)) without the text (a third of the test's time): keys sorted as safe_dump
    writes them, a value shared through a YAML alias still shared."""
    memo = {} if memo is None else memo
    if id(data) in memo:
        return memo[id(data)]
    if isinstance(data, dict):
        memo[id(data)] = out = {}
        out.update((k, _copy(data[k], memo)) for k in sorted(data))
    elif isinstance(data, list):
        memo[id(data)] = out = []
        out.extend(_copy(v, memo) for v in data)
    else:
        return data
    return out


def _set(data, path, value):
    for p in path[:-1]:
        data = data[p]
    data[path[-1]] = value


def test_fuzzed_specs_give_spec_errors_only():
    from vnetbench.build.topology import Topology
    rng = random.Random(8)
    bases = [yaml.safe_load(p.read_text()) for p in sorted(SUITES_DIR.glob("*.yaml"))]
    ok = refused = 0
    for _ in range(150):
        data = _copy(rng.choice(bases))
        data.pop("profiles", None)
        paths = [p for p in _paths(data) if p]
        for _ in range(rng.choice((1, 1, 2))):
            path = rng.choice(paths)
            try:
                _set(data, path, rng.choice(NASTY))
            except (KeyError, IndexError, TypeError):
                pass
        try:
            spec = loads(yaml.dump(data, Dumper=yaml.CSafeDumper), "fuzz.yaml")  # libyaml: a fifth of the time
        except SpecError as exc:
            assert all("\n" not in ln and "Value error" not in ln for ln in exc.lines), exc.lines
            refused += 1
            continue
        for sc in expand(spec.experiment, None)[:3]:
            Topology(sc, None).script()
        ok += 1
    assert refused > 40 and ok > 10, (refused, ok)


def test_fuzzed_yaml_text_gives_spec_errors_only():
    """Typing mistakes in the text itself: a character lost, one too many, a line repeated or cut short."""
    rng = random.Random(88)
    texts = [p.read_text() for p in sorted(SUITES_DIR.glob("*.yaml"))]
    refused = 0
    for _ in range(150):
        text = rng.choice(texts)
        for _ in range(rng.choice((1, 2, 3))):
            at = rng.randrange(len(text) or 1)
            edit = rng.randrange(4)
            if edit == 0:
                text = text[:at] + text[at + 1:]
            elif edit == 1:
                text = text[:at] + rng.choice(":-[]{}&*!|>'\"#,?%@`\n\t\x00\u00e9 ") + text[at:]
            elif edit == 2:
                end = text.find("\n", at) + 1 or len(text)
                start = text.rfind("\n", 0, at) + 1
                text = text[:end] + text[start:end] + text[end:]
            else:
                text = text[:at]
        try:
            loads(text, "fuzz.yaml", rng.choice([None, "smoke", "quick", "full"]))
        except SpecError as exc:
            assert all("\n" not in ln and "Value error" not in ln for ln in exc.lines), exc.lines
            refused += 1
    assert refused > 30, refused


# ---- the command line, for real ---------------------------------------------------------------------------------

BAD_FILES = {
    "bomb.yaml": bomb().encode(),
    "latin1.yaml": "name: d\ndescription: caf\u00e9\nworkloads: [{type: ping}]\n".encode("latin-1"),
    "dup.yaml": b"name: d\nname: e\nworkloads: [{type: ping}]\n",
    "pairs.yaml": b"name: d\nfactors: {pairs: true}\nworkloads: [{type: ping}]\n",
    "when.yaml": b"name: d\nfactors: {overlay: [none, vxlan]}\nworkloads: [{type: ping, when: {overlay: vxlna}}]\n",
    "ports.yaml": b"name: d\nworkloads: [{type: netperf}, {type: iperf3, port: 12865, background: true}]\n",
    "empty.yaml": b"",
    "deep.yaml": b"name: d\nx: " + b"[" * 1000 + b"]" * 1000 + b"\nworkloads: [{type: ping}]\n",
}


@pytest.mark.net
@pytest.mark.parametrize("command", ["plan", "run"])
def test_cli_bad_files_exit_2_with_one_line_and_build_nothing(tmp_path, state_dir, command):
    for name, content in [*BAD_FILES.items(), ("a directory", None)]:
        path = tmp_path / name
        path.mkdir() if content is None else path.write_bytes(content)
        args = [command, str(path)] + (["--db", str(tmp_path / "r.db"), "--no-progress"] if command == "run" else [])
        proc = subprocess.run([sys.executable, "-m", "vnetbench", *args], capture_output=True, text=True, timeout=60,
                              cwd=ROOT)
        assert proc.returncode == 2, (name, proc.stderr[-3000:])
        assert "Traceback" not in proc.stderr and proc.stdout == "", (name, proc.stderr[-3000:])
        assert len(proc.stderr.strip().splitlines()) == 1 and str(path) in proc.stderr, (name, proc.stderr)
    assert not state_dir.exists() or not any(state_dir.iterdir())
    assert not (tmp_path / "r.db").exists()


# ---- plan's script is safe to run -----------------------------------------------------------------------------------

HOSTILE = """\
name: hostile
factors:
  placement: cross-host
  attack: ["off", "x\\ntouch PWNED1", "$(touch PWNED2)", "EOF\\ntouch PWNED3", "`touch PWNED4`",
           "%s touch PWNED5"]
workloads:
  - {type: ping, count: 2}
  - {type: iperf3, duration: 1, when: {attack: "off"}}
""" % ("a" * 300)


@pytest.mark.net
def test_plan_script_never_runs_text_from_the_spec(tmp_path, state_dir):
    spec = tmp_path / "x\n$(touch PWNED6)\ntouch PWNED7.yaml"
    spec.write_text(HOSTILE)
    proc = subprocess.run([sys.executable, "-m", "vnetbench", "plan", str(spec)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout
    for shell in ("bash", "sh"):
        assert subprocess.run([shell, "-n"], input=script, text=True).returncode == 0, shell
    # Every line a shell executes is one of vnetbench's own commands: run the script in a shell where no command
    # exists and every command name is only logged (a here-document's lines are input, not commands).
    work = tmp_path / "sandbox"
    work.mkdir()
    (work / "plan.sh").write_text(script)
    logger = 'command_not_found_handle() { printf "%s\\n" "$1" >> ran.log; return 0; }; PATH=/nonexistent; . ./plan.sh; wait'
    run = subprocess.run(["bash", "--norc", "--noprofile", "-c", logger], cwd=work, capture_output=True, text=True,
                         timeout=60, env={"HOME": str(work)})
    assert run.returncode == 0, run.stderr[-2000:]
    ran = set((work / "ran.log").read_text().split())
    assert ran and ran <= {"ip", "tc", "bridge", "ping", "iperf3", "sysctl"}, ran
    assert not [p.name for p in work.iterdir() if "PWNED" in p.name]
    assert script.count("\n# ---- scenario") == 6
    assert not state_dir.exists() or not any(state_dir.iterdir())


def test_an_adaptive_metric_every_foreground_workload_gives_is_accepted():
    exp = loads("name: d\nrepetitions: {min: 2, max: 4, metric: throughput_bps}\n"
                "workloads: [{type: iperf3}, {type: netperf}, {type: ping, background: true}]\n", "x.yaml").experiment
    assert exp.repetitions.metric == "throughput_bps"


def test_a_newline_in_a_testbed_host_name_stays_on_its_line(tmp_path):
    from vnetbench.hosts.lab import testbed
    bed = tmp_path / "tb.yaml"
    bed.write_text('hosts:\n  "node1\\n\\e[31mevil": {ssh: root@node1, nic: eth1, address: 192.0.2.1}\n')
    with pytest.raises(testbed.TestbedError) as err:
        testbed.load(bed)
    (line,) = err.value.lines
    assert "\n" not in line and "\x1b" not in line and "node1\\n\\x1b[31mevil" in line, line


@pytest.mark.net
def test_a_terminal_escape_in_a_level_reaches_no_terminal_through_run_and_show(tmp_path, state_dir):
    from conftest import vnetbench
    spec = tmp_path / "esc.yaml"
    spec.write_text('name: esc\nrepetitions: 1\nfactors: {tag: ["\\e[31mred", plain]}\n'
                    'workloads: [{type: ping, count: 3, interval: 0.05, when: {tag: ["\\e[31mred", plain]}}]\n')
    run = vnetbench("run", spec, "--db", tmp_path / "e.db", "--no-progress")
    show = vnetbench("show", "--db", tmp_path / "e.db")
    for out in (run.stdout, run.stderr, show.stdout, show.stderr):
        assert "\x1b" not in out, out
    assert "\\x1b[31mred" in show.stdout, show.stdout


# ---- where results are written --------------------------------------------------------------------------------------

def test_export_to_a_path_it_cannot_write_is_one_line_and_a_missing_directory_is_made(tmp_path):
    """`export -o` into a directory that did not exist was a traceback (exit 1) while `report -o` made it; under a
    file, or onto a directory, it is one line naming the path and the fix, exit 2."""
    from vnetbench.core.sample import Sample
    from vnetbench.results.store import Store
    db = tmp_path / "e.db"
    store = Store(db)
    cid = store.new_campaign("e", "test", "name: e\n", "0" * 64, {})
    store.put_scenario(cid, 1, "none", {"overlay": "none"}, {"overlay": "none"}, "done", None, {}, [])
    store.save_trial(cid, 1, 1, 0, "ping", {"type": "ping"}, "ok", None, 0.0, 1.0,
                     [Sample.of("rtt_s", 1e-4, pair=1, direction="forward")], {})
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()

    def export(*args):
        return subprocess.run([sys.executable, "-m", "vnetbench", "export", "--db", str(db), *args],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
    for fmt in ("csv", "jsonl", "parquet"):
        made = tmp_path / "new" / fmt / f"s.{fmt}"
        proc = export("--format", fmt, "-o", made)
        assert proc.returncode == 0 and made.stat().st_size > 0, proc.stderr
        for bad, words in ((tmp_path / "afile" / f"s.{fmt}", "afile is a file, not a directory"),
                           (tmp_path / "adir", "adir")):
            proc = export("--format", fmt, "-o", bad)
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, (fmt, bad, proc.stderr)
            assert len(proc.stderr.strip().splitlines()) == 1 and f"cannot write {bad}" in proc.stderr \
                and words in proc.stderr, proc.stderr
    proc = export("--raw", "1", "-o", tmp_path / "afile" / "raw.json")
    assert proc.returncode == 2 and "afile is a file" in proc.stderr, proc.stderr


@pytest.mark.parametrize("name, value, words", [
    ("VNETBENCH_DB_TIMEOUT", "abc", "VNETBENCH_DB_TIMEOUT='abc' is not a number of seconds"),
    ("VNETBENCH_DB_TIMEOUT", "-5", "VNETBENCH_DB_TIMEOUT='-5' is not a number of seconds"),
    ("VNETBENCH_STATE_DIR", "{file}", "is a file, not a directory"),
    ("VNETBENCH_STATE_DIR", "{file}/sub", "is a file, not a directory"),
    ("VNETBENCH_STATE_DIR", "", "VNETBENCH_STATE_DIR is set but empty"),
])
def test_a_wrong_environment_variable_is_one_line_exit_2(tmp_path, name, value, words):
    """Read at import, VNETBENCH_DB_TIMEOUT=abc was a traceback before any command ran; a state directory that is a
    file was a traceback once a run began to record what it creates."""
    import os
    (tmp_path / "afile").write_text("x")
    spec = tmp_path / "p.yaml"
    spec.write_text("name: p\nfactors: {attach: host}\nworkloads: [{type: ping, count: 1}]\n")
    env = os.environ | {name: value.format(file=tmp_path / "afile")}
    for args in (["list", "--db", str(tmp_path / "r.db")],
                 ["run", str(spec), "--db", str(tmp_path / "r.db"), "--no-progress"]):
        proc = subprocess.run([sys.executable, "-m", "vnetbench", *args], capture_output=True, text=True,
                              timeout=120, cwd=ROOT, env=env)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (args, proc.stderr[-2000:])
        assert len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr, proc.stderr
    assert not (tmp_path / "r.db").exists()


def test_a_campaign_or_trial_id_too_large_for_sqlite_is_no_such_campaign(tmp_path, state_dir):
    """`show 999999999999999999999` (and run --resume, compare, report, export, export --raw) was an OverflowError
    traceback from SQLite; it is no such campaign or trial: one line, exit 2."""
    from vnetbench.results.store import Store
    db = tmp_path / "h.db"
    Store(db).new_campaign("h", "test", "name: h\n", "0" * 64, {})
    huge = "9" * 21
    for args in (["show", huge], ["run", "--resume", huge], ["compare", "1", huge], ["report", huge],
                 ["export", huge], ["export", "--raw", huge]):
        proc = subprocess.run([sys.executable, "-m", "vnetbench", *args, "--db", str(db)], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (args, proc.stderr[-2000:])
        assert len(proc.stderr.strip().splitlines()) == 1 and f"no {'trial' if '--raw' in args else 'campaign'}" \
            in proc.stderr and huge in proc.stderr, (args, proc.stderr)
