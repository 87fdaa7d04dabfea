"""What the Live screen charts: the charts of its Rewards, Training and System tabs (title, metric keys, unit),
and the picking of the memory and penalty series a run has.
"""

from __future__ import annotations

from core.rewards import DIMENSIONS

# (title, keys, unit); a title of "penalties" is filled with the penalties that bit hardest.
REWARD_CHARTS = [("final reward", ["reward/final/mean"], ""), ("validation score", ["val/score/mean"], ""),
                 ("rubric score", ["reward/rubric/mean"], "")] + [
    (name.replace("_", " "), [f"reward/{name}/mean"], "") for name in DIMENSIONS] + [("penalties", [], "")]
TRAINING_CHARTS = [
    ("policy loss", ["actor/pg_loss"], ""),
    ("KL", ["actor/ppo_kl", "actor/kl_loss"], ""),
    ("entropy", ["actor/entropy"], "nats"),
    ("clip fraction", ["actor/pg_clipfrac"], ""),
    ("grad norm", ["actor/grad_norm"], ""),
    ("score mean/max/min", ["critic/score/mean", "critic/score/max", "critic/score/min"], ""),
    ("response length", ["response_length/mean", "response_length/max"], "tokens"),
    ("answers cut at max length", ["response_length/clip_ratio"], "share"),
    ("zero-variance groups", ["critic/score/zero_std_ratio"], "share"),
    ("learning rate", ["actor/lr"], ""),
]
DEVICE_MEMORY_KEYS = ("actor/perf/max_memory_allocated_gb", "actor/perf/max_memory_reserved_gb")
PROCESS_MEMORY_KEY = "perf/cpu_memory_used_gb"
HOST_MEMORY_KEYS = ("host/memory_used_gb", "host/memory_total_gb")
SYSTEM_CHARTS = [
    ("training memory", list(DEVICE_MEMORY_KEYS), "GB"),
    ("host memory", list(HOST_MEMORY_KEYS), "GB"),
    ("throughput", ["perf/throughput"], "tokens/s"),
    ("step time (step/gen/update)", ["timing_s/step", "timing_s/gen", "timing_s/update_actor"], "s"),
    ("GPU util", [], "%"),
]
CHART_TABS = {"tab-rewards": REWARD_CHARTS, "tab-training": TRAINING_CHARTS, "tab-system": SYSTEM_CHARTS}


def memory_keys(keys, *, device: bool = True) -> list[str]:
    """The training's memory (allocated/reserved, NVML used/total per GPU; without a GPU the process's resident
    memory) or the machine's (used, total): two charts, so a 0.5 GB line is not flattened against a 64 GB total."""
    keys = set(keys)
    if not device:
        return [k for k in HOST_MEMORY_KEYS if k in keys]
    chosen = [k for k in DEVICE_MEMORY_KEYS if k in keys]
    gpus = sorted({k.split("/")[1] for k in keys if k.startswith("gpu/") and k.endswith("/memory_used_gb")}, key=int)
    for index in gpus:
        chosen += [k for k in (f"gpu/{index}/memory_used_gb", f"gpu/{index}/memory_total_gb") if k in keys]
    if not gpus and PROCESS_MEMORY_KEY in keys:
        chosen.append(PROCESS_MEMORY_KEY)
    return chosen[:4]


def memory_label(key: str) -> str:
    """Short legend names: allocated, reserved, gpu0 used, gpu0 total, process, host used, host total."""
    names = {"actor/perf/max_memory_allocated_gb": "allocated", "actor/perf/max_memory_reserved_gb": "reserved",
             "perf/cpu_memory_used_gb": "process", "host/memory_used_gb": "host used",
             "host/memory_total_gb": "host total"}
    if key in names:
        return names[key]
    parts = key.split("/")  # gpu/<i>/memory_used_gb
    return f"gpu{parts[1]} {parts[2].removeprefix('memory_').removesuffix('_gb')}"


def penalty_keys(series) -> list[str]:
    """The four penalties that bit hardest so far (the rest stay at zero and would only add noise)."""
    known = {f"reward/{d}/mean" for d in DIMENSIONS} | {"reward/final/mean", "reward/rubric/mean"}
    names = [k for k in series if k.startswith("reward/") and k.endswith("/mean") and k not in known]
    peak = {k: max(series[k].finite_values(), default=0.0) for k in names}
    return sorted(names, key=lambda k: (-peak[k], k))[:4]
