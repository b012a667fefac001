#!/usr/bin/env bash
# The dedupe index's cost as the hour fills (docs/performance.md, "A busy hour"):
# fills a table of the inbox's shape with ROWS rows (both designs), then claims
# 100,000 random ids in transactions of 100 on six clients right after a
# CHECKPOINT, and prints transactions/s and WAL bytes per row for each design.
# Usage: run.sh ROWS, against the server PGHOST/PGPORT/PGUSER name (a throwaway
# cluster: it drops and creates its tables in the default database).
set -euo pipefail
cd "$(dirname "$0")"
rows=${1:?rows to fill first, e.g. 5000000}
psql=(psql -Atq -v ON_ERROR_STOP=1)
"${psql[@]}" -f setup.sql
if [ "$rows" -gt 0 ]; then
    "${psql[@]}" -v rows="$rows" -f fill.sql
else
    "${psql[@]}" -c "CREATE UNIQUE INDEX ON a_inbox (dedupe_key); CREATE UNIQUE INDEX ON b_inbox (record_at, dedupe_key); CREATE UNIQUE INDEX ON b_ids (dedupe_key);"
fi
for design in today two-indexes; do
    "${psql[@]}" -c "CHECKPOINT"
    from=$("${psql[@]}" -c "SELECT pg_current_wal_lsn()")
    tps=$(pgbench -n -c 6 -j 2 -t 167 -f "$design.sql" | grep -E "^tps")
    to=$("${psql[@]}" -c "SELECT pg_current_wal_lsn()")
    wal=$("${psql[@]}" -c "SELECT round(pg_wal_lsn_diff('$to', '$from') / 100200)")
    echo "rows=$rows design=$design $tps wal_bytes_per_row=$wal"
done
