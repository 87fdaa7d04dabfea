"""GPU and host memory figures under verl-style metric names, from NVML when present and psutil always.

Without NVML (no driver, no GPU, no nvidia-ml-py) `sample()` quietly returns the host figures only.
"""

from __future__ import annotations

import functools
import logging

log = logging.getLogger(__name__)

GIB = 1024**3


@functools.lru_cache(maxsize=1)
def _nvml():
    """The initialised pynvml module, or None when NVML cannot be used here (checked once per process)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        log.debug("NVML unavailable: %s", exc)
        return None


def gpu_count() -> int:
    """GPUs NVML can see (0 without NVML)."""
    nvml = _nvml()
    if nvml is None:
        return 0
    try:
        return int(nvml.nvmlDeviceGetCount())
    except Exception:
        return 0


def gpu_memory_total_gb() -> list[float]:
    """Total memory of each GPU in GiB ([] without NVML)."""
    nvml = _nvml()
    totals = []
    for index in range(gpu_count()):
        try:
            totals.append(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(index)).total / GIB)
        except Exception as exc:
            log.debug("NVML memory of GPU %d: %s", index, exc)
    return totals


def sample() -> dict[str, float]:
    """Host memory (`perf/cpu_memory_used_gb`, `host/memory_*`) and per GPU `gpu/<i>/memory_used_gb`,
    `gpu/<i>/memory_total_gb`, `gpu/<i>/util` (percent), `gpu/<i>/temperature_c`, `gpu/<i>/power_w`."""
    import psutil

    out: dict[str, float] = {}
    vm = psutil.virtual_memory()
    out["host/memory_used_gb"] = (vm.total - vm.available) / GIB
    out["host/memory_total_gb"] = vm.total / GIB
    out["host/cpu_percent"] = float(psutil.cpu_percent(interval=None))
    out["perf/cpu_memory_used_gb"] = psutil.Process().memory_info().rss / GIB
    nvml = _nvml()
    for index in range(gpu_count()):
        prefix = f"gpu/{index}/"
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            out[prefix + "memory_used_gb"] = memory.used / GIB
            out[prefix + "memory_total_gb"] = memory.total / GIB
            out[prefix + "util"] = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception as exc:
            log.debug("NVML GPU %d: %s", index, exc)
            continue
        for key, read in (("temperature_c", lambda h: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
                          ("power_w", lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0)):
            try:
                out[prefix + key] = float(read(handle))
            except Exception:  # not every board reports these (MIG slices, some datacentre parts)
                pass
    return out
