"""GPT-2 medium (Radford et al. 2019, 24 layers, width 1024, 16 heads) as a model of your own:
``--model examples/gpt2_medium.py:build`` (needs transformers; random weights, built offline).

Timing batches are sequences of 512 tokens; the GPT-2 runs of the kit use 8 per worker
(``python -m studykit tcomp --models examples/gpt2_medium.py:build --batch-sizes 8``).
"""
SEQ_LEN = 512
VOCAB = 50257  # GPT-2's BPE vocabulary (GPT2Config's default vocab_size)


def build():
    """``GPT2LMHeadModel`` of GPT-2 medium's shape (its LM head is tied to the token embedding)."""
    from transformers import GPT2Config, GPT2LMHeadModel  # lazily: not every machine has transformers

    return GPT2LMHeadModel(GPT2Config(n_layer=24, n_embd=1024, n_head=16))


def example_batch(batch_size: int, device="cpu"):
    """``(inputs, target)``: ``batch_size`` random sequences of ``SEQ_LEN`` token ids, no separate target."""
    import torch

    g = torch.Generator().manual_seed(0)
    return torch.randint(0, VOCAB, (batch_size, SEQ_LEN), generator=g).to(device), None


def loss(model, batch):
    """Next-token cross-entropy (the model shifts the labels itself)."""
    ids, _ = batch
    return model(input_ids=ids, labels=ids).loss
