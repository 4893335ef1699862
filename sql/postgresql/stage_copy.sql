-- A psycopg.sql template: {table} and {columns} are filled with sql.Identifier values.
COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)
