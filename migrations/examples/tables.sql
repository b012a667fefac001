-- Tables of the example and test plugins. Applied by the lab, the demo and the
-- tests (never by `inbox-host migrate`): in production a plugin's tables are yours,
-- and so is granting the guest role rights on them. Names are unqualified: they go
-- to the first schema of the search path (`public`, or the lab's own schema).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'inbox_guest') THEN
        CREATE ROLE inbox_guest NOLOGIN;
    END IF;
END
$$;

CREATE TABLE IF NOT EXISTS invoices (
    order_id   text    NOT NULL,
    amount     numeric NOT NULL,
    message_id text,
    marker     text
);
CREATE TABLE IF NOT EXISTS handler_calls (
    name  text PRIMARY KEY,
    calls integer NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS sandbox_probe (
    message_id text,
    probe      text,
    outcome    text
);
CREATE TABLE IF NOT EXISTS typed_probe (
    first  text,
    second text
);
-- The hostile plugin's: what it read back, and a row it locks.
CREATE TABLE IF NOT EXISTS hostile_seen (
    message_id text,
    what       text,
    value      text
);
CREATE TABLE IF NOT EXISTS hostile_target (
    id      integer PRIMARY KEY,
    touched integer NOT NULL DEFAULT 0
);
INSERT INTO hostile_target (id) VALUES (1) ON CONFLICT DO NOTHING;
-- The second step of the outbox pipeline (plugins/ledger): no unique key, so a
-- message handled twice shows as two rows.
CREATE TABLE IF NOT EXISTS ledger (
    order_id   text    NOT NULL,
    amount     numeric NOT NULL,
    message_id text
);
GRANT SELECT, INSERT, UPDATE, DELETE
    ON invoices, handler_calls, sandbox_probe, typed_probe, hostile_seen, hostile_target, ledger
    TO inbox_guest;
