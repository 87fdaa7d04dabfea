"""The DevOps task set (tasks/data/*.yaml) and its loader."""
