"""Plug-in models: a spec object an installed package registers in the entry-point group
``shardwise.models``, or one named ``package.module:attribute`` (:mod:`.specs`), checked before any shard
runs (:mod:`.checks`). MobileNetV2 (:mod:`.mobilenet`) is Shardwise's own worked example, registered as
another package would register one."""

__all__: list[str] = []
