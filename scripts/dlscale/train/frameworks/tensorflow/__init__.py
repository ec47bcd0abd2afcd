"""TensorFlow/Keras 2: MirroredStrategy and MultiWorkerMirroredStrategy, the custom loop."""
