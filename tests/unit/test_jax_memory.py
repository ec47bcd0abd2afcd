"""JAX saying that memory ran out is an out_of_memory ending, like TensorFlow's
ResourceExhaustedError (issue 44): the error is JAX's own, provoked on the CPU."""

from __future__ import annotations

import pytest

from dlscale.train.frameworks.keras3.keras3 import out_of_memory


def test_jaxs_own_out_of_memory_error_is_recognised_and_others_are_not():
    import jax.numpy as jnp  # here, not at collection: every pytest worker collects it

    with pytest.raises(Exception) as raised:  # 16 TiB: more than any host has
        jnp.ones((1 << 42,), dtype="float32").block_until_ready()
    assert "RESOURCE_EXHAUSTED" in str(raised.value)
    assert out_of_memory(raised.value)
    with pytest.raises(Exception) as other:
        jnp.ones((2, 3)) @ jnp.ones((4, 5))
    assert not out_of_memory(other.value)
    assert not out_of_memory(MemoryError("RESOURCE_EXHAUSTED"))
