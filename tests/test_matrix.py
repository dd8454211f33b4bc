"""Matrix expansion: product of levels, exclude/include, workload overrides, skips with reasons."""
from vnetbench.capabilities import Capabilities, Feature
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import loads


def scen(text: str, caps=None):
    return expand(loads(text).experiment, caps)


BASE = "name: m\nworkloads: [{type: iperf3, duration: 1}]\n"


def test_product_of_levels_in_order():
    s = scen(BASE + "factors: {overlay: [none, vxlan], placement: [same-host, cross-host], protocol: [tcp, udp]}\n")
    assert len(s) == 8
    assert [x.labels["overlay"] for x in s[:4]] == ["none"] * 4
    assert {(x.labels["placement"], x.workloads[0].params.protocol) for x in s} == {
        (p, q) for p in ("same-host", "cross-host") for q in ("tcp", "udp")}
    assert [x.index for x in s] == list(range(1, 9))


def test_exclude_and_include():
    s = scen(BASE + "factors: {overlay: [none, vxlan], pairs: [1, 2]}\n"
             "exclude: [{overlay: vxlan, pairs: 2}]\ninclude: [{overlay: vxlan, pairs: 4}]\n")
    keys = {(x.labels["overlay"], x.levels["pairs"]) for x in s}
    assert keys == {("none", 1), ("none", 2), ("vxlan", 1), ("vxlan", 4)}


def test_include_duplicate_is_not_run_twice():
    s = scen(BASE + "factors: {overlay: [none, vxlan]}\ninclude: [{overlay: none}]\n")
    assert len(s) == 2


def test_mtu_policy():
    lower, raise_ = scen(BASE + "factors: {overlay: vxlan, mtu: 1500, mtu_policy: [lower-vm, raise-underlay]}\n")
    assert (lower.vm_mtu, lower.underlay_mtu) == (1450, 1500)
    assert (raise_.vm_mtu, raise_.underlay_mtu) == (1500, 1550)


def caps_without(*missing):
    tools = {t: Feature(True, "x") for t in ("iperf3", "ping", "sockperf", "netperf")}
    kernel = {k: Feature(k not in missing, "Unknown device type." if k in missing else "")
              for k in ("veth", "bridge", "vxlan", "macvlan", "gretap", "geneve", "vlan")}
    return Capabilities(tools, kernel)


def test_skips_carry_reasons():
    s = scen(BASE + "factors: {overlay: [none, vxlan, gre], attach: [switch, host], placement: [same-host, cross-host]}\n",
             caps_without("gretap"))
    by = {(x.labels["overlay"], x.labels["attach"], x.labels["placement"]): x for x in s}
    assert by[("none", "switch", "same-host")].skip is None
    assert by[("vxlan", "switch", "cross-host")].implementation["overlay"] == "kernel-vxlan"
    assert "gretap" in by[("gre", "switch", "cross-host")].skip and "Unknown device type" in by[("gre", "switch", "cross-host")].skip
    assert "placement=cross-host" in by[("none", "host", "same-host")].skip
    assert "overlay=none" in by[("vxlan", "host", "cross-host")].skip
    assert by[("none", "host", "cross-host")].skip is None


def test_missing_tool_skips():
    caps = caps_without()
    caps.tools["iperf3"] = Feature(False, "not installed")
    (s,) = scen(BASE, caps)
    assert "iperf3 is not installed" in s.skip


def test_when_pairs_background_and_selector_factors():
    s = scen("name: m\nfactors: {attack: [off, on], pairs: 2}\nworkloads:\n"
             "  - {type: iperf3, protocol: udp, udp_rate: 10M, duration: 1, pairs: [2], background: true, when: {attack: on}}\n"
             "  - {type: ping, pairs: [1]}\n")
    off, on = s
    assert [w.kind for w in off.workloads] == ["ping"] and off.workload_ids == [1]
    assert [(w.kind, w.background, w.only_pairs) for w in on.workloads] == [("iperf3", True, [2]), ("ping", False, [1])]


