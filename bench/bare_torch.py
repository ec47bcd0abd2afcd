#!/usr/bin/env python3
"""A bare PyTorch DDP script, the kind users write after keras-team/keras'
examples/demo_torch_multi_gpu.py: a Keras 3 model on the torch backend wrapped in
DistributedDataParallel, torch's SGD, each rank its slice of a seeded permutation of the
images every epoch, a timer per epoch. It does not import dlscale. Started by torchrun;
rank 0 prints one JSON line at the end: the epochs' seconds, the loop's seconds.

  torchrun --nproc-per-node 2 bench/bare_torch.py --arrays train.npz --batch-size 64 \\
      --epochs 4
"""

import argparse
import json
import os
import time

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402


def simple_cnn(classes: int) -> keras.Model:
    """dlscale's SimpleCNN: uint8 in, scaled, two 5x5 convolution + max-pool blocks."""
    inputs = keras.Input(shape=(32, 32, 3), dtype="uint8")
    x = keras.layers.Rescaling(1.0 / 255)(inputs)
    for filters in (32, 64):
        x = keras.layers.Conv2D(filters, 5, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
    logits = keras.layers.Dense(classes)(keras.layers.Flatten()(x))
    return keras.Model(inputs, keras.layers.Activation("softmax")(logits))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arrays", required=True, help="an .npz of x (uint8 NHWC) and y")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    world = int(os.environ.get("WORLD_SIZE", 1))
    rank = int(os.environ.get("RANK", 0))
    if world > 1:
        dist.init_process_group("gloo")
    keras.utils.set_random_seed(42)
    arrays = np.load(args.arrays)
    x, y = arrays["x"], arrays["y"].astype(np.int64)
    model = simple_cnn(10)
    replica = DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad],
                                lr=args.lr * world)
    loss_of = keras.losses.SparseCategoricalCrossentropy()
    steps = len(x) // (args.batch_size * world)
    seconds = []
    start = time.perf_counter()
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        mine = np.random.default_rng(epoch).permutation(len(x))[rank::world]
        for step in range(steps):
            take = np.sort(mine[step * args.batch_size:(step + 1) * args.batch_size])
            images, labels = torch.from_numpy(x[take]), torch.from_numpy(y[take])
            optimizer.zero_grad(set_to_none=True)
            loss = loss_of(labels, replica(images, training=True))
            loss.backward()
            optimizer.step()
        seconds.append(time.perf_counter() - t0)
        if rank == 0:
            print(f"epoch {epoch + 1}: {seconds[-1]:.3f} s, loss {float(loss):.4f}", flush=True)
    if rank == 0:
        print(json.dumps({"epochs": seconds, "fit_s": time.perf_counter() - start}))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
