-- KEYS: host_next host_delay
-- A leased request takes a new turn at its host (see take_turn in politeness.lua).
-- ARGV: host, then the politeness rules (read_rules). Returns 0 (taken) or ms to wait.
return take_turn(ARGV[1], now_ms(), read_rules(2))
