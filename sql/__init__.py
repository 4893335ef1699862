"""DDL and queries as ``.sql`` files, one folder per SQLAlchemy dialect.

Loaded by ``shardwise.db.sqlfiles``. A package only so the files ship
inside wheels, next to the code that loads them.
"""
