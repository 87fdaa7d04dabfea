"""Training: the config model and presets, the run directory, the GRPO maths and the two backends."""
