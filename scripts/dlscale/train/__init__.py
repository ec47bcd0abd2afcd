"""What runs inside a point: the driver and its run, the Keras/JAX choice, the strategies'
registry, the model, resume, the time limit, telemetry, the window's opening and closing;
each framework's own pieces in frameworks/, what the window measures in dlscale.measure."""
