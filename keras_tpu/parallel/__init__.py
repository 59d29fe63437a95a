"""Model parallelism (weights split on a DTensor mesh) and the memory planner."""
