#!/bin/sh
# postgres:16's start, in short: on an empty PGDATA, initdb (UTF8, the superuser postgres
# with POSTGRES_PASSWORD for TCP, trust on the local socket as the official image has) and
# create POSTGRES_DB; then the server, on PGPORT (default 5432) of the loopback interface only
# (the test stack runs on the host's network: tests/compose/override.yml).
set -eu
if [ "${1:-}" = postgres ]; then
    if [ ! -s "$PGDATA/PG_VERSION" ]; then
        password_file=$(mktemp)
        printf '%s\n' "${POSTGRES_PASSWORD:?}" > "$password_file"
        initdb --pgdata="$PGDATA" --username=postgres --encoding=UTF8 --locale=C.UTF-8 \
            --auth-local=trust --auth-host=scram-sha-256 --pwfile="$password_file" >/dev/null
        rm "$password_file"
        pg_ctl --pgdata="$PGDATA" --options="-c listen_addresses=''" --wait --silent start
        if [ "${POSTGRES_DB:-postgres}" != postgres ]; then
            createdb --username=postgres "$POSTGRES_DB"
        fi
        pg_ctl --pgdata="$PGDATA" --mode=fast --wait --silent stop
    fi
    set -- "$@" -c listen_addresses=127.0.0.1
fi
exec "$@"
