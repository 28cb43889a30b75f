#!/bin/sh
# `redis-server ARGS` (the compose service's command) with RedisBloom loaded, on REDIS_PORT
# (default 6379) of the loopback interface only: the test stack runs on the host's network
# (tests/compose/override.yml), where 6379 may be taken and nothing may listen outside.
set -eu
if [ "${1:-}" = redis-server ]; then
    shift
    set -- redis-server --loadmodule /usr/local/lib/redis/redisbloom.so \
        --bind 127.0.0.1 --port "${REDIS_PORT:-6379}" "$@"
fi
exec "$@"
