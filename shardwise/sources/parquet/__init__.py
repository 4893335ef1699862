"""Parquet datasets as sources, local or on S3: :class:`~shardwise.sources.parquet.source.ParquetSource`.

``source`` plans and reads; ``objects`` lists a location (``local_objects``,
``s3_objects``, with ``s3_errors``); ``footers`` reads row-group statistics;
``row_groups`` cuts them into shards; ``rows`` streams a shard; ``text``
decodes its text columns; ``keys`` reads by key (redrive).
"""
