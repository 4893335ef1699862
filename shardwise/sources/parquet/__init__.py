"""Parquet datasets as sources, local or on S3: :class:`~shardwise.sources.parquet.source.ParquetSource`.

``kind`` is the registry entry; ``source`` plans and reads, on the file-source base
(:mod:`shardwise.sources.files`); ``footers`` reads row-group statistics; ``rows`` streams a shard;
``text`` decodes its text columns; ``keys`` and ``key_reads`` read by key (redrive); ``unique`` and
``sample`` are the pre-run checks.
"""
