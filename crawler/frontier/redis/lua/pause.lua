-- KEYS: host_next host_paused
-- Crawl-wide backoff: pause a host for every worker (see pause_host in politeness.lua).
-- ARGV: host, ms. Returns the ms the host is paused for from now.
return pause_host(ARGV[1], tonumber(ARGV[2]), now_ms())
