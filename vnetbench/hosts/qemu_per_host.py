"""`kernel: qemu`: each emulated host is a qemu guest (guests/qemu.py: Debian's cloud kernel), a compute node with a
kernel of its own; its VMs are namespaces inside it. Built as `kernel: guest-per-host` builds its UML host guests
(guests/hostsite.py), with the qemu kind: what the scenario may run is what the cloud kernel offers as the guest probe
found it (kernel WireGuard, OVS's kernel datapath, geneve, gre, xfrm), and its rows carry the kind's notes (under TCG
an emulated CPU's timing)."""
from __future__ import annotations

from ..guests import probe as guest_probe
from . import register
from .guest_per_host import GuestPerHost


@register
class QemuPerHost(GuestPerHost):
    """One qemu guest per emulated host."""

    name = "qemu"
    kernel = "qemu"
    kind = "qemu"

    @classmethod
    def info(cls) -> dict:
        return guest_probe.kept_info(cls.kind)  # doctor does not boot a qemu guest (30-55 s) to probe it
