#!/usr/bin/env bash
# bench/site.sh SEED MODE [ARGS...]: crawl ../shared/site's messy-web site (built for SEED)
# with this project and print the scorer's figures (last line, JSON).
#   bench/site.sh 1 embedded
#   bench/site.sh 1 shared --workers 2 --kills 2
#   bench/site.sh 1 shared --workers 1
# Needs root, nginx and python3.11-doc (apt-get install -y nginx python3.11-doc).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${SHARED:-$ROOT/../shared}
SEED=$1; MODE=$2; shift 2
OUT=${OUT:-/tmp/messy-site-$SEED-$MODE}
cd "$ROOT"
"$SHARED/site/crawl_and_score.sh" "$SEED" "$OUT" -- "$ROOT/.venv/bin/python" -m bench.site_crawl "$MODE" "$@"
