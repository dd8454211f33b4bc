"""IPsec. The implementation is chosen from what the machine has, and recorded:

- kernel xfrm, where the kernel has the ESP (and, for AH, the AH) transform: IKEv2 by strongSwan's charon with
  kernel-netlink, or manual keys installed with `ip xfrm state/policy` (read by `ip -batch` from a 0600 file);
- strongSwan kernel-libipsec otherwise: ESP in charon's userspace over a TUN device (ipsec0), IKEv2 only, tunnel
  mode only, ESP only, always UDP-encapsulated on port 4500.

A combination the chosen implementation cannot do is skipped with the reason, never approximated.

One charon per node (VM for vm-to-vm, host for host-to-host), started in the node's namespace with the node's
directory as its /run (`vnetbench.system.privrun`): own strongswan.conf (STRONGSWAN_CONF), VICI socket, pid file and
log. Authentication: IKEv2 with a 256-bit pre-shared key per peering, generated at build time.
"""
from __future__ import annotations

import base64
import math
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationInfo, field_validator

from ..capabilities import STRONGSWAN_PLUGINS, TOOLS
from . import register
from .base import Availability, Options
from .encrypted import EncryptedTunnel

CHARON = TOOLS["charon"][1][0]
PLUGIN_DIR = Path(CHARON).parent / "plugins"
IKE_PROPOSAL = "aes256-sha256-x25519"
VICI = "unix:///run/charon.vici"  # as charon and swanctl see it: the node's directory is their /run
LIBIPSEC_TUN_MTU = 1400  # strongSwan 5.9.8 creates ipsec0 at 1400 and reads it with a buffer of that size
PLUGINS = STRONGSWAN_PLUGINS  # the capability probe starts its charon with the same list
# swanctl's own plugins (what reads keys and certificates): without a list it loads every plugin there is, af-alg's
# socket per algorithm then loading ~20 crypto modules, 5.4 s of the first swanctl in a guest (S1's IPsec build)
SWANCTL_PLUGINS = "pem pkcs1 pkcs8 x509 revocation constraints pubkey openssl random"
IKE_ALGORITHMS = (("AES_CBC", "encryption"), ("HMAC_SHA2_256_128", "integrity"), ("PRF_HMAC_SHA2_256", "PRF"),
                  ("CURVE_25519", "key exchange"))  # what IKE_PROPOSAL needs from charon's plugins


@dataclass(frozen=True)
class Cipher:
    swan: str      # strongSwan proposal keyword
    block: int     # ESP payload alignment
    iv: int
    icv: int       # AEAD tag; 0 for a cipher that needs a separate integrity algorithm
    xfrm: str      # kernel algorithm name
    key: int       # kernel key bytes (AEAD: + 4 bytes of salt)
    ike: str       # what `swanctl` reports, for notes

    @property
    def aead(self) -> bool:
        return self.icv > 0


@dataclass(frozen=True)
class Integrity:
    swan: str
    icv: int
    xfrm: str
    key: int
    ike: str


CIPHERS = {
    "aes-128-cbc": Cipher("aes128", 16, 16, 0, "cbc(aes)", 16, "AES_CBC_128"),
    "aes-256-cbc": Cipher("aes256", 16, 16, 0, "cbc(aes)", 32, "AES_CBC_256"),
    "aes-128-gcm": Cipher("aes128gcm16", 4, 8, 16, "rfc4106(gcm(aes))", 20, "AES_GCM_16_128"),
    "aes-256-gcm": Cipher("aes256gcm16", 4, 8, 16, "rfc4106(gcm(aes))", 36, "AES_GCM_16_256"),
    "chacha20-poly1305": Cipher("chacha20poly1305", 4, 8, 16, "rfc7539esp(chacha20,poly1305)", 36,
                                "CHACHA20_POLY1305_256"),
    "3des-cbc": Cipher("3des", 8, 8, 0, "cbc(des3_ede)", 24, "3DES_CBC"),
    "blowfish-cbc": Cipher("blowfish128", 8, 8, 0, "cbc(blowfish)", 16, "BLOWFISH_CBC_128"),
    "null": Cipher("null", 4, 0, 0, "ecb(cipher_null)", 0, "NULL"),
}
INTEGRITY = {
    "hmac-md5": Integrity("md5", 12, "hmac(md5)", 16, "HMAC_MD5_96"),
    "hmac-sha1": Integrity("sha1", 12, "hmac(sha1)", 20, "HMAC_SHA1_96"),
    "hmac-sha256": Integrity("sha256", 16, "hmac(sha256)", 32, "HMAC_SHA2_256_128"),
    "hmac-sha384": Integrity("sha384", 24, "hmac(sha384)", 48, "HMAC_SHA2_384_192"),
    "hmac-sha512": Integrity("sha512", 32, "hmac(sha512)", 64, "HMAC_SHA2_512_256"),
}
DEFAULT_INTEGRITY = "hmac-sha256"


