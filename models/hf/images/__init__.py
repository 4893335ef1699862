"""Image models from a local directory: ViT, ConvNeXt, CLIP and SigLIP, their pictures decoded on the
CPU (the ``images`` extra)."""

__all__: list[str] = []
