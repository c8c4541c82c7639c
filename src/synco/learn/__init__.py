"""The learner: GRPO and supervised losses, the transformers policy, mixed precision, the shared base,
FSDP sharding, model presets, building a policy from its config, the tiny models' warm start."""
