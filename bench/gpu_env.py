"""What ``bench/gpu.py`` runs on: the GPU, torch and its CUDA, the CPUs; and, without CUDA, why not.

Read once, in the script's own process, so every figure line can name the
device, and the first line of a run says where its figures come from.
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version

__all__ = ["Environment", "no_cuda_reason", "probe"]

_PACKAGES = ("transformers", "sentence-transformers", "vllm")


@dataclass(frozen=True)
class Environment:
    python: str
    torch: str
    torch_cuda: str | None
    """The CUDA version torch was built for; None for a CPU-only build."""
    cuda_available: bool
    gpu: str | None
    gpu_memory_gib: float | None
    capability: str | None
    bf16: bool | None
    """Whether the GPU computes bfloat16 natively (compute capability 8.0 and above)."""
    cpu_count: int | None
    cpus_usable: int
    packages: dict[str, str | None]

    def line(self) -> dict[str, object]:
        """The run's first JSON line."""
        fields = asdict(self)
        return {"step": "env", **{k: v for k, v in fields.items() if k != "packages"}, **fields["packages"]}


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def probe() -> Environment:
    """Read the environment; touches the GPU only when torch sees one."""
    import torch

    available = torch.cuda.is_available()
    props = torch.cuda.get_device_properties(0) if available else None
    return Environment(
        python=platform.python_version(),
        torch=torch.__version__,
        torch_cuda=torch.version.cuda,
        cuda_available=available,
        gpu=None if props is None else props.name,
        gpu_memory_gib=None if props is None else round(props.total_memory / 2**30, 1),
        capability=None if props is None else f"{props.major}.{props.minor}",
        bf16=None if props is None else bool(torch.cuda.is_bf16_supported()),
        cpu_count=os.cpu_count(),
        cpus_usable=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
        packages={name: _version(name) for name in _PACKAGES},
    )


def no_cuda_reason(env: Environment) -> str | None:
    """Why the GPU steps cannot run here, in one line with what to do; None when they can."""
    if env.cuda_available:
        return None
    if env.torch_cuda is None:
        return (
            f"no CUDA device: torch {env.torch} is a CPU-only build, so torch.cuda.is_available() is False; "
            "run this with a CUDA build of torch (on a lent device machine: its own python3, not a carried "
            ".venv; docs/benchmarks.md, GPU)"
        )
    return (
        f"no CUDA device: torch {env.torch} (built for CUDA {env.torch_cuda}) reports "
        "torch.cuda.is_available() False; check that nvidia-smi sees a GPU and that CUDA_VISIBLE_DEVICES "
        "does not hide it"
    )
