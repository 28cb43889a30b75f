-- KEYS: host_next host_busy
-- Hosts waiting on politeness now (see hosts_waiting in politeness.lua).
-- ARGV: the politeness rules (read_rules).
return hosts_waiting(now_ms(), read_rules(1))
