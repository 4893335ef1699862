"""What every file source kind shares: :class:`~shardwise.sources.files.source.FileSource`, its base.

``objects`` names what a store lists (key, ETag, size); ``local``, ``s3`` and ``stores`` list and
open a local folder, glob or file or an S3 prefix; ``s3_errors`` maps botocore's errors at the
boundary; ``spans`` cuts row groups into shards of spans and reads them back. Parquet, CSV and JSON
Lines and image folders each implement the read of one file on top; the object watcher and the lake
sinks use its stores and error mapping.
"""
