"""A PyTorch Lightning 1.x training as users of a SLURM cluster write one: a small CNN on
random 8x8 images, DDP over the job's tasks (Lightning reads the ranks from SLURM),
the default tqdm progress bar, validation each epoch (or none), and a callback that
prints at each epoch's end. Run by job.sbatch (one task per node, two nodes).
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


class Report(pl.Callback):
    def on_train_epoch_end(self, trainer, module):
        if trainer.is_global_zero:
            print(f"epoch {trainer.current_epoch} done, saving")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--validate", type=int, default=1, help="0: no validation")
    parser.add_argument("--report", type=int, default=1, help="0: no print at epochs' ends")
    args = parser.parse_args()
    pl.seed_everything(0)
    data = TensorDataset(torch.randn(4096, 3, 8, 8), torch.randint(0, 10, (4096,)))
    val = TensorDataset(torch.randn(512, 3, 8, 8), torch.randint(0, 10, (512,)))
    trainer = pl.Trainer(accelerator="cpu", devices=1, num_nodes=args.nodes,
                         strategy="ddp", max_epochs=args.epochs,
                         enable_checkpointing=False,
                         callbacks=[Report()] if args.report else [])
    trainer.fit(Net(), DataLoader(data, batch_size=16),
                DataLoader(val, batch_size=64) if args.validate else None)


if __name__ == "__main__":
    main()
