"""The verl backend: verl 0.9.1's own PPO/GRPO trainer (Ray, vLLM rollouts, FSDP) fed by this project's config.

compose (config), data (parquet), reward_fn (reward adapter), extension (per-dimension metrics), launch, detect.
"""
