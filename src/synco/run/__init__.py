"""A training run: its directory, setup and resume, the loop with its step hooks, checkpoints, summary."""
