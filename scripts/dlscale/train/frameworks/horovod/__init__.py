"""Horovod (horovod.tensorflow.keras) as a backend."""
