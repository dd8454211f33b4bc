"""Idle CPUs that poll while a campaign runs (`cpu_idle: poll`, the default): a PM QoS request of 0 µs wakeup
latency on /dev/cpu_dma_latency, held by the run's own process for as long as it measures, so the kernel's cpuidle
picks its polling state and a vCPU never halts between packets. The kernel drops the request when the file is
closed, by the run or by its death (kill -9 included): nothing is left to clean.

Why: on this machine (a VM whose idle vCPUs halt through cpuidle-haltpoll) a User-Mode Linux guest's one-stream TCP
(bench/wakeup.py, 6 trials a campaign, os and poll alternated) ran at 4.5-5.0 Gbit/s with the machine's own idle
policy and 9.3-12.3 with the request held in one run; in an earlier pair the same scenario went from 2.0-3.2 Gbit/s
at CV 39-45 % to 9.0-10.7 at CV 4-7 %; in a third run, an hour later, both modes gave 11.8-14.4 (CV 9-17 %): how much
a halted vCPU's wake-up costs depends on what else the VM's host runs, and the request takes that dependence away
(in a card before it, a guest ran 2-3x faster whenever other work kept the CPUs busy). Each wake-up of a halted
vCPU goes through the host's scheduler; a guest, many processes passing packets by sleeping and waking, pays it
per packet. The field's tuning does the same (tuned's latency-performance profile; VSPERF and CSIT
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
