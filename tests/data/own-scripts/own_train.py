"""A small PyTorch DDP training that prints its progress as users' own scripts do, in one
of six styles (no framework's logger, no progress bar):

  torchrun --nproc-per-node 2 own_train.py --style logging|took|fsdp|deepspeed|total|horovod

- logging: Python `logging` lines only, on every rank: `INFO Epoch 0` when an epoch
  begins, `Validation loss: ... accuracy: ...` after it (the epoch's time is the gap
  between timestamps);
- total: Python `logging` lines on every rank, `Starting run` (then a set-up of 20 x
  --slow seconds), `Epoch 0` as the epoch begins and, at the end, each rank's run total
  `Train samples 2048 time 2.345s rate 873.3 samples/s`: one epoch, timed by its total;
- took: rank 0 prints `Epoch 1 took: 1.23s loss=0.5123 acc=11.2%` after each epoch, and
  `Total training time: ...` / `Average time per epoch: ...` at the end;
- fsdp: the PyTorch FSDP tutorial's prints (`Train Epoch: 1 \tLoss: 0.211924`, `Test set:
  Average loss: ..., Accuracy: 62/512 (12.11%)`, `CUDA event elapsed time: 7.0sec`),
  the model wrapped in FullyShardedDataParallel where this torch can on CPU, else DDP;
- horovod: Horovod's synthetic benchmark's words (`Model:`, `Batch size:`, `Number of
  CPUs:`, `Iter #0: 6.6 img/sec per CPU` each epoch, `Img/sec per CPU: 6.8 +-0.3`, `Total
  img/sec on 2 CPU(s): 13.6 +-0.7`) on every rank, as a copy of its `log()` without the
  rank-0 guard prints them: each rank's own figures, times the ranks for the total;
- deepspeed: DeepSpeed-Chat's words (`Beginning of Epoch 1/3, Total Micro Batches 8`,
  `***** Evaluating perplexity, Epoch 1/3 *****`, `ppl: 9.97, loss: 2.30`) beside
  DeepSpeed's logger lines (`[2026-12-02 01:02:03,456] [INFO] [...] step=8, ...`).

Random MNIST-shaped data (nothing downloaded), gloo on CPU processes.
"""

import argparse
import logging
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def model():
    return torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, 2), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(8 * 13 * 13, 10))


def wrap(net, style):
    if style == "fsdp":
        try:
            from torch.distributed.fsdp import FullyShardedDataParallel
            return FullyShardedDataParallel(net, device_id=torch.device("cpu")), "FSDP"
        except Exception as exc:  # noqa: BLE001
            print(f"FSDP on CPU not available ({type(exc).__name__}): DDP instead", flush=True)
    return DistributedDataParallel(net), "DDP"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--style", choices=["logging", "took", "fsdp", "deepspeed", "total",
                                                "horovod"])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--slow", type=float, default=0.0, help="seconds to sleep a step")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    images, labels = data(4096, 0)
    held_images, held_labels = data(512, 1)
    mine = slice(rank, None, world)
    images, labels = images[mine], labels[mine]
    net, kind = wrap(model(), args.style)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    batches = math.ceil(len(images) / args.batch_size)
    log = logging.getLogger("train")
    if args.style in ("logging", "total"):
        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(message)s")
    if args.style == "total":
        log.info("Starting run: %d ranks, %d samples", world, len(images) * world)
        time.sleep(args.slow * 20)  # the set-up a real job spends before its first epoch
    elif args.style == "deepspeed":
        logging.basicConfig(level=logging.INFO, format="[%(asctime)s] [%(levelname)s] "
                            "[%(filename)s:%(lineno)d:%(funcName)s] %(message)s")
    say = print if rank == 0 else (lambda *a, **k: None)
    if args.style == "horovod":
        for line in ("Model: SmallCNN", f"Batch size: {args.batch_size}",
                     f"Number of CPUs: {world}", "Running warmup...", "Running benchmark..."):
            print(line, flush=True)
    rates = []
    if args.style == "deepspeed" and rank == 0:
        log.info(f"[Rank 0] {kind} ready, world_size={world}, micro batch {args.batch_size}")
    start = time.perf_counter()
    for epoch in range(args.epochs):
        began = time.perf_counter()
        if args.style in ("logging", "total"):
            log.info("Epoch %d", epoch)
        elif args.style == "deepspeed":
            say(f"Beginning of Epoch {epoch + 1}/{args.epochs}, Total Micro Batches "
                f"{batches}", flush=True)
        net.train()
        total = 0.0
        for step in range(batches):
            x = images[step * args.batch_size:(step + 1) * args.batch_size]
            y = labels[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
            time.sleep(args.slow)
            if args.style == "deepspeed" and rank == 0 and (step + 1) % 4 == 0:
                log.info(f"[Rank 0] step={epoch * batches + step + 1}, skipped=0, "
                         "lr=[0.01], mom=[0.0]")
        net.eval()
        with torch.no_grad():
            out = net(held_images)
            held_loss = F.cross_entropy(out, held_labels).item()
            correct = int((out.argmax(1) == held_labels).sum())
        train_loss = total / batches
        if args.style == "horovod":
            rates.append(len(images) / (time.perf_counter() - began))
            print(f"Iter #{epoch}: {rates[-1]:.1f} img/sec per CPU", flush=True)
        if args.style == "logging":
            log.info("Validation loss: %.4f accuracy: %.4f", held_loss, correct / 512)
        elif args.style == "took":
            say(f"Epoch {epoch + 1} took: {time.perf_counter() - began:.2f}s "
                f"loss={train_loss:.4f} acc={100 * correct / 512:.1f}%", flush=True)
        elif args.style == "fsdp":
            say('Train Epoch: {} \tLoss: {:.6f}'.format(epoch + 1, train_loss), flush=True)
            say('Test set: Average loss: {:.4f}, Accuracy: {}/{} ({:.2f}%)\n'.format(
                held_loss, correct, 512, 100. * correct / 512), flush=True)
        elif args.style == "deepspeed":
            say(f"***** Evaluating perplexity, Epoch {epoch + 1}/{args.epochs} *****",
                flush=True)
            say(f"ppl: {math.exp(held_loss)}, loss: {held_loss}", flush=True)
    seconds = time.perf_counter() - start
    if args.style == "total":  # every rank its own total: its samples, time and rate
        log.info("Train samples %d time %.3fs rate %.4f samples/s", len(images) * args.epochs,
                 seconds, len(images) * args.epochs / seconds)
    if args.style == "took":
        say(f"Total training time: {seconds:.2f} s", flush=True)
        say(f"Average time per epoch: {seconds / args.epochs:.2f}s", flush=True)
    elif args.style == "fsdp":
        say(f"CUDA event elapsed time: {seconds}sec", flush=True)  # (perf_counter on CPU)
        say(f"{net}", flush=True)
    elif args.style == "deepspeed" and rank == 0:
        log.info(f"{kind} training done, world_size={world}")
    elif args.style == "horovod":
        mean = sum(rates) / len(rates)
        conf = 1.96 * math.sqrt(sum((r - mean) ** 2 for r in rates) / len(rates))
        print(f"Img/sec per CPU: {mean:.1f} +-{conf:.1f}", flush=True)
        print(f"Total img/sec on {world} CPU(s): {world * mean:.1f} +-{world * conf:.1f}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
