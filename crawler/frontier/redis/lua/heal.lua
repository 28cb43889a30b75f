-- KEYS: queue queued requests lanes shapes shape_ids leases owners seq seen failed expiries staged in_flight host_next host_busy host_delay host_paused host_strikes quarantine quarantine_order quarantine_dropped learned_version identity
-- Move aside every fixed key holding another type than its own (the prelude of a worker's
-- step does it, see __init__.py), for a worker whose politeness or command script refused
-- such a key. Returns 'ok' (a key moved aside answers KEY_MOVED, then 'ok' when run again).
return 'ok'
