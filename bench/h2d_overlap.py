"""Host-to-device overlap of Shardwise's prefetcher, timed with CUDA events (needs a CUDA device).

    python bench/h2d_overlap.py --batches 24 --rows 64 --json

The batches are picture batches (:class:`~shardwise.model.image_model.PixelBatch`,
float32 ``(rows, 3, 224, 224)``, about 600 KB a picture) of random values in
pageable host memory, as a collate leaves them: the heavy host-to-device
case (a text batch is a few hundred KB of token ids). The stand-in forward
pass multiplies each picture's rows by a random orthogonal 224x224 matrix
``k`` times, ``k`` chosen so that it takes ``--compute-ratio`` times as long
as the batch's copy, then copies one float per row back to the host, as the
engine copies each batch's outputs back. Each timing is the median of
``--repeat`` runs after a warm-up, per batch, in milliseconds:

- ``copy_ms``: the copies alone, from pinned memory, on a side stream;
- ``pin_ms``: pinning a batch on the host (host clock), which the
  prefetcher's thread does before each copy;
- ``compute_ms``: the forward passes alone, on batches already on the device;
- ``serial_ms``: a plain loop, each batch copied (pageable, so synchronous)
  and then computed;
- ``prefetched_ms``: the same loop through :class:`~shardwise.batch.prefetch.Prefetcher`
  (depth 2): batch N+1 is pinned and copied on its side stream while batch N
  computes.

``overlap_fraction`` is ``(copy + compute - prefetched) / min(copy, compute)``:
1 when the shorter of the two is hidden entirely, 0 when they ran one after
the other, below 0 when the prefetcher costs more than it hides (the host's
pinning, ``pin_ms``, is then what limits it). ``speedup_vs_serial`` is
``serial / prefetched``; ``outputs_equal`` says the prefetched loop computed
what the serial one did, to 1e-5 (a missing wait would show here). The last
line with ``--json`` is one JSON object (see ``KEYS``). This prints figures;
it is not a timed test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardwise.environment import set_defaults

set_defaults(prefect=False)

import torch

from shardwise.batch.prefetch import Prefetcher
from shardwise.batch.windows import Batch, Window
from shardwise.model.image_model import PixelBatch

__all__ = ["KEYS", "iterations_for", "main", "overlap_fraction"]

KEYS = (
    "batches",
    "rows",
    "batch_mb",
    "compute_iterations",
    "copy_ms",
    "pin_ms",
    "compute_ms",
    "serial_ms",
    "prefetched_ms",
    "h2d_gb_s",
    "overlap_fraction",
    "speedup_vs_serial",
    "outputs_equal",
)
_SIDE = 224  # pixels: a ViT's or ConvNeXt's picture


def overlap_fraction(copy_ms: float, compute_ms: float, overlapped_ms: float) -> float:
    """How much of the shorter of copy and compute the overlapped run hid: 1 all, 0 none, < 0 worse."""
    shorter = min(copy_ms, compute_ms)
    if shorter <= 0:
        raise ValueError(
            f"copy and compute times must be positive to compare, got {copy_ms} and {compute_ms}"
        )
    return (copy_ms + compute_ms - overlapped_ms) / shorter


def iterations_for(copy_ms: float, one_iteration_ms: float, ratio: float) -> int:
    """The stand-in forward's products so that it takes about ``ratio`` times the copy; at least 1."""
    if one_iteration_ms <= 0:
        raise ValueError(f"one product must take a positive time, got {one_iteration_ms} ms")
    return max(1, round(ratio * copy_ms / one_iteration_ms))


def _batches(count: int, rows: int, seed: int) -> list[PixelBatch]:
    """Random pictures (never zeros: they can run faster than real data) in pageable host memory."""
    generator = torch.Generator().manual_seed(seed)
    return [PixelBatch(torch.randn(rows, 3, _SIDE, _SIDE, generator=generator)) for _ in range(count)]


def _forward(weight: torch.Tensor, k: int) -> Callable[[PixelBatch], torch.Tensor]:
    def run(batch: PixelBatch) -> torch.Tensor:
        x = batch.pixel_values
        for _ in range(k):
            x = x @ weight
        return x.mean(dim=(1, 2, 3)).cpu()  # one float per row back to the host, as the engine does

    return run