def test_selector_factor_needs_levels_and_pairs_must_exist():
    from vnetbench.experiment.spec import SpecError
    import pytest
    with pytest.raises(SpecError) as exc:
        loads("name: m\nworkloads: [{type: ping, when: {attack: on}}]\n")
    assert "list its levels under `factors`" in exc.value.lines[0]
    with pytest.raises(SpecError) as exc:
        loads("name: m\nworkloads: [{type: ping, pairs: [3]}]\n")
    assert "pair 3 does not exist: this experiment has at most 1 pairs" in exc.value.lines[0]
    one, three = scen("name: m\nfactors: {pairs: [1, 3]}\nworkloads: [{type: ping, pairs: [3]}]\n", caps_without())
    assert "runs on pair 3 but the scenario has 1 pairs" in one.skip and three.skip is None


def test_a_parameter_set_in_an_entry_is_pinned_for_that_entry():
    s = scen("name: m\nfactors: {protocol: [tcp, udp], pairs: 2}\nworkloads:\n"
             "  - {type: iperf3, duration: 1}\n"
             "  - {type: iperf3, duration: 1, protocol: udp, pairs: [1], background: true, port: 5301}\n")
    assert [[w.params.protocol for w in sc.workloads] for sc in s] == [["tcp", "udp"], ["udp", "udp"]]
    from vnetbench.experiment.spec import SpecError
    import pytest
    with pytest.raises(SpecError) as exc:
        loads("name: m\nfactors: {protocol: [tcp, udp]}\nworkloads: [{type: iperf3, protocol: udp}]\n")
    assert "sets it itself (iperf3)" in exc.value.lines[0]


def test_a_datagram_too_big_once_encrypted_is_left_out_saying_why():
    """The sender's kernel encrypts a datagram whole (xfrm, end to end) and fragments it after: a 65507-byte ping
    plus ESP no longer fits in one IPv4 packet. That workload is left out with the largest payload that fits (as
    computed: 65446 with AES-256-CBC + HMAC-SHA-512 in transport mode); the others run; alone, it skips the scenario.
    Host to host with VMs, the VMs fragment first: nothing is left out."""
    caps = caps_without()
    caps.kernel["xfrm-esp"] = Feature(True, "")
    esp = "{type: ipsec, keying: manual, mode: transport, cipher: aes-256-cbc, integrity: hmac-sha512}"
    text = (f"name: m\nfactors: {{encryption: {esp}, kernel: shared}}\nworkloads:\n"
            "  - {type: ping, ping_size: 56}\n  - {type: ping, ping_size: 65507}\n  - {type: ping, ping_size: 65446}\n")
    (s,) = scen(text, caps)
    assert s.skip is None and [w.params.ping_size for w in s.workloads] == [56, 65446] and s.workload_ids == [0, 2]
    assert any(n.startswith("workload 2 (ping, 65507-byte payloads) left out") and "65446-byte payloads fit" in n
               for n in s.notes), s.notes
    (alone,) = scen(f"name: m\nfactors: {{encryption: {esp}}}\nworkloads: [{{type: ping, ping_size: 65507}}]\n", caps)
    assert alone.skip and "left out" in alone.skip
    (gateway,) = scen(f"name: m\nfactors: {{encryption: {esp.replace('transport', 'tunnel')}, overlay: vxlan, "
                      f"encryption_scope: host-to-host}}\nworkloads: [{{type: ping, ping_size: 65507}}]\n", caps)
    assert gateway.skip is None and len(gateway.workloads) == 1


