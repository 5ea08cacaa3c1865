-- Whether the server is in recovery: a standby (streaming or log-shipping replica), or a
-- server still replaying WAL before its promotion completes. Run on every new pooled
-- connection (primary.rs); a server in recovery is refused.
SELECT pg_is_in_recovery()
