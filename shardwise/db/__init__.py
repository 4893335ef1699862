"""What every database layer shares: its errors mapped onto shardwise.errors, and its timeouts."""
