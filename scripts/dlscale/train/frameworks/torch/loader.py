"""A torch point's input read by DataLoader worker processes (train.py --num-workers N,
sweep.knobs num_workers): what chapter 11 of the seed study sweeps, PyTorch's own way.

Each of the N workers walks the rank's order of batches (dlscale's reader, the order
TensorFlow's gives) and gathers every N-th one from its own offset; the DataLoader takes
them from the workers in turn, so the batches arrive in the order a run without workers
reads them: the same training, its input on other processes. Workers are the DataLoader's
child processes, ended with it (and with the rank).
"""

from __future__ import annotations

import torch  # imported by the torch backend only (DDP.datasets), once Keras' backend is chosen


class ReaderBatches(torch.utils.data.IterableDataset):
    """A reader's batches, each DataLoader worker gathering its turn of them."""

    def __init__(self, reader):
        self.reader = reader

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is None:  # num_workers 0: this process reads
            return self.reader.batches()
        return self.reader.batches(offset=info.id, every=info.num_workers)


def loader(reader, workers: int, pin_memory: bool):
    """A DataLoader of `reader`'s batches (torch tensors) read by `workers` processes;
    batch_size None: each item is a whole batch already."""
    return torch.utils.data.DataLoader(ReaderBatches(reader), batch_size=None,
                                       num_workers=workers, pin_memory=pin_memory)