def test_underlay_delay_and_loss_need_netem():
    """netem (delay, jitter, loss on each host NIC) is a kernel feature: without it the scenario is skipped, naming
    what was asked, why, and where it runs; with it, the NIC gets netem at the root and the rate under it."""
    text = BASE + "underlay: {rate: 1G, delay: 10ms, jitter: 1ms, loss: 0.5%}\n"
    (s,) = scen(text, caps_without("netem"))
    assert s.skip.startswith("underlay delay, jitter, loss: kernel has no netem") and "kernel: guest" in s.skip
    caps = caps_without()
    caps.kernel["netem"] = Feature(True, "")
    (s,) = scen(text, caps)
    assert s.skip is None and s.underlay_impairment == {"delay_s": 0.01, "jitter_s": 0.001, "loss_ratio": 0.005}
    assert s.underlay_qdiscs("u") == ["qdisc add dev u root handle 1: netem limit 91666 delay 10000us 1000us loss 0.5%",
                                      "qdisc add dev u parent 1: handle 2: tbf rate 1000000000bit burst 125000 "
                                      "latency 50ms"]
    (plain,) = scen(BASE, caps)
    assert plain.underlay_qdiscs("u") == [] and plain.topology_key != s.topology_key


def test_a_factor_a_workload_does_not_read_does_not_multiply_it():
    """quick.yaml ran ping under both `protocol` rows, where it means nothing: it now runs once per topology (under
    the first level), saying where; iperf3, which reads `protocol`, still runs under both."""
    s = scen("name: m\nfactors: {overlay: [none, vxlan], protocol: [tcp, udp]}\n"
             "workloads: [{type: iperf3, duration: 1}, {type: ping, count: 3}]\n")
    assert [([w.kind for w in x.workloads], x.workload_ids) for x in s] == [
        (["iperf3", "ping"], [0, 1]), (["iperf3"], [0]), (["iperf3", "ping"], [0, 1]), (["iperf3"], [0])]
    assert s[1].notes == ["workload 2 (ping) runs in scenario 1 only: it does not read protocol"]
    # A background load that differs between the scenarios changes what ping measures: ping runs in both.
    s = scen("name: m\nfactors: {load: [none, udp]}\nworkloads:\n"
             "  - {type: iperf3, protocol: udp, udp_rate: 10M, duration: 2, background: true, when: {load: udp}}\n"
             "  - {type: ping, count: 3}\n")
    assert [[w.kind for w in x.workloads] for x in s] == [["ping"], ["iperf3", "ping"]]
    # Nothing left to run in a scenario: skipped, naming where its workload runs.
    s = scen("name: m\nfactors: {x: [a, b]}\nworkloads:\n"
             "  - {type: iperf3, duration: 1, when: {x: a}}\n  - {type: ping, count: 3}\n")
    assert [[w.kind for w in x.workloads] for x in s] == [["iperf3", "ping"], []]
    assert s[0].skip is None and s[1].skip == "workload 2 (ping) runs in scenario 1 only: it does not read x"


def test_levels_that_do_not_apply_are_shown_as_not_applicable():
    host, switch = scen(BASE + "factors: {attach: [host, switch]}\n")
    assert host.shown_labels["switch"] == host.shown_labels["overlay"] == "n/a"
    assert host.shown_labels["encryption_scope"] == "n/a" and host.labels["switch"] == "linuxbridge"
    assert switch.shown_labels["switch"] == "linuxbridge" and switch.shown_labels["attach"] == "switch"


def test_a_tool_installed_but_unusable_is_not_called_missing():
    """doctor said wireguard-go "is not installed" in the guest rows while listing it installed: the guest probe
    had found it but cannot run it (a Go program uses AVX), and that reason was dropped."""
    caps = caps_without()
    caps.tools["iperf3"] = Feature(False, "a Go program uses AVX, which a UML guest on this CPU does not save")
    (s,) = scen(BASE, caps)
    assert "iperf3 is installed but cannot run here: a Go program uses AVX" in s.skip and "not installed" not in s.skip
    caps.tools["iperf3"] = Feature(False, "not installed (Debian package iperf3)")
    assert "iperf3 is not installed (Debian package iperf3)" in scen(BASE, caps)[0].skip
