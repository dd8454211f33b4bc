"""Each IPsec proposal is checked against what a real charon, started as a run starts it, loaded: a proposal the
machine cannot negotiate is a skip naming the missing plugin and its package, never a failed trial."""
import dataclasses
import json

import pytest

from conftest import netns_names
from vnetbench import capabilities
from vnetbench.capabilities import STRONGSWAN_PLUGINS, detect, parse_list_algs, probe_strongswan
from vnetbench.datapaths.ipsec import PLUGIN_DIR
from vnetbench.experiment.matrix import expand
from vnetbench.experiment.spec import loads

pytestmark = pytest.mark.net

LEVELS = [{"type": "ipsec"}, {"type": "ipsec", "cipher": "aes-256-cbc", "integrity": "hmac-sha512"},
          {"type": "ipsec", "cipher": "chacha20-poly1305"}]


def scenarios(caps):
    text = (f"name: p\nrepetitions: 1\nfactors: {json.dumps({'encryption': LEVELS, 'placement': 'cross-host'})}\n"
            "workloads: [{type: ping, count: 2}]\n")
    return {sc.labels["encryption"]: sc for sc in expand(loads(text).experiment, caps)}


def test_a_proposal_whose_plugin_is_missing_is_skipped_with_the_plugin_named(state_dir, monkeypatch):
    caps = detect()
    if not caps.tool("charon") or caps.has("xfrm-esp"):
        pytest.skip("needs strongSwan's kernel-libipsec path (charon encrypts ESP itself)")
    made = []  # the probe's own run: other tests' probes beside it make and remove namespaces of theirs
    create = capabilities.Ledger.create
    monkeypatch.setattr(capabilities.Ledger, "create", staticmethod(lambda *a, **k: made.append(create(*a, **k))
                                                                    or made[-1]))
    load = STRONGSWAN_PLUGINS.format(kernel="kernel-netlink").replace("openssl ", "").replace("gcm ", "")
    swan = probe_strongswan(load)
    assert [led.prefix for led in made] and not {f"{led.prefix}-swan" for led in made} & netns_names()
    assert not any(state_dir.iterdir()), "the probe left its files"
    assert "gcm" not in swan.plugins and "aes" in swan.plugins and not swan.has("AES_GCM_16")
    scs = scenarios(dataclasses.replace(caps, swan=swan))
    gcm = scs["ipsec"]
    assert gcm.skip and "AES_GCM_16" in gcm.skip and "plugin gcm or openssl" in gcm.skip
    assert "libstrongswan-standard-plugins" in gcm.skip
    assert scs["ipsec(aes-256-cbc,hmac-sha512)"].skip is None


def test_the_real_probe_matches_the_installed_plugins(state_dir):
    caps = detect()
    if not caps.tool("charon"):
        pytest.skip("strongSwan is not installed")
    swan = caps.strongswan()
    assert not swan.error and {"aes", "hmac", "vici"} <= set(swan.plugins)
    has_gcm_plugin = any((PLUGIN_DIR / f"libstrongswan-{p}.so").exists() for p in ("gcm", "openssl"))
    assert swan.has("AES_GCM_16") == has_gcm_plugin
    assert (scenarios(caps)["ipsec"].skip is None) == has_gcm_plugin or caps.has("xfrm-esp")


def test_list_algs_parser():
    algs = parse_list_algs("encryption:\n  AES_CBC[aes]\n  3DES_CBC[openssl]\naead:\n  AES_GCM_16[gcm]\ndrbg:\n")
    assert algs == {"encryption": ("AES_CBC", "3DES_CBC"), "aead": ("AES_GCM_16",), "drbg": ()}


def test_doctor_checks_every_ipsec_cipher(state_dir):
    from conftest import vnetbench
    report = json.loads(vnetbench("doctor", "--json").stdout)
    levels = {d["level"]: d for d in report["datapaths"]}
    assert {"ipsec", "ipsec(aes-256-cbc)", "ipsec(chacha20-poly1305)", "ipsec(3des-cbc)"} <= set(levels)
    swan = report["strongswan"]
    assert swan["error"] or "aes" in swan["plugins"]
    if not swan["error"] and "AES_GCM_16" not in sum(swan["algorithms"].values(), []):
        assert not levels["ipsec"]["ok"] and "gcm" in levels["ipsec"]["reason"]
