"""Make a tiny random-weight Llama for running HPC4AIbook Chapter.15 benchmark.py on CPU.

Usage: python make_tiny_llama.py OUT_DIR

benchmark.py loads it with AutoModelForCausalLM.from_pretrained(path_to_model, ...).
No tokenizer is saved: benchmark.py and utils.DummyDataset never load one
(DummyDataset draws token ids with np.random.randint(0, 1000)), so vocab_size=1000.
"""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main(out_dir: str) -> None:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=1000,            # DummyDataset ids are in [0, 1000)
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,  # >= --sequence_length used in capture.sh
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out_dir)
    n = sum(p.numel() for p in model.parameters())
    print(f"saved tiny Llama ({n} parameters) to {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama")
