-- Per-connection staging for one shard's dead letters; dropped when the writer closes.
CREATE TEMPORARY TABLE IF NOT EXISTS shardwise_dead_stage (
    seq                bigint NOT NULL,
    source_key         text,
    error_class        text NOT NULL,
    message            text NOT NULL,
    input_fingerprint  text
)
