"""Models for training to accuracy: a 1-D CNN (MNIST-1D), an MLP (digits, synthetic vectors), a
ResNet-ish CNN (CIFAR-10, synthetic images) and GPT-2-shaped language models (the ``text`` data set).
``build`` picks one for a data set."""
from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["CNN1D", "MLP", "ResNetish", "GPT", "GPT_CONFIGS", "ARCHS", "build", "num_params"]


class CNN1D(nn.Module):
    """Three strided 1-D convolutions and a linear head (the MNIST-1D paper's CNN shape,
    Greydanus & Kobak 2020); ``channels=32`` gives 8,010 parameters for 40-sample signals."""

    def __init__(self, in_channels: int = 1, length: int = 40, num_classes: int = 10, channels: int = 32):
        super().__init__()
        c = channels
        self.features = nn.Sequential(
            nn.Conv1d(in_channels, c, 5, stride=2, padding=1), nn.ReLU(),
            nn.Conv1d(c, c, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv1d(c, c, 3, stride=2, padding=1), nn.ReLU(),
        )
        with torch.no_grad():
            n = self.features(torch.zeros(1, in_channels, length)).numel()
        self.head = nn.Linear(n, num_classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class MLP(nn.Module):
    """Fully connected ReLU network on flattened inputs."""

    def __init__(self, in_features: int, num_classes: int = 10, hidden: tuple[int, ...] = (128, 128)):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        prev = in_features
        for h in hidden:
            layers += [nn.Linear(prev, h), nn.ReLU()]
            prev = h
        layers.append(nn.Linear(prev, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                      if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.short(x))


class ResNetish(nn.Module):
    """A ResNet-style CNN for 32x32 images: stem, one basic block per stage (widths
    ``widths``, stride 2 between stages), global average pooling, linear head.
    ``widths=(16, 32, 64)`` has 78,042 parameters."""

    def __init__(self, in_channels: int = 3, num_classes: int = 10, widths: tuple[int, ...] = (16, 32, 64)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU())
        blocks, cin = [], widths[0]
        for i, w in enumerate(widths):
            blocks.append(_Block(cin, w, 1 if i == 0 else 2))
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean(dim=(2, 3)))


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))


class _GPTBlock(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = _Attention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.ModuleDict({"c_fc": nn.Linear(dim, 4 * dim), "c_proj": nn.Linear(4 * dim, dim)})

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        h = nn.functional.gelu(self.mlp["c_fc"](self.ln_2(x)), approximate="tanh")
        return x + self.mlp["c_proj"](h)


class GPT(nn.Module):
    """GPT-2's decoder (Radford et al. 2019): learned positions, pre-LayerNorm blocks of causal
    self-attention and a 4x GELU MLP, a final LayerNorm, the output head tied to the token embedding.
    Parameters come in the order of ``transformers.GPT2LMHeadModel`` (``studykit.models.param_shapes
    ("gpt2_small")``; its fused q/k/v and projections are ``Conv1D``, stored transposed, so shapes agree
    up to transposition; tested). No dropout and no buffers, so a profiled forward changes nothing.
    Init as GPT-2: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 layers))."""

    def __init__(self, vocab_size: int, context: int, layers: int, heads: int, dim: int):
        super().__init__()
        if dim % heads:
            raise ValueError(f"GPT: dim {dim} must be a multiple of heads {heads}")
        self.context = context
        self.wte = nn.Embedding(vocab_size, dim)
        self.wpe = nn.Embedding(context, dim)
        self.h = nn.ModuleList(_GPTBlock(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith(".bias") and "ln" not in name:
                nn.init.zeros_(p)

    def forward(self, idx):
        t = idx.shape[1]
        if t > self.context:
            raise ValueError(f"GPT: sequence of {t} tokens is longer than the context {self.context}")
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # logits [B, T, vocab], head tied to the embedding


#: GPT-2-shaped configurations: (layers, heads, dim). ``gpt2_small`` is GPT-2 small's geometry
#: (Radford et al. 2019: 12 layers, 12 heads, 768 wide); ``gpt_mini`` the lent-GPU workload of
#: ``scripts/gpu_tta.sh`` (6 x 256: 4.8M parameters with a byte vocabulary, a 19 MB fp32 gradient); ``gpt_tiny``
#: runs on CPU in the tests in seconds
GPT_CONFIGS = {"gpt_tiny": (2, 2, 32), "gpt_mini": (6, 8, 256), "gpt2_small": (12, 12, 768)}

ARCHS = ("auto", "cnn1d", "mlp", "resnetish", *GPT_CONFIGS)


def build(arch: str, input_shape: tuple[int, ...], num_classes: int, width: int | None = None) -> nn.Module:
    """The model ``arch`` for inputs of ``input_shape`` (without batch); ``auto`` picks by shape:
    ``[C, L]`` -> cnn1d, ``[C, H, W]`` -> resnetish, vectors -> mlp. ``width`` scales it
    (cnn1d channels, mlp hidden units, resnetish first-stage width, GPT model dim). GPT configurations
    (:data:`GPT_CONFIGS`) take ``input_shape = (seq_len,)`` (the context) and ``num_classes`` = the vocabulary."""
    shape = tuple(input_shape)
    if arch in GPT_CONFIGS:
        if len(shape) != 1:
            raise ValueError(f"{arch} needs [seq_len] token inputs (the text data set), got {list(shape)}")
        layers, heads, dim = GPT_CONFIGS[arch]
        return GPT(num_classes, shape[0], layers, heads, width or dim)
    if arch == "auto":
        arch = {2: "cnn1d", 3: "resnetish"}.get(len(shape), "mlp")
    if arch == "cnn1d":
        if len(shape) != 2:
            raise ValueError(f"cnn1d needs [channels, length] inputs, got {list(shape)}")
        return CNN1D(shape[0], shape[1], num_classes, channels=width or 32)
    if arch == "mlp":
        n = 1
        for s in shape:
            n *= s
        h = width or 128
        return MLP(n, num_classes, hidden=(h, h))
    if arch == "resnetish":
        if len(shape) != 3:
            raise ValueError(f"resnetish needs [channels, height, width] inputs, got {list(shape)}")
        w = width or 16
        return ResNetish(shape[0], num_classes, widths=(w, 2 * w, 4 * w))
    raise ValueError(f"unknown model {arch!r}; available: {', '.join(ARCHS)}")


def num_params(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
