"""The gradient's all-reduce timed alone on a point's replicas, as nccl-tests times it:
a warm-up group awaited, then calls issued back to back and awaited once, nothing brought
to the host but one number per replica; six sizes from 4 KiB to the gradient's bytes.
breakdown.json keeps the timings (dlscale.measure.profwindow); the prediction fits each
level's latency and bandwidth on them (dlscale.reporting.explain).
"""

from __future__ import annotations

import time

BENCH_REPEATS = 3  # groups of BENCH_ITERS all-reduces timed per buffer size; the median kept
BENCH_ITERS = 4  # all-reduces timed together, back to back, awaited once (as nccl-tests)
BENCH_SIZES = 6  # buffer sizes from BENCH_SMALLEST to the gradient's bytes
BENCH_SMALLEST = 4096


def bench_sizes(largest: int) -> list[int]:
    """BENCH_SIZES buffer sizes in bytes, geometric from BENCH_SMALLEST to `largest`."""
    if largest <= BENCH_SMALLEST:
        return [max(4, largest - largest % 4)]
    ratio = (largest / BENCH_SMALLEST) ** (1 / (BENCH_SIZES - 1))
    return sorted({int(BENCH_SMALLEST * ratio ** i) // 4 * 4 for i in range(BENCH_SIZES)})


def time_allreduce(backend, sizes: list[int], enough=None) -> list[float]:
    """Seconds of one all-reduce (sum) of each size's float32 buffer over the point's
    replicas, through the strategy the training used, timed as nccl-tests times it: a
    warm-up group awaited, then BENCH_ITERS all-reduces issued back to back and awaited
    once at their end (per call, the median of BENCH_REPEATS such groups), nothing brought
    to the host but one number per replica. Every worker takes part. `enough(seconds)`:
    the sizes after the first it says True of are not timed (every worker must get the
    same answer)."""
    import statistics

    prepare = allreduce_runner(backend)
    out = []
    for size in sizes:
        go = prepare(size // 4)
        go(BENCH_ITERS)  # the warm-up: compiled or traced for this size, and done
        times = []
        for _ in range(BENCH_REPEATS):
            t0 = time.perf_counter()
            go(BENCH_ITERS)
            times.append((time.perf_counter() - t0) / BENCH_ITERS)
        out.append(round(statistics.median(times), 7))
        if enough is not None and enough(out[-1]):
            break
    return out


def record(sizes: list[int], seconds: list[float], started: float) -> dict:
    """breakdown.json's (and the probe's) record of the sizes timed since `started`."""
    return {"op": "all-reduce", "dtype": "float32", "bytes": sizes[:len(seconds)],
            "seconds": seconds, "repeats": BENCH_REPEATS,
            "took_s": round(time.perf_counter() - started, 3)}


def allreduce_runner(backend):
    """prepare(n) -> go(iters): `iters` all-reduces of n float32 per replica, waited for."""
    if backend.kind == "dataparallel":
        import jax
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        devices = backend.jax_devices
        mesh = Mesh(np.array(devices), ("d",))
        reduce = jax.jit(jax.shard_map(lambda x: jax.lax.psum(x, "d"), mesh=mesh,
                                       in_specs=PartitionSpec("d"),
                                       out_specs=PartitionSpec()))

        def prepare(n):
            x = jax.device_put(np.ones(n * len(devices), np.float32),
                               NamedSharding(mesh, PartitionSpec("d")))
            return lambda iters: jax.block_until_ready([reduce(x) for _ in range(iters)])
        return prepare
    if backend.kind == "ddp":  # torch.distributed: issued back to back, awaited at the end
        import torch
        import torch.distributed as dist

        def prepare(n):
            x = torch.ones(n, device=backend.torch_device)

            def go(iters):
                for work in [dist.all_reduce(x, async_op=True) for _ in range(iters)]:
                    work.wait()
                return float(x[0])  # on the host: the device's work is done
            return go
        return prepare
    import tensorflow as tf

    def one_number(values):  # waits for each replica's result, copies one float of each
        return [float(tf.reduce_sum(v[:1])) for v in values]

    if backend.kind == "horovod":
        hvd = backend.hvd

        def prepare(n):
            def go(iters):
                y = tf.ones([n])
                for _ in range(iters):  # each call on the last one's result
                    y = hvd.allreduce(y, op=hvd.Sum)
                return one_number([y])
            return go
        return prepare
    strategy = backend.strategy
    chained = {}

    def prepare(n):
        value = strategy.experimental_distribute_values_from_function(lambda _: tf.ones([n]))

        def go(iters):
            if iters not in chained:  # one graph per count: no Python between the calls;
                # reduce_retracing: after the second size, one graph of any length
                @tf.function(autograph=False, reduce_retracing=True)
                def many(v, iters=iters):
                    out = []
                    for _ in range(iters):  # each after the last one, in order
                        with tf.control_dependencies(out):
                            total = strategy.extended.reduce_to(
                                tf.distribute.ReduceOp.SUM, v, v)
                        out = list(strategy.experimental_local_results(total))
                    return out
                chained[iters] = many
            return one_number(chained[iters](value))
        return go
    return prepare


def measure_collective(backend, size: int) -> dict | None:
    """The all-reduce's median seconds per buffer size, up to the gradient's `size`, on
    the point's replicas, or None on one replica. Every worker calls it (a collective)."""
    if backend.replicas < 2:
        return None
    sizes = bench_sizes(size)
    t0 = time.perf_counter()
    try:
        seconds = time_allreduce(backend, sizes)
    except Exception as exc:  # noqa: BLE001 - never a failed point
        return {"error": f"{type(exc).__name__}: {str(exc).strip()[:200]}"}
    return record(sizes, seconds, t0)
