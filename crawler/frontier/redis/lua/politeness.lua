-- Global per-host politeness, shared by every worker of a crawl. Prepended to every
-- frontier script, before common.lua (whose helpers call host_released and the helpers
-- pick_ready uses to look at hosts). A host is ready for a new lease when its next-allowed time (Redis server
-- clock) has come and fewer than its limit of requests are in flight; leasing one of its
-- requests moves the next-allowed time one delay ahead and counts the request in flight
-- until its download ends (downloads_ended: its worker reports it) or, at the latest, its
-- lease ends (answered, failed, given back, expired). Hosts are Scrapy's download
-- slot keys, computed by the worker that queues a request (in its meta, "frontier_host").
-- Keys (bound by name from each script's "-- KEYS:" line, see __init__.py beside it):
-- IN_FLIGHT, HOST_NEXT, HOST_BUSY, HOST_DELAY, HOST_PAUSED, documented in
-- crawler/frontier/redis/layout.py; each helper names those it needs.
-- The politeness rules passed in ARGV[i] to ARGV[i + 4]: queue lanes one lease looks at,
-- delay between two requests to a host (ms), requests of a host in flight at once, cap on a
-- robots.txt Crawl-delay (ms), per-host overrides as JSON {host: {"delay": ms,
-- "concurrency": n}} (Scrapy's DOWNLOAD_SLOTS).
-- HINCRBY that starts a mangled counter over (at `by`) instead of failing the script: the
-- keys are writable by others, and a script must never stop half-way. Returns the count.
local function add_to_field(key, field, by)
  local count = redis.pcall('HINCRBY', key, field, by)
  if type(count) ~= 'number' then
    redis.call('HSET', key, field, by)
    count = by
  end
  return count
end

local function read_rules(i)
  return {
    scan = tonumber(ARGV[i]),
    delay = tonumber(ARGV[i + 1]),
    limit = tonumber(ARGV[i + 2]),
    cap = tonumber(ARGV[i + 3]),
    hosts = cjson.decode(ARGV[i + 4]),
  }
end

local function host_limit(rules, host)
  local own = rules.hosts[host]
  return own and own.concurrency or rules.limit
end

-- ms between two requests to `host`: its configured delay, or its robots.txt Crawl-delay
-- (capped) when that is longer.
-- Keys: HOST_DELAY.
local function host_delay(rules, host)
  local own = rules.hosts[host]
  local delay = own and own.delay or rules.delay
  local crawl_delay = redis.call('HGET', HOST_DELAY, host)
  if crawl_delay then
    delay = math.max(delay, math.min(tonumber(crawl_delay) or 0, rules.cap))
  end
  return delay
end

-- A request of `host` is leased: one more in flight.
-- Keys: IN_FLIGHT HOST_BUSY.
local function host_leased(id, host)
  redis.call('HSET', IN_FLIGHT, id, host)
  add_to_field(HOST_BUSY, host, 1)
end

-- The download of `id` ended, or its lease did, however (answered, failed, given back,
-- expired, or it was never a request's): if it counted against a host, that host has one
-- request fewer in flight. Idempotent: the second of the two ends releases nothing.
-- Keys: IN_FLIGHT HOST_BUSY.
local function host_released(id)
  local host = redis.call('HGET', IN_FLIGHT, id)
  if not host then
    return
  end
  redis.call('HDEL', IN_FLIGHT, id)
  if add_to_field(HOST_BUSY, host, -1) <= 0 then
    redis.call('HDEL', HOST_BUSY, host)
  end
end

-- The downloads of requests leased to `owner`, their ids in ARGV[first] onwards, ended
-- (a response came, or the download failed): their hosts have one request fewer in flight
-- each, while their leases go on until answered (which then releases nothing more). Ids
-- `owner` no longer holds (answered, expired, taken over by another worker) are passed
-- over: a download that ended late never frees a turn of another worker's download.
-- Returns how many requests stopped counting against their host.
-- Keys: OWNERS IN_FLIGHT HOST_BUSY.
local function downloads_ended(owner, first)
  local ended = 0
  for i = first, #ARGV do
    local id = ARGV[i]
    if redis.call('HGET', OWNERS, id) == owner and redis.call('HEXISTS', IN_FLIGHT, id) == 1 then
      host_released(id)
      ended = ended + 1
    end
  end
  return ended
end

-- What one lease call knows of `host` (cached in `state`): its next-allowed time, its
-- requests in flight, its limit. Keys: HOST_NEXT HOST_BUSY.
local function host_state(state, host, rules)
  local s = state[host]
  if not s then
    s = {
      next_at = tonumber(redis.call('ZSCORE', HOST_NEXT, host) or 0),
      busy = tonumber(redis.call('HGET', HOST_BUSY, host)) or 0,
      limit = host_limit(rules, host),
    }
    state[host] = s
  end
  return s
end

local function host_ready(s, now)
  return s.next_at <= now and s.busy < s.limit
end

-- One more request of `host` (its state `s`) picked for a lease at `now`: counted against
-- the host's limit, its next-allowed time one delay ahead. Returns that delay (ms).
-- Keys: HOST_NEXT HOST_DELAY.
local function host_picked(s, host, now, rules)
  s.busy = s.busy + 1
  local delay = host_delay(rules, host)
  if delay > 0 then
    s.next_at = now + delay
    redis.call('ZADD', HOST_NEXT, s.next_at, host)
  end
  return delay
end

-- A request already leased needs a new turn at its host (its previous one was used by
-- another request, e.g. the robots.txt fetched for it, or went stale while it waited).
-- Takes the turn if the host's next-allowed time has come; returns 0 then, else the ms to
-- wait before asking again. The host's in-flight count is unchanged.
-- Keys: HOST_NEXT HOST_DELAY.
local function take_turn(host, now, rules)
  local next_at = tonumber(redis.call('ZSCORE', HOST_NEXT, host) or 0)
  if next_at > now then
    return next_at - now
  end
  local delay = host_delay(rules, host)
  if delay > 0 then
    redis.call('ZADD', HOST_NEXT, now + delay, host)
  end
  return 0
end

-- Hosts waiting on politeness: next-allowed time ahead, or as many requests in flight as
-- their limit allows.
-- Keys: HOST_NEXT HOST_BUSY.
local function hosts_waiting(now, rules)
  local waiting = redis.call('ZCOUNT', HOST_NEXT, '(' .. now, '+inf')
  local busy = redis.call('HGETALL', HOST_BUSY)
  for i = 1, #busy, 2 do
    if (tonumber(busy[i + 1]) or 0) >= host_limit(rules, busy[i]) then
      local next_at = redis.call('ZSCORE', HOST_NEXT, busy[i])
      if not next_at or tonumber(next_at) <= now then
        waiting = waiting + 1
      end
    end
  end
  return waiting
end

-- Crawl-wide backoff: pause `host` for `ms` from `now` (a 429 or 503 asked for it), for
-- every worker. The pause moves the host's next-allowed time (which leases and new turns
-- obey) and is kept in HOST_PAUSED for requests that are not leased (robots.txt). Never
-- shortens a longer pause already set. Returns the ms the host is paused for from now.
-- Keys: HOST_NEXT HOST_PAUSED.
local function pause_host(host, ms, now)
  redis.call('ZADD', HOST_NEXT, 'GT', now + ms, host)
  redis.call('ZADD', HOST_PAUSED, 'GT', now + ms, host)
  return tonumber(redis.call('ZSCORE', HOST_PAUSED, host)) - now
end

-- ms `host` is still paused for by a backoff (0: not paused).
-- Keys: HOST_PAUSED.
local function pause_left(host, now)
  redis.call('ZREMRANGEBYSCORE', HOST_PAUSED, '-inf', now)
  local until_ms = redis.call('ZSCORE', HOST_PAUSED, host)
  return until_ms and tonumber(until_ms) - now or 0
end
