"""A training script in the style of PyTorch's own examples (pytorch/examples'
mnist/main.py, with DistributedDataParallel as its DDP tutorial adds it): `Train Epoch:`
lines every few batches, a `Test set:` line after each epoch, the total time at the end,
then the model's repr. Random MNIST-shaped data (nothing downloaded), CPU processes,
gloo. Run under torchrun, one process per rank:

  torchrun --nproc-per-node 2 ddp_example.py --epochs 3
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.fc1 = nn.Linear(16 * 12 * 12, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


def train(args, model, loader, optimizer, epoch, rank):
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if rank == 0 and batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(loader.dataset),
                100. * batch_idx / len(loader), loss.item()))


def test(model, loader, rank):
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()
            correct += output.argmax(dim=1).eq(target).sum().item()
    test_loss /= len(loader.dataset)
    if rank == 0:
        print('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'.format(
            test_loss, correct, len(loader.dataset), 100. * correct / len(loader.dataset)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--epochs', type=int, default=3)
    parser.add_argument('--lr', type=float, default=0.05)
    parser.add_argument('--log-interval', type=int, default=10)
    args = parser.parse_args()
    dist.init_process_group('gloo')
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    data = TensorDataset(torch.randn(2048, 1, 28, 28), torch.randint(0, 10, (2048,)))
    held = TensorDataset(torch.randn(512, 1, 28, 28), torch.randint(0, 10, (512,)))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = DDP(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * world)
    start = time.time()
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        train(args, model, loader, optimizer, epoch, rank)
        test(model, DataLoader(held, batch_size=256), rank)
    if rank == 0:
        print('Total time: {:.2f}s'.format(time.time() - start))
        print(model)
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
