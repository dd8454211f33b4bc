"""What a reader needs to trust or reproduce a figure, recorded once per campaign."""
from __future__ import annotations

import os
import platform
import socket
import time
from importlib.metadata import version

from .capabilities import Capabilities
from .executor import LocalExecutor
from .probes.procstat import steal_ratio_now


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def capture(caps: Capabilities) -> dict:
    uname = platform.uname()
    return {
        "hostname": socket.gethostname(),
        "kernel": f"{uname.system} {uname.release} {uname.version}",
        "machine": uname.machine,
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "load_average": os.getloadavg(),
        "cpu_steal_ratio_at_start": round(steal_ratio_now(LocalExecutor()), 4),
        "python": platform.python_version(),
        "vnetbench": version("vnetbench"),
        "tools": {k: v.detail for k, v in caps.tools.items() if v.ok},
        "kernel_features": {k: v.ok for k, v in caps.kernel.items()},
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
