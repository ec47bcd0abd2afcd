"""A Hugging Face Trainer run of a language model as users count tokens: a tiny Llama
(random weights, built from a LlamaConfig: nothing downloaded) on random token sequences,
`max_steps` steps, the Trainer's own console output with `include_num_input_tokens_seen`
(its dicts then carry the tokens seen, summed over every rank, and `train_tokens_per_second`)
and `log_level info` (its "Running training" banner, as Hugging Face's example scripts print).

  torchrun --nproc_per_node 2 hf_tokens.py --max-steps 40
"""

import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class Random(torch.utils.data.Dataset):
    def __init__(self, n, length, seed):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, 1000, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--length", type=int, default=256)
    args = parser.parse_args()
    config = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=args.length)
    model = LlamaForCausalLM(config)
    training = TrainingArguments(output_dir="/tmp/hf-tokens-out", max_steps=args.max_steps,
                                 per_device_train_batch_size=args.batch, logging_steps=5,
                                 include_num_input_tokens_seen=True, log_level="info",
                                 save_strategy="no", report_to="none", use_cpu=True,
                                 ddp_backend="gloo", seed=0)
    trainer = Trainer(model=model, args=training, train_dataset=Random(4096, args.length, 0))
    trainer.train()


if __name__ == "__main__":
    main()
