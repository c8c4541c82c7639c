"""Co-training itself: the step (``engine.cotrain_step``), the protocols the papers compare, and the
per-step health checks."""
