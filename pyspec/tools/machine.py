"""What this machine is, in the shape pytest-benchmark records it (``machine_info.cpu``):
the README's generated sections say when and on what every figure was measured, whether it
came from a benchmark, a build or a test run."""

from __future__ import annotations

import datetime
import os


def machine_info() -> dict:
    """{"cpu": {"brand_raw", "count", "flags", and "family" and "model" where the kernel
    lists them}} from /proc/cpuinfo (Linux; partial elsewhere). A VM's bare "AMD EPYC" has
    been three generations here: the family and model tell them apart."""
    cpu = {"brand_raw": "an unknown CPU", "count": os.cpu_count() or 1, "flags": []}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and cpu["brand_raw"] == "an unknown CPU":
                    cpu["brand_raw"] = value.strip()
                elif key == "flags" and not cpu["flags"]:
                    cpu["flags"] = value.split()
                elif key in ("cpu family", "model") and value.strip().isdigit():
                    # the first CPU's, as pytest-benchmark's py-cpuinfo records them
                    cpu.setdefault("family" if key == "cpu family" else "model", int(value))
    except OSError:
        pass
    return {"cpu": cpu}


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