def _events_ms(stream: torch.cuda.Stream, work: Callable[[], object]) -> float:
    """Milliseconds between CUDA events recorded on ``stream`` around ``work``."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    work()
    end.record(stream)
    end.synchronize()
    return float(start.elapsed_time(end))


def _median(runs: int, measure: Callable[[], float]) -> float:
    measure()  # warm-up: the pinned-memory cache, cuBLAS's handle and kernels
    return statistics.median(measure() for _ in range(runs))


def _copy_ms(pinned: Sequence[PixelBatch], device: torch.device, side: torch.cuda.Stream) -> float:
    landed: list[PixelBatch] = []  # held until the events are read, so no copy's memory is reused

    def copies() -> None:
        with torch.cuda.stream(side):
            landed.extend(b.to(device, non_blocking=True) for b in pinned)

    return _events_ms(side, copies)


def _pin_ms(host: Sequence[PixelBatch]) -> float:
    started = time.perf_counter()
    for batch in host:
        batch.pin_memory()
    return (time.perf_counter() - started) * 1000


def _serial(host: Sequence[PixelBatch], device: torch.device, forward: Callable) -> list[torch.Tensor]:
    return [forward(batch.to(device)) for batch in host]


def _prefetched(host: Sequence[PixelBatch], device: torch.device, forward: Callable) -> list[torch.Tensor]:
    window = Window(0, [], {}, [])
    staged = (Batch(window, [], [], batch, batch.padded_cost) for batch in host)
    with Prefetcher(staged, device, depth=2) as prefetcher:
        return [forward(batch.inputs) for batch, _ in prefetcher]


def _sized_forward(
    pinned: Sequence[PixelBatch], device: torch.device, copy_ms: float, ratio: float, repeat: int
) -> tuple[int, Callable[[PixelBatch], torch.Tensor], float]:
    """The stand-in forward sized to ``ratio`` times the copy: its products, itself, and its time per
    batch on batches already on the device."""
    compute = torch.cuda.current_stream(device)
    weight = torch.linalg.qr(torch.randn(_SIDE, _SIDE, generator=torch.Generator().manual_seed(1)))[0]
    weight = weight.to(device)
    resident = [b.to(device) for b in pinned]

    def per_batch_ms(forward: Callable[[PixelBatch], torch.Tensor]) -> float:
        runs = lambda: _events_ms(compute, lambda: [forward(b) for b in resident])  # noqa: E731
        return _median(repeat, runs) / len(resident)

    k = iterations_for(copy_ms, per_batch_ms(_forward(weight, 1)), ratio)
    forward = _forward(weight, k)
    return k, forward, per_batch_ms(forward)


def measure(device: torch.device, batches: int, rows: int, repeat: int, ratio: float) -> dict[str, object]:
    """Every figure in ``KEYS``, per batch, on ``device`` (CUDA)."""
    host = _batches(batches, rows, seed=0)
    pinned = [b.pin_memory() for b in host]
    side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
    compute = torch.cuda.current_stream(device)
    copy = _median(repeat, lambda: _copy_ms(pinned, device, side)) / batches
    k, forward, compute_ms = _sized_forward(pinned, device, copy, ratio, repeat)
    serial_ms = _median(repeat, lambda: _events_ms(compute, lambda: _serial(host, device, forward))) / batches
    prefetched_ms = (
        _median(repeat, lambda: _events_ms(compute, lambda: _prefetched(host, device, forward))) / batches
    )
    same = all(  # a missing wait would hand the forward another batch's or unwritten memory: far off
        torch.allclose(a, b, rtol=1e-5, atol=1e-6)
        for a, b in zip(_serial(host, device, forward), _prefetched(host, device, forward), strict=True)
    )
    batch_bytes = host[0].pixel_values.numel() * host[0].pixel_values.element_size()
    return {
        "batches": batches,
        "rows": rows,
        "batch_mb": batch_bytes / 1e6,
        "compute_iterations": k,
        "copy_ms": copy,
        "pin_ms": _median(repeat, lambda: _pin_ms(host)) / batches,
        "compute_ms": compute_ms,
        "serial_ms": serial_ms,
        "prefetched_ms": prefetched_ms,
        "h2d_gb_s": batch_bytes / 1e9 / (copy / 1000),
        "overlap_fraction": overlap_fraction(copy, compute_ms, prefetched_ms),
        "speedup_vs_serial": serial_ms / prefetched_ms,
        "outputs_equal": same,
    }


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=24, help="batches per timed loop")
    parser.add_argument("--rows", type=int, default=64, help="pictures per batch")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each loop; the median is kept")
    parser.add_argument(
        "--compute-ratio", type=float, default=1.0, help="the stand-in forward's time over the copy's"
    )
    parser.add_argument("--device", default="cuda", help="a CUDA device: cuda or cuda:N")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of results")
    args = parser.parse_args(argv)
    for name in ("batches", "rows", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.compute_ratio <= 0:
        parser.error(f"--compute-ratio must be above 0, got {args.compute_ratio}")
    device = torch.device(args.device)
    if device.type != "cuda" or not torch.cuda.is_available():
        parser.error(
            f"--device {args.device}: this bench times CUDA copies and needs a CUDA device "
            f"(torch {torch.__version__} sees {torch.cuda.device_count()}); run it on a GPU machine"
        )
    # set_device needs an index: a bare "cuda" is the current device.
    device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
    torch.cuda.set_device(device.index)
    result = measure(device, args.batches, args.rows, args.repeat, args.compute_ratio)
    print(
        f"{args.batches} batches of {args.rows} pictures ({result['batch_mb']:.1f} MB) on "
        f"{torch.cuda.get_device_name(device)}, per batch: copy {result['copy_ms']:.2f} ms "
        f"({result['h2d_gb_s']:.1f} GB/s), pin {result['pin_ms']:.2f} ms, "
        f"compute {result['compute_ms']:.2f} ms "
        f"({result['compute_iterations']} products), serial {result['serial_ms']:.2f} ms, prefetched "
        f"{result['prefetched_ms']:.2f} ms -> overlap {result['overlap_fraction']:.2f}, "
        f"{result['speedup_vs_serial']:.2f}x serial; outputs equal: {result['outputs_equal']}"
    )
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
