"""The run engine: one `fit` that gives any Task every guarantee (backups, run dir, progress, export)."""
