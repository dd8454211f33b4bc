"""Idle CPUs that poll while a campaign runs (`cpu_idle: poll`, the default): a PM QoS request of 0 µs wakeup
latency on /dev/cpu_dma_latency, held by the run's own process for as long as it measures, so the kernel's cpuidle
picks its polling state and a vCPU never halts between packets. The kernel drops the request when the file is
closed, by the run or by its death (kill -9 included): nothing is left to clean.

Why: on this machine (a VM whose idle vCPUs halt through cpuidle-haltpoll) a User-Mode Linux guest's one-stream TCP
(bench/wakeup.py, 6 trials a campaign) ran at 4.5-5.0 Gbit/s (CV 7-8 %) with the machine's own idle policy and at
9.3-12.3 (CV 8-13 %) with the request held; in an earlier pair of runs the same scenario went from 2.0-3.2 Gbit/s at
CV 39-45 % to 9.0-10.7 at CV 4-7 %, and in a card a machine whose CPUs other work kept busy ran its guest 2-3x faster
than an idle one. Each wake-up of a halted vCPU goes through the host's scheduler; a guest, many processes passing
packets by sleeping and waking, pays it per packet, and how much depends on what else the host runs. The field's tuning does the same (tuned's latency-performance profile; VSPERF and CSIT
hosts boot with deep C-states off). `cpu_idle: os` leaves the machine's idle policy alone. Testbed hosts over SSH
are not changed: the request is this machine's only, and the environment record says which it was."""
from __future__ import annotations

import os
import struct

DEVICE = "/dev/cpu_dma_latency"


class Wakeup:
    """A context manager holding the request (mode 'poll') or nothing (mode 'os'); `state` says what held."""

    def __init__(self, mode: str = "poll", device: str = DEVICE):
        self.mode, self.device, self.fd = mode, device, None
        self.state = "os (the machine's idle policy)"

    def __enter__(self) -> "Wakeup":
        if self.mode != "poll":
            return self
        try:
            self.fd = os.open(self.device, os.O_WRONLY | os.O_CLOEXEC)
            os.write(self.fd, struct.pack("i", 0))
            self.state = f"poll (a 0 us PM QoS request on {self.device}, held by the run)"
        except OSError as exc:
            self.close()
            self.state = f"os: {self.device} refused the request ({exc.strerror or exc})"
        return self

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __exit__(self, *exc) -> None:
        self.close()
