"""dlscale: shared logic for the workflow's scripts (data, training records, analysis)."""
