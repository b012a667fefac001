-- Taking a request leases it in a column of its own that no index covers, so
-- the sender's take is a HOT update (the row's page keeps room for its new
-- version: fillfactor 70) instead of a new entry in every index of the table,
-- as moving `next_attempt_at` was. `next_attempt_at` now moves only for a retry.
ALTER TABLE inbox_host.requests ADD COLUMN leased_until timestamptz;
ALTER TABLE inbox_host.requests SET (fillfactor = 70);
