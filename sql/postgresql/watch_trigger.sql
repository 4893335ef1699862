-- The optional change triggers of one source table (shardwise.watch.trigger installs it).
--
-- After every INSERT or UPDATE statement that changed rows, it bumps the table's
-- change counter in shardwise_watch_changes and sends one NOTIFY on channel
-- shardwise_data with the table, the operation, the number of changed rows and
-- their largest key. The counter lets a watcher that was away (restarted, or
-- its connection dropped) see that something changed without any notification.
--
-- Placeholders are filled with psycopg.sql composition, never with text formatting:
--   {watch_schema}  the schema that holds shardwise_watch_changes and the function
--   {table}         the source table, schema-qualified identifier
--   {key}           the key column's name, as a string literal (a trigger argument)
--   {label}         'schema.table', as a string literal (the counter row's name)
-- Re-running the file is harmless: every statement is idempotent.
SELECT pg_advisory_xact_lock(hashtext('shardwise.watch.install'));

CREATE TABLE IF NOT EXISTS {watch_schema}.shardwise_watch_changes (
    source_table text PRIMARY KEY,
    seq bigint NOT NULL DEFAULT 0,
    changed_rows bigint NOT NULL DEFAULT 0,
    changed_at timestamptz NOT NULL DEFAULT now()
);

-- SECURITY DEFINER: writers of the source table need no privilege on the counter
-- table; the fixed search_path keeps the definer's rights from being hijacked.
CREATE OR REPLACE FUNCTION {watch_schema}.shardwise_watch_notify() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $shardwise$
DECLARE
    v_label text := TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME;
    v_rows bigint;
    v_max_key jsonb;
    v_seq bigint;
    v_message text;
BEGIN
    EXECUTE format('SELECT count(*), to_jsonb(max(%I)) FROM shardwise_changed_rows', TG_ARGV[0])
        INTO v_rows, v_max_key;
    IF v_rows = 0 THEN
        RETURN NULL;
    END IF;
    INSERT INTO {watch_schema}.shardwise_watch_changes AS c (source_table, seq, changed_rows, changed_at)
    VALUES (v_label, 1, v_rows, now())
    ON CONFLICT (source_table) DO UPDATE
        SET seq = c.seq + 1, changed_rows = c.changed_rows + EXCLUDED.changed_rows,
            changed_at = EXCLUDED.changed_at
    RETURNING c.seq INTO v_seq;
    v_message := json_build_object(
        'table', v_label, 'op', TG_OP, 'rows', v_rows, 'max_key', v_max_key, 'seq', v_seq)::text;
    -- A NOTIFY payload must stay under 8000 bytes, and a failed NOTIFY would fail the
    -- writer's statement: drop an oversized key rather than the write.
    IF octet_length(v_message) > 7800 THEN
        v_message := json_build_object(
            'table', v_label, 'op', TG_OP, 'rows', v_rows, 'max_key', NULL, 'seq', v_seq)::text;
    END IF;
    PERFORM pg_notify('shardwise_data', v_message);
    RETURN NULL;
END
$shardwise$;

-- Two triggers, one per event: PostgreSQL refuses transition tables on a trigger
-- for more than one event.
DROP TRIGGER IF EXISTS shardwise_watch_insert ON {table};

CREATE TRIGGER shardwise_watch_insert AFTER INSERT ON {table}
    REFERENCING NEW TABLE AS shardwise_changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {watch_schema}.shardwise_watch_notify({key});

DROP TRIGGER IF EXISTS shardwise_watch_update ON {table};

CREATE TRIGGER shardwise_watch_update AFTER UPDATE ON {table}
    REFERENCING NEW TABLE AS shardwise_changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {watch_schema}.shardwise_watch_notify({key});

-- The counter row exists from installation on (seq 0), and survives uninstalling,
-- so a reinstalled trigger continues the same sequence.
INSERT INTO {watch_schema}.shardwise_watch_changes (source_table) VALUES ({label})
ON CONFLICT (source_table) DO NOTHING
