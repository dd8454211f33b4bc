"""cpu_idle: poll holds a 0 us PM QoS request while the run measures, and the kernel drops it with the run."""
from __future__ import annotations

import os
import struct

import pytest

from vnetbench.system import wakeup


def current() -> int:
    with open(wakeup.DEVICE, "rb") as fh:
        return struct.unpack("i", fh.read(4))[0]


@pytest.mark.skipif(not os.path.exists(wakeup.DEVICE), reason="no /dev/cpu_dma_latency")
def test_the_request_holds_while_the_run_measures_and_goes_with_it():
    before = current()
    with wakeup.Wakeup("poll") as held:
        assert current() == 0 and held.state.startswith("poll (a 0 us PM QoS request")
    assert current() == before
    with wakeup.Wakeup("os") as left:
        assert current() == before and left.state.startswith("os")


def test_a_device_that_refuses_is_said_and_nothing_is_held(tmp_path):
    with wakeup.Wakeup("poll", device=str(tmp_path / "none")) as idle:
        assert idle.fd is None and idle.state.startswith("os: ") and "refused the request" in idle.state
