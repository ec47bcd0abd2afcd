"""A Hugging Face Trainer run as users start one: a small BERT (random weights, built
from a config: nothing downloaded) classifying 256 random token sequences into 10
classes, 2 epochs, evaluation each epoch, the Trainer's own console output.

  python hf_train.py --epochs 2
"""

import argparse

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Random(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, 1000, (n, 32), generator=g)
        self.labels = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=128, num_labels=10)
    model = BertForSequenceClassification(config)
    training = TrainingArguments(output_dir="/tmp/hf-out", num_train_epochs=args.epochs,
                                 per_device_train_batch_size=16, eval_strategy="epoch",
                                 logging_strategy="epoch", save_strategy="no",
                                 report_to="none", use_cpu=True, seed=0)
    trainer = Trainer(model=model, args=training, train_dataset=Random(256, 0),
                      eval_dataset=Random(64, 1))
    trainer.train()


if __name__ == "__main__":
    main()
