"""SQL tables as sources: :class:`~shardwise.sources.sql.source.SqlSource` and what it is made of.

``kind`` is the registry entry and ``options`` its options; ``source`` plans and reads; ``db``
connects and maps errors; ``schema`` reflects the table; ``where`` checks the ``--where`` filter;
``plan`` cuts key ranges;
``query`` builds the reads; ``snapshot`` exports and imports PostgreSQL
snapshots; ``unique`` and ``check`` are the pre-run checks; ``keys`` reads by
key (redrive); ``fingerprint`` is the SQL twin of the lineage fingerprint.
"""