class IpsecOptions(Options):
    protocol: Literal["esp", "ah", "ah+esp"] = "esp"
    mode: Literal["tunnel", "transport"] = "tunnel"
    cipher: Literal[tuple(CIPHERS)] = "aes-128-gcm"  # type: ignore[valid-type]
    integrity: Literal[tuple(INTEGRITY) + ("none",)] | None = None  # type: ignore[valid-type]
    keying: Literal["ike", "manual"] = "ike"

    @field_validator("cipher")
    @classmethod
    def _cipher(cls, v: str, info: ValidationInfo) -> str:
        if info.data.get("protocol") == "ah":
            raise ValueError("AH authenticates without encrypting: leave cipher out, or use protocol ah+esp")
        return v

    @field_validator("integrity")
    @classmethod
    def _integrity(cls, v: str | None, info: ValidationInfo) -> str | None:
        protocol, cipher = info.data.get("protocol", "esp"), info.data.get("cipher", "aes-128-gcm")
        aead = cipher in CIPHERS and CIPHERS[cipher].aead
        if protocol != "esp" and v == "none":
            raise ValueError("AH is an integrity protocol: choose an integrity algorithm "
                             f"({', '.join(INTEGRITY)})")
        if protocol == "esp" and aead and v not in (None, "none"):
            raise ValueError(f"{cipher} is an AEAD cipher with its own integrity check: leave integrity out "
                             f"(or set it to none)")
        if protocol == "esp" and not aead and v == "none":
            raise ValueError(f"ESP with {cipher} needs an integrity algorithm (strongSwan refuses ESP without one): "
                             f"choose one of {', '.join(INTEGRITY)}")
        return v


def _algorithm(ike: str) -> str:
    """The name `swanctl --list-algs` gives a cipher: without its key size (AES_GCM_16_128 -> AES_GCM_16)."""
    return re.sub(r"_(128|192|256)$", "", ike)


_TUNNEL_MTUS: dict[tuple, int] = {}  # Ipsec.tunnel_mtu's answers


