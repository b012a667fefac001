-- What an operator needs to act on a dead letter: how it failed, on which plugin
-- version, when it was produced, and whether (by whom, when) it was redriven.
ALTER TABLE inbox_host.dead_letters
    ADD COLUMN failure_kind     text,
    ADD COLUMN attempts         integer,
    ADD COLUMN plugin_digest    text,
    ADD COLUMN record_timestamp timestamptz,
    ADD COLUMN redriven_at      timestamptz,
    ADD COLUMN redriven_by      text,
    ADD COLUMN redriven_to      text,
    ADD COLUMN redrives         integer NOT NULL DEFAULT 0;

CREATE INDEX dead_letters_recorded_at ON inbox_host.dead_letters (consumer_group, recorded_at);
