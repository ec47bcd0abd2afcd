"""What a study says: per-run and aggregate tables, the scaling fit, plots, the report's
first page, why it scales, the history, comparisons and `dlscale status`."""
