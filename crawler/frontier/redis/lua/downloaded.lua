-- KEYS: owners in_flight host_busy
-- Requests whose download ended no longer count against their host's crawl-wide
-- concurrency, though their worker still holds their lease (downloads_ended in
-- politeness.lua): a host's turns count downloads, not the parsing that follows.
-- ARGV: owner, ids. Returns how many requests stopped counting against their host.
return downloads_ended(ARGV[1], 2)
