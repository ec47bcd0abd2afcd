"""PyTorch (Keras 3 on torch): DistributedDataParallel as a backend, its training loop."""
