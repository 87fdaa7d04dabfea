"""The metrics of one training step, named as verl names them: scores, rewards, advantages, lengths and memory.

`compute_data_metrics` reads a scored batch (`critic/*`, `response_length/*`, `prompt_length/*`, `reward/*`);
`zero_std_groups` counts the groups that teach nothing; `compute_memory_metrics` the device's peak memory and the
host figures of `sysmon`.
"""

from __future__ import annotations

import resource

from core.training.batch import Batch


def compute_data_metrics(batch: Batch, token_rewards, advantages, max_response_length: int) -> dict[str, float]:
    """verl's `compute_data_metrics` for a GRPO batch, plus `reward/<dimension>/mean` from the breakdowns."""
    from core.rewards import DIMENSIONS, PENALTIES
    from core.rewards.pool import reward_means
    from core.training.core_algos import masked_mean

    mask = batch.response_mask
    lengths = mask.sum(-1)
    scores = batch.scores
    seq_rewards = token_rewards.sum(-1)
    valid_adv = advantages[mask.bool()]
    out = {
        "critic/score/mean": scores.mean().item(),
        "critic/score/max": scores.max().item(),
        "critic/score/min": scores.min().item(),
        "critic/rewards/mean": seq_rewards.mean().item(),
        "critic/rewards/max": seq_rewards.max().item(),
        "critic/rewards/min": seq_rewards.min().item(),
        "critic/advantages/mean": masked_mean(advantages, mask).item(),
        "critic/advantages/max": valid_adv.max().item() if valid_adv.numel() else 0.0,
        "critic/advantages/min": valid_adv.min().item() if valid_adv.numel() else 0.0,
        "response_length/mean": lengths.mean().item(),
        "response_length/max": lengths.max().item(),
        "response_length/min": lengths.min().item(),
        "response_length/clip_ratio": (lengths >= max_response_length).float().mean().item(),
        "prompt_length/mean": sum(batch.prompt_lengths) / len(batch.prompt_lengths),
        "prompt_length/max": float(max(batch.prompt_lengths)),
    }
    out.update(reward_means(batch.breakdowns, DIMENSIONS, PENALTIES))
    return out


def zero_std_groups(scores, n: int) -> tuple[int, int]:
    """(groups, groups whose n rewards are all equal) of a batch laid out group by group; such a group has zero
    advantage everywhere and teaches nothing (`critic/score/zero_std_ratio` = the second over the first)."""
    if n < 2 or scores is None or scores.numel() < n:
        return 0, 0
    grouped = scores[: scores.numel() // n * n].view(-1, n)
    flat = (grouped.max(dim=1).values - grouped.min(dim=1).values) == 0
    return int(grouped.shape[0]), int(flat.sum())


def sequence_advantages(advantages, mask) -> list[float]:
    """Each answer's advantage (the masked mean over its tokens: GRPO gives every token the same one)."""
    counts = mask.sum(-1).clamp(min=1)
    return ((advantages * mask).sum(-1) / counts).tolist()


def _peak_rss_gb() -> float:
    # ru_maxrss is KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def compute_memory_metrics(device) -> dict[str, float]:
    """Peak device memory (`actor/perf/max_memory_*_gb`; on CPU the process's peak resident set) and host memory."""
    import torch

    from core.training import sysmon

    out = dict(sysmon.sample())
    if device.type == "cuda":
        out["actor/perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated(device) / 1024**3
        out["actor/perf/max_memory_reserved_gb"] = torch.cuda.max_memory_reserved(device) / 1024**3
    else:  # on CPU the device memory is the process's: its peak resident set
        out["actor/perf/max_memory_allocated_gb"] = _peak_rss_gb()
        out["actor/perf/max_memory_reserved_gb"] = _peak_rss_gb()
    if "perf/cpu_memory_used_gb" not in out:
        import psutil

        out["perf/cpu_memory_used_gb"] = psutil.Process().memory_info().rss / 1024**3
    return out
