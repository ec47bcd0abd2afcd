"""A jax.distributed hello world, as users run one to check an allocation before they
train: each task joins the job (jax.distributed finds SLURM's variables itself), prints
what it sees, and leaves. It trains nothing."""

import jax

jax.distributed.initialize()
print(f"process {jax.process_index()} of {jax.process_count()}: "
      f"{jax.local_device_count()} local device(s), {jax.device_count()} in all")
print(f"devices: {jax.devices()}")
jax.distributed.shutdown()
