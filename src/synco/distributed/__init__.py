"""Training past one process: sharded learners (FSDP2). Imported only when asked for."""
