"""Pick the device the engine runs on, and bring a model's outputs back from it."""

from __future__ import annotations

import torch

from shardwise.errors import ConfigError

__all__ = ["resolve_device", "to_host"]


def resolve_device(name: str = "auto") -> torch.device:
    """Turn ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` into a usable device.

    ``auto`` takes the first CUDA device when there is one. Asking for CUDA on
    a machine without it is an error rather than a silent fall back to the CPU,
    because a run sized for a GPU would crawl on a CPU.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N; got {name!r}") from exc
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N; got {name!r}")
    if not torch.cuda.is_available():
        raise ConfigError(
            f"device {name!r} needs CUDA, but this torch {torch.__version__} sees no CUDA device; "
            "use --device cpu (or auto), or install a CUDA build of torch"
        )
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError(
            f"device {name!r} does not exist; this machine has {torch.cuda.device_count()} CUDA device(s)"
        )
    return device


def to_host(outputs: torch.Tensor) -> torch.Tensor:
    """A model's outputs on the CPU, floats as float32 (whatever precision computed them).

    On CUDA this copy waits for the forward pass to finish: it is the one
    synchronisation per batch, and what tells the prefetcher that the batch's
    device memory may be reused.
    """
    return (outputs.float() if outputs.is_floating_point() else outputs).cpu()
