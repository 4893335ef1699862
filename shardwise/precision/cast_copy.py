"""bf16 and fp16: a copy of a loaded model whose ``nn.Linear`` weights are stored in that precision.

Under ``torch.autocast`` a Linear layer's float32 weight is cast to bf16 (or
fp16) on every call: autocast keeps no cast of a weight that needs no
gradient. For a small encoder on a CPU that is a tenth of a forward pass
(MiniLM, 2 threads, AVX512-BF16: ``aten::copy_`` took 10% of the pass's CPU
time, most of it these casts); a generator pays it once per new token. The
copy made here holds each Linear's weight and bias already cast, so autocast
finds them in its own precision and casts nothing. It still runs under
autocast: normalisations, softmax and everything else keep autocast's rules,
and the cast is the same rounding autocast does, so the results are the same
as the float32 model's under autocast.

The copy shares every other tensor (embeddings, normalisations, convolutions)
with the float32 model, which stays as it was for float32 runs and the
precision guard's reference; the Linear weights in the reduced precision add
half of their float32 size. It is made once per loaded model and precision,
and kept as long as the model is (:func:`cast_copy`). A model without a Linear
layer is its own copy. The Linear that ``nn.MultiheadAttention`` reads
directly keeps its float32 weight, as with int8 (:func:`~shardwise.precision.quantize.linears`).
"""

from __future__ import annotations

import copy
import threading
import weakref
from typing import Any

import torch
from torch import nn

from shardwise.model import Model
from shardwise.precision.quantize import linears

__all__ = ["cast_copy"]

_copies: weakref.WeakKeyDictionary[Any, dict[torch.dtype, Model]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def cast_copy(model: Model, dtype: torch.dtype) -> Model:
    """``model`` with the weights of its networks' Linear layers in ``dtype``, made once per model object."""
    with _lock:
        made = _copies.setdefault(model, {})
        found = made.get(dtype)
        if found is None:
            # Normal tensors even when called under inference_mode: the copy outlives that context.
            with torch.inference_mode(False), torch.no_grad():
                found = made[dtype] = _cast(model, dtype)
        return found


def _cast(model: Model, dtype: torch.dtype) -> Model:
    networks = {name: value for name, value in vars(model).items() if isinstance(value, nn.Module)}
    if not any(linears(net) for net in networks.values()):
        return model
    cast = copy.copy(model)
    for name, net in networks.items():
        # The modules are copied, never their tensors: the twin shares them all, then gets new ones for
        # its Linear layers below, so the float32 model is never changed.
        shared = {id(t): t for t in (*net.parameters(), *net.buffers())}
        twin = copy.deepcopy(net, memo=shared)
        for _, linear in linears(twin):
            linear.weight = nn.Parameter(linear.weight.detach().to(dtype), requires_grad=False)
            if linear.bias is not None:
                linear.bias = nn.Parameter(linear.bias.detach().to(dtype), requires_grad=False)
        setattr(cast, name, twin)
    return cast
