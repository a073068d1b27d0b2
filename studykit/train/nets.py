"""Small models for training to accuracy: a 1-D CNN (MNIST-1D), an MLP (digits, synthetic
vectors) and a ResNet-ish CNN (CIFAR-10, synthetic images). ``build`` picks one for a data set."""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["CNN1D", "MLP", "ResNetish", "ARCHS", "build", "num_params"]


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


ARCHS = ("auto", "cnn1d", "mlp", "resnetish")


def build(arch: str, input_shape: tuple[int, ...], num_classes: int, width: int | None = None) -> nn.Module:
    """The model ``arch`` for inputs of ``input_shape`` (without batch); ``auto`` picks by shape:
    ``[C, L]`` -> cnn1d, ``[C, H, W]`` -> resnetish, vectors -> mlp. ``width`` scales it
    (cnn1d channels, mlp hidden units, resnetish first-stage width)."""
    shape = tuple(input_shape)
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
