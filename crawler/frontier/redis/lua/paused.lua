-- KEYS: host_paused
-- The ms a host is still paused for by a backoff, 0 if none (see pause_left).
-- ARGV: host.
return pause_left(ARGV[1], now_ms())
