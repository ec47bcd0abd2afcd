"""Each framework's own pieces, one folder each: tensorflow (TensorFlow's strategies under
Keras 2, the custom loop), keras3 (what differs under Keras 3, its JAX backend), torch
(DistributedDataParallel, its loop), horovod (its backend); `backend` the base they share,
`handloop` the hand-written loops' epochs. A framework imports the run's shared modules,
the base and dlscale.measure, never another framework's folder (a test says so). Adding
one: docs/development.md, "A backend (strategy)"."""
