"""What runs inside a point: the driver and its run, the Keras/JAX choice, backends and
strategies, the model, resume, the time limit, telemetry, the profiled window and its
step split."""
