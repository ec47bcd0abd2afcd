"""What more GPUs and nodes would give: the links, the model of a series' step, its check on
the held-out point."""
