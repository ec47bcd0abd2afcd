"""Keras 3 on TensorFlow and JAX: what differs under Keras 3, JAX's backend (DataParallel)."""
