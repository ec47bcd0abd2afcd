"""Why it scales, the measuring side inside a point: the profiled window (TensorFlow's and
JAX's profiler, torch.profiler, Horovod's timeline) and its trace read as events, the split
of the traced steps into covered parts, the all-reduce timed alone, xprof's cross-check.
The run opens and closes the window (dlscale.train.window); the reporting side reads what
it wrote (breakdown.json) and the step split's names. Nothing here imports the run."""
