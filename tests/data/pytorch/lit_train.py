"""A PyTorch Lightning training as users write one: a small CNN on random 8x8 images,
DDP on CPU processes, the default progress bar, validation each epoch. Run directly
(Lightning starts the other processes) or under torchrun (one process per rank).

  python lit_train.py --devices 2 --epochs 3
"""

import argparse

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))

    def training_step(self, batch, _):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch, _):
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y), prog_bar=True,
                 sync_dist=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), prog_bar=True,
                 sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    pl.seed_everything(0)
    data = TensorDataset(torch.randn(512, 3, 8, 8), torch.randint(0, 10, (512,)))
    val = TensorDataset(torch.randn(128, 3, 8, 8), torch.randint(0, 10, (128,)))
    trainer = pl.Trainer(accelerator="cpu", devices=args.devices, strategy="ddp",
                         max_epochs=args.epochs, logger=False, enable_checkpointing=False)
    trainer.fit(Net(), DataLoader(data, batch_size=32), DataLoader(val, batch_size=32))


if __name__ == "__main__":
    main()