@register
class Ipsec(EncryptedTunnel):
    name = "ipsec"
    summary = "IPsec (ESP/AH): kernel xfrm where the kernel has it, else strongSwan kernel-libipsec in userspace"
    Options = IpsecOptions
    impl: str | None = None  # "kernel" or "libipsec", decided by check()

    # ---- algorithms --------------------------------------------------------------------------------------
    @property
    def esp(self) -> bool:
        return self.options.protocol in ("esp", "ah+esp")

    @property
    def ah(self) -> bool:
        return self.options.protocol in ("ah", "ah+esp")

    @property
    def cipher(self) -> Cipher:
        return CIPHERS[self.options.cipher]

    @property
    def integrity(self) -> Integrity | None:
        name = self.options.integrity
        if name == "none" or (name is None and self.esp and not self.ah and self.cipher.aead):
            return None
        return INTEGRITY[name or DEFAULT_INTEGRITY]

    def esp_proposal(self) -> str:
        c, i = self.cipher, self.integrity
        return c.swan if c.aead or i is None else f"{c.swan}-{i.swan}"

    def ah_proposal(self) -> str:
        return self.integrity.swan

    def describe(self) -> str:
        """The algorithms as strongSwan names them (no key material, only algorithm names and key sizes)."""
        parts = []
        if self.esp:
            c, i = self.cipher, self.integrity
            parts.append(f"ESP {self.esp_proposal()} ({c.ike}{'/' + i.ike if i and not c.aead else ''})")
        if self.ah:
            parts.append(f"AH {self.ah_proposal()} ({self.integrity.ike})")
        return " + ".join(parts) + f", {self.options.mode} mode"

    # ---- sizes -------------------------------------------------------------------------------------------
    def outer_size(self, inner: int) -> int:
        size = inner
        if self.esp:
            c, i = self.cipher, self.integrity
            if self.options.mode == "tunnel":
                size += 20
            payload = size - 20  # transport: the original IP header stays in front, unencrypted
            icv = c.icv if c.aead else i.icv
            size = 20 + 8 + c.iv + math.ceil((payload + 2) / c.block) * c.block + icv
            if self.impl != "kernel":
                size += 8  # kernel-libipsec always encapsulates ESP in UDP (port 4500)
        if self.ah:
            if self.options.mode == "tunnel" and not self.esp:
                size += 20
            size += 12 + math.ceil(self.integrity.icv / 4) * 4
        return size

    def tunnel_mtu(self, link_mtu: int) -> int:
        """The largest inner size whose packet fits the link (0 if none): outer_size never shrinks as its inner size
        grows, so a bisection finds it. A matrix asks this of every scenario (S3's 780, each with a new element):
        the answer is kept per algorithms, mode, implementation and link MTU, all that outer_size reads."""
        o = self.options
        key = (type(self), o.protocol, o.cipher, o.integrity, o.mode, self.impl, link_mtu)
        if (mtu := _TUNNEL_MTUS.get(key)) is None:
            if len(_TUNNEL_MTUS) > 10_000:
                _TUNNEL_MTUS.clear()
            mtu = _TUNNEL_MTUS[key] = self._tunnel_mtu(link_mtu)
        return mtu

    def _tunnel_mtu(self, link_mtu: int) -> int:
        lo, hi = 0, max(link_mtu, 0)         # outer_size(lo) fits, or lo is 0; everything above hi does not fit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.outer_size(mid) <= link_mtu:
                lo = mid
            else:
                hi = mid - 1
        return min(lo, LIBIPSEC_TUN_MTU) if self.impl != "kernel" else lo

    # ---- availability ------------------------------------------------------------------------------------
    def adopt(self, implementation):
        self.impl = "kernel" if "kernel-xfrm" in implementation else \
            "libipsec" if "kernel-libipsec" in implementation else None

    def check(self, scenario, caps):
        problem = self.scope_problem(scenario)
        if problem:
            return Availability.no(problem)
        o = self.options
        kernel_ok = (not self.esp or caps.has("xfrm-esp")) and (not self.ah or caps.has("xfrm-ah"))
        if kernel_ok:
            return self._check_kernel(scenario, caps)
        missing = "xfrm-ah" if self.ah and not caps.has("xfrm-ah") else "xfrm-esp"
        kernel_why = caps.missing_kernel(missing)
        if self.ah:
            return Availability.no(f"AH needs the kernel's xfrm AH transform ({kernel_why}); strongSwan's "
                                   f"kernel-libipsec, the userspace fallback, implements ESP only")
        if o.mode == "transport":
            return Availability.no(f"transport mode needs the kernel's xfrm ESP transform ({kernel_why}); "
                                   f"strongSwan's kernel-libipsec, the userspace fallback, implements tunnel mode only")
        if o.keying == "manual":
            return Availability.no(f"manual keys are installed with `ip xfrm state`, which needs the kernel's xfrm "
                                   f"ESP transform ({kernel_why}); strongSwan's kernel-libipsec, the userspace "
                                   f"fallback, has no static SAs (IKEv2 only)")
        for tool in ("charon", "swanctl"):
            if not caps.tool(tool):
                return Availability.no(f"the kernel has no xfrm ESP ({kernel_why}) and {caps.missing_tool(tool)}")
        if not (plugin := caps.offer("strongswan-kernel-libipsec")).ok:
            return Availability.no(f"the kernel has no xfrm ESP ({kernel_why}) and {plugin.detail}")
        if not caps.has("tun"):
            return Availability.no(f"the kernel has no xfrm ESP ({kernel_why}) and kernel-libipsec needs a TUN "
                                   f"device: {caps.missing_kernel('tun')}")
        if o.cipher == "blowfish-cbc" and not (blowfish := caps.offer("strongswan-blowfish")).ok:
            return Availability.no(blowfish.detail)
        problem = self.charon_problem(caps, esp=True)
        if problem:
            return Availability.no(problem)
        self.impl = "libipsec"
        version = caps.tools["charon"].detail
        link = self.link_mtu(scenario)
        notes = [f"IPsec in userspace: strongSwan {version} kernel-libipsec (ESP in charon over a TUN device), "
                 f"because {kernel_why}",
                 "ESP is UDP-encapsulated on port 4500 (kernel-libipsec always encapsulates): 8 bytes more per "
                 "packet than plain ESP, and the packets are UDP on the wire",
                 f"IKEv2 ({IKE_PROPOSAL}) with a 256-bit pre-shared key generated per run; {self.describe()}",
                 f"tunnel MTU {self.tunnel_mtu(link)} for a {link}-byte link"]
        if self.outer_size(LIBIPSEC_TUN_MTU) < link:
            if not self.host_to_host(scenario):
                effect = "bigger packets are fragmented before encryption; TCP sizes its segments to fit"
            elif scenario.levels["mtu_policy"] == "lower-vm":
                effect = f"the VM MTU is lowered to {scenario.vm_mtu} so that the overlay's packets fit"
            else:
                effect = "the overlay's bigger packets are fragmented before encryption"
            notes.append(f"kernel-libipsec's TUN device (ipsec0) is limited to {LIBIPSEC_TUN_MTU} bytes in "
                         f"strongSwan {version}: {effect}")
        return Availability(True, f"strongswan-{version} kernel-libipsec", notes=tuple(notes))

    def _check_kernel(self, scenario, caps) -> Availability:
        o = self.options
        if o.keying == "ike":
            if o.protocol == "ah+esp":
                return Availability.no("IKEv2 negotiates one IPsec protocol per CHILD_SA (RFC 7296 3.3): an AH+ESP "
                                       "bundle needs keying manual")
            for tool in ("charon", "swanctl"):
                if not caps.tool(tool):
                    return Availability.no(caps.missing_tool(tool))
            problem = self.charon_problem(caps, esp=False)
            if problem:
                return Availability.no(problem)
        self.impl = "kernel"
        keys = ("IKEv2 " + IKE_PROPOSAL + " with a 256-bit pre-shared key generated per run" if o.keying == "ike"
                else "manual keys generated per run (ip xfrm state)")
        notes = [f"{keys}; {self.describe()}",
                 "on the wire: " + " + ".join(p for p, on in (("ESP (IP protocol 50)", self.esp),
                                                              ("AH (IP protocol 51)", self.ah)) if on)]
        if o.keying == "manual":
            notes.append("manual keys: no rekeying and no replay protection across restarts (static SAs)")
        impl = (f"kernel-xfrm + strongswan-{caps.tools['charon'].detail} IKEv2" if o.keying == "ike"
                else "kernel-xfrm manual keys")
        return Availability(True, impl, notes=tuple(notes))

    def charon_problem(self, caps, esp: bool) -> str | None:
        """Why charon cannot negotiate this proposal, from the algorithms a probe charon really loaded: IKE's
        always, ESP's too when charon itself encrypts (kernel-libipsec)."""
        swan = caps.strongswan()
        needs = [(alg, f"IKE proposal {IKE_PROPOSAL}, {what}") for alg, what in IKE_ALGORITHMS]
        if esp:
            c, i = self.cipher, self.integrity
            needs.append((_algorithm(c.ike), f"ESP proposal {self.esp_proposal()}"))
            if i is not None and not c.aead:
                needs.append((i.ike, f"ESP proposal {self.esp_proposal()}"))
        for alg, use in needs:
            problem = swan.missing(alg, use)
            if problem:
                return problem
        return None

    # ---- build -------------------------------------------------------------------------------------------
    def addrs(self, topo, label: str) -> tuple[str, list[str]]:
        """(IKE/outer address, traffic selectors) of a node."""
        node = topo.nodes[label]
        six = topo.sc["ip_version"] == 6
        outer = node.v6 if self.options.mode == "transport" and six else node.v4
        if self.options.mode == "transport":
            return outer, [f"{outer}/{128 if six else 32}"]
        v4, v6 = self.tunnel_addrs(label) if node.role == "host" else (node.v4, node.v6)
        return outer, [f"{v4}/32", f"{v6}/128"]

    def transport_ip(self, topo, host):
        """Tunnel mode carries the hosts' tunnel addresses; transport mode protects the underlay addresses."""
        return super().transport_ip(topo, host) if self.options.mode == "tunnel" else None

    def build(self, topo):
        links = self.peers(topo)
        nodes = self.members(links)
        self.make_dirs(topo, nodes)
        tunnel_hosts = self.host_to_host(topo.sc) and self.options.mode == "tunnel"
        if tunnel_hosts:
            for h in nodes:
                v4, v6 = self.tunnel_addrs(h)
                topo.ip(h, f"addr add {v4}/32 dev lo", f"addr add {v6}/128 dev lo nodad")
        if self.options.keying == "manual":
            self._build_manual(topo, links, nodes)
        else:
            self._build_ike(topo, links, nodes)
        if tunnel_hosts and topo.sc["attach"] == "host":
            self.target_tunnel_addrs(topo)

    def _build_ike(self, topo, links, nodes):
        libipsec = self.impl != "kernel"
        topo.call(nodes[0], f"write strongswan.conf and swanctl.conf (0600; IKEv2 pre-shared keys generated now) for "
                      f"{', '.join(nodes)}", lambda: self._write_ike(topo, links, nodes))
        for n in nodes:
            d = topo.workdir(n)
            argv = self.privrun(topo, n, ["env", "STRONGSWAN_CONF=/run/strongswan.conf",
                                          topo.tool_path(n, "charon", CHARON)])
            topo.daemon(n, f"charon@{n}", argv,
                        ready=self.wait_socket(topo, f"charon@{n}", f"{d}/charon.vici", f"{d}/charon.log", label=n))
        swanctl = ["env", "STRONGSWAN_CONF=/run/strongswan.conf", "swanctl"]  # its plugins: SWANCTL_PLUGINS
        for n in nodes:  # swanctl, too, sees the node's directory as /run (short socket paths)
            topo.run(n, self.privrun(topo, n, [*swanctl, "--load-all", "--noprompt", "--file", "/run/swanctl.conf",
                                                "--uri", VICI]))
        mtu = self.tunnel_mtu(self.link_mtu(topo.sc))
        if libipsec and mtu < LIBIPSEC_TUN_MTU:
            for n in nodes:
                topo.ip(n, f"link set ipsec0 mtu {mtu}")
        for a, b in links:  # 30 s: charon's own retransmits (1 s x 1.8^k, 4 tries) end by ~23 s, on a slow guest too
            topo.run(a, self.privrun(topo, a, [*swanctl, "--initiate", "--child", f"to-{b}", "--timeout", "30",
                                               "--uri", VICI]))

    def _write_ike(self, topo, links, nodes) -> None:
        psk = {link: base64.b64encode(secrets.token_bytes(32)).decode() for link in links}
        kernel = "kernel-netlink" if self.impl == "kernel" else "kernel-libipsec kernel-netlink"
        libipsec = ("    kernel-libipsec {\n      allow_peer_ts = yes\n    }\n"
                    "    kernel-netlink {\n      fwmark = !0x42\n    }\n"
                    "    socket-default {\n      fwmark = 0x42\n    }\n") if self.impl != "kernel" else ""
        conf = (f"# vnetbench: one charon per node, private /run\n"
                f"charon {{\n  load_modular = no\n  load = {PLUGINS.format(kernel=kernel)}\n"
                f"  retransmit_timeout = 1.0\n  retransmit_tries = 4\n"
                f"  filelog {{\n    charon {{\n      path = /run/charon.log\n      default = 1\n"
                f"      flush_line = yes\n      ike_name = yes\n      time_format = %T\n      time_add_ms = yes\n"
                f"    }}\n  }}\n"
                f"  plugins {{\n    vici {{\n      socket = {VICI}\n    }}\n{libipsec}  }}\n}}\n"
                f"swanctl {{\n  load = {SWANCTL_PLUGINS}\n}}\n")
        for n in nodes:
            topo.write_file(n, "strongswan.conf", conf)
            conns, secs = [], []
            for link in links:
                if n not in link:
                    continue
                peer = link[1] if link[0] == n else link[0]
                me, my_ts = self.addrs(topo, n)
                other, peer_ts = self.addrs(topo, peer)
                conns.append(self._connection(peer, me, other, my_ts, peer_ts))
                secs.append(f"  ike-{peer} {{\n    id-a = {me}\n    id-b = {other}\n    secret = 0s{psk[link]}\n  }}\n")
            topo.write_file(n, "swanctl.conf",
                            "connections {\n" + "".join(conns) + "}\nsecrets {\n" + "".join(secs) + "}\n")

    def _connection(self, peer, me, other, my_ts, peer_ts) -> str:
        props = (f"        esp_proposals = {self.esp_proposal()}\n" if self.esp else
                 f"        ah_proposals = {self.ah_proposal()}\n")
        return (f"  to-{peer} {{\n    version = 2\n    local_addrs = {me}\n    remote_addrs = {other}\n"
                f"    proposals = {IKE_PROPOSAL}\n    mobike = no\n    encap = {'no' if self.impl == 'kernel' else 'yes'}\n"
                f"    local {{\n      auth = psk\n      id = {me}\n    }}\n"
                f"    remote {{\n      auth = psk\n      id = {other}\n    }}\n"
                f"    children {{\n      to-{peer} {{\n        mode = {self.options.mode}\n"
                f"        local_ts = {', '.join(my_ts)}\n        remote_ts = {', '.join(peer_ts)}\n{props}"
                f"      }}\n    }}\n  }}\n")

    # ---- manual keys (kernel xfrm only) --------------------------------------------------------------------
    def _build_manual(self, topo, links, nodes):
        topo.call(nodes[0], f"write xfrm.batch (0600; ip xfrm states and policies with keys generated now) for "
                      f"{', '.join(nodes)}", lambda: self._write_manual(topo, links, nodes))
        if self.host_to_host(topo.sc) and self.options.mode == "tunnel":
            for a, b in links:  # the peer's tunnel address is reached through the peer's underlay address
                for me, peer in ((a, b), (b, a)):
                    (m4, m6), (p4, p6) = self.tunnel_addrs(me), self.tunnel_addrs(peer)
                    topo.ip(me, f"route add {p4}/32 via {topo.host_ip(peer)} src {m4}",
                            f"route add {p6}/128 via {topo.nodes[peer].v6} src {m6}")
        for n in nodes:
            topo.run(n, ["ip", "-batch", f"{topo.workdir(n)}/xfrm.batch"])

    def _write_manual(self, topo, links, nodes) -> None:
        lines: dict[str, list[str]] = {n: [] for n in nodes}
        for k, (a, b) in enumerate(links, 1):
            for src, dst in ((a, b), (b, a)):  # one SA (per protocol) and one policy per direction
                s_out, s_ts = self.addrs(topo, src)
                d_out, d_ts = self.addrs(topo, dst)
                states, tmpls = self._states(s_out, d_out, reqid=k)
                for n in (src, dst):
                    lines[n] += states
                for s, d in zip(s_ts, d_ts):
                    lines[src].append(f"xfrm policy add src {s} dst {d} dir out {tmpls}")
                    for direction in ("in", "fwd"):
                        lines[dst].append(f"xfrm policy add src {s} dst {d} dir {direction} {tmpls}")
        for n in nodes:
            topo.write_file(n, "xfrm.batch", "\n".join(lines[n]) + "\n")

    def _states(self, src: str, dst: str, reqid: int) -> tuple[list[str], str]:
        """xfrm state lines with fresh keys, and the policy's template list (ESP applied first, AH outermost)."""
        mode = self.options.mode
        # A tunnel's outer header is IPv4 and it carries IPv6 too: without af-unspec the kernel drops an inner
        # packet of the other family (strongSwan sets the same flag on the SAs it installs).
        flag = " flag af-unspec" if mode == "tunnel" else ""
        states, tmpls = [], []
        if self.esp:
            c, i = self.cipher, self.integrity
            spi = f"0x{secrets.randbits(31) | 0x100:08x}"
            if c.aead:
                algo = f"aead {c.xfrm} 0x{secrets.token_hex(c.key)} 128"
            else:
                key = f"0x{secrets.token_hex(c.key)}" if c.key else '""'
                algo = f"enc {c.xfrm} {key} auth-trunc {i.xfrm} 0x{secrets.token_hex(i.key)} {i.icv * 8}"
            states.append(f"xfrm state add src {src} dst {dst} proto esp spi {spi} reqid {reqid} mode {mode} {algo}"
                          + flag)
            tmpls.append(f"tmpl src {src} dst {dst} proto esp reqid {reqid} mode {mode}")
        if self.ah:
            i = self.integrity
            ah_mode = "transport" if self.esp else mode  # AH over ESP: the ESP SA already tunnels
            spi = f"0x{secrets.randbits(31) | 0x100:08x}"
            states.append(f"xfrm state add src {src} dst {dst} proto ah spi {spi} reqid {reqid} mode {ah_mode} "
                          f"auth-trunc {i.xfrm} 0x{secrets.token_hex(i.key)} {i.icv * 8}"
                          + (flag if ah_mode == "tunnel" else ""))
            tmpls.append(f"tmpl src {src} dst {dst} proto ah reqid {reqid} mode {ah_mode}")
        return states, " ".join(tmpls)
