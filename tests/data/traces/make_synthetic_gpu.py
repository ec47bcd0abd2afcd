#!/usr/bin/env python3
"""Writes synthetic-gpu-2x-nccl.xplane.pb: a SYNTHETIC trace, made here, not captured.

No GPU was at hand when dlscale's step split was written, so its GPU rules are pinned on
an XSpace built with the profilers' own proto classes (TensorFlow's copy of xprof's
`xplane.proto`), laid out as xprof's GPU traces are: a `/host:CPU` plane whose `python`
line holds the step markers (`train` with `step_num`), and per GPU a `/device:GPU:N`
plane with an `XLA Modules` line (the whole compiled step: not an operation), an `XLA Ops`
line and a `Stream #N(...)` line of kernels, among them NCCL's
(`ncclDevKernel_AllReduce_Sum_f32_RING_LL`). Two steps of 10 ms each; per step and GPU:
compute kernels 0-6 ms, an NCCL all-reduce 5-8 ms (1 ms of it under compute), the host
waiting for the next batch 9.5-10 ms (`IteratorGetNext` on a `tf_data` line).

  python tests/data/traces/make_synthetic_gpu.py   # rewrites the file beside it
"""

from pathlib import Path

from tensorflow.tsl.profiler.protobuf import xplane_pb2

MS = 1_000_000_000  # picoseconds per millisecond
STEP_MS = 10


def plane(space, pid, name):
    p = space.planes.add(id=pid, name=name)
    p.stat_metadata[1].id, p.stat_metadata[1].name = 1, "step_num"
    return p


def event(p, line, name, start_ms, end_ms, step=None):
    mid = next((k for k, m in p.event_metadata.items() if m.name == name),
               len(p.event_metadata) + 1)
    p.event_metadata[mid].id, p.event_metadata[mid].name = mid, name
    e = line.events.add(metadata_id=mid, offset_ps=int(start_ms * MS),
                        duration_ps=int((end_ms - start_ms) * MS))
    if step is not None:
        e.stats.add(metadata_id=1, int64_value=step)


def main():
    space = xplane_pb2.XSpace()
    host = plane(space, 1, "/host:CPU")
    python = host.lines.add(id=1, name="python", timestamp_ns=1_000_000)
    data = host.lines.add(id=2, name="tf_data_iterator_get_next/7", timestamp_ns=1_000_000)
    gpus = []
    for n in range(2):
        g = plane(space, 10 + n, f"/device:GPU:{n}")
        gpus.append((g, g.lines.add(id=1, name="XLA Modules", timestamp_ns=1_000_000),
                     g.lines.add(id=2, name="XLA Ops", timestamp_ns=1_000_000),
                     g.lines.add(id=3, name="Stream #13(Compute)", timestamp_ns=1_000_000)))
    for step in (4, 5):
        t = (step - 4) * STEP_MS
        event(host, python, "train", t, t + STEP_MS, step)
        event(host, data, "IteratorGetNextOp::DoCompute", t + 9.5, t + 10)
        for g, modules, ops, stream in gpus:
            event(g, modules, "jit_train_step", t, t + 9)
            event(g, ops, "fusion.12", t, t + 3)
            event(g, ops, "convolution.4", t + 3, t + 6)
            event(g, stream, "loop_fusion_kernel", t, t + 3)
            event(g, stream, "sm90_xmma_fprop_implicit_gemm", t + 3, t + 6)
            event(g, ops, "all-reduce-start.1", t + 5, t + 8)
            event(g, stream, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 5, t + 8)
    out = Path(__file__).with_name("synthetic-gpu-2x-nccl.xplane.pb")
    out.write_bytes(space.SerializeToString())
    print(out)


if __name__ == "__main__":
    main()
