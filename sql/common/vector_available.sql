-- Whether pgvector is installed or may be installed in this database (PostgreSQL only).
SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'
