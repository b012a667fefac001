//! What the check refuses by name: functions that change session state or
//! reach outside the transaction, each with the reason the guest is told.

pub(super) const SESSION: &str = "it changes session state that would outlive this message";
pub(super) const LOCKS: &str = "advisory locks can outlive this message and block other consumers";
pub(super) const WAITS: &str = "a handler must not hold the inbox transaction open while it waits";
pub(super) const SERVER: &str =
    "it acts on the server or on other sessions, outside this transaction";
pub(super) const FILES: &str = "it reaches the server's file system";
pub(super) const DYNAMIC: &str = "it runs a SQL string that this check cannot see";
pub(super) const OUTSIDE: &str = "it reaches outside the inbox transaction";
pub(super) const EARLIER: &str = "it shows SQL that earlier messages sent on this connection";

/// Functions refused wherever they are called, by unqualified lower-case name.
pub(super) const DENIED_FUNCTIONS: &[(&str, &str)] = &[
    ("set_config", SESSION), // SET by another name: role, statement_timeout, search_path
    ("pg_sleep", WAITS), // the statement_timeout bounds it, but sleeping is never a handler's job
    ("pg_sleep_for", WAITS), // same as pg_sleep
    ("pg_sleep_until", WAITS), // same as pg_sleep
    ("pg_notify", OUTSIDE), // NOTIFY by another name: wakes other sessions
    ("pg_terminate_backend", SERVER), // kills another session
    ("pg_cancel_backend", SERVER), // cancels another session's query
    ("pg_reload_conf", SERVER), // reloads the server's configuration
    ("pg_rotate_logfile", SERVER), // server log management
    ("pg_rotate_logfile_old", SERVER), // same, adminpack's older name
    ("pg_switch_wal", SERVER), // forces a WAL segment switch
    ("pg_promote", SERVER), // promotes a standby
    ("pg_create_restore_point", SERVER), // writes a WAL restore point
    ("pg_log_backend_memory_contexts", SERVER), // writes another backend's state to the server log
    ("pg_import_system_collations", SERVER), // creates catalog entries (DDL by another name)
    ("pg_read_file", FILES), // reads any server file
    ("pg_read_binary_file", FILES), // same, as bytes
    ("pg_stat_file", FILES), // inspects server files
    ("pg_logdir_ls", FILES), // adminpack: lists the log directory
    ("loread", FILES),   // large-object I/O (see lo_)
    ("lowrite", FILES),  // large-object I/O (see lo_)
    ("pg_drop_replication_slot", SERVER), // drops a replication slot, outside the transaction
    ("setseed", SESSION), // seeds random() for the session: the next message's values would be predictable
    ("pg_prepared_statement", EARLIER), // the session's prepared statements: other messages' SQL
    ("query_to_xml", DYNAMIC), // executes its query string
    ("query_to_xmlschema", DYNAMIC), // same
    ("query_to_xml_and_xmlschema", DYNAMIC), // same
    ("cursor_to_xml", DYNAMIC), // reads a cursor, which is session state
    ("cursor_to_xmlschema", DYNAMIC), // same
    ("table_to_xml", DYNAMIC), // reads a table named by a string, unseen by the schema check
    ("table_to_xmlschema", DYNAMIC), // same
    ("table_to_xml_and_xmlschema", DYNAMIC), // same
    ("schema_to_xml", DYNAMIC), // reads every table of a schema named by a string
    ("schema_to_xml_and_xmlschema", DYNAMIC), // same
    ("database_to_xml", DYNAMIC), // reads every table of the database
    ("database_to_xml_and_xmlschema", DYNAMIC), // same
    ("ts_stat", DYNAMIC), // executes its query string
    ("ts_rewrite", DYNAMIC), // the (tsquery, text) form executes its query string
];

/// Function-name prefixes refused the same way.
pub(super) const DENIED_PREFIXES: &[(&str, &str)] = &[
    ("pg_advisory_", LOCKS),     // session-level locks survive the transaction
    ("pg_try_advisory_", LOCKS), // same, non-blocking
    ("dblink", OUTSIDE),         // opens connections that commit on their own
    ("pg_ls_", FILES),           // pg_ls_dir, pg_ls_logdir, pg_ls_waldir, ...
    ("pg_file_", FILES),         // adminpack: pg_file_write, pg_file_rename, ...
    ("lo_", FILES),              // large objects: lo_import/lo_export touch server files
    ("pg_logical_", SERVER),     // logical decoding: emits or consumes WAL messages
    ("pg_replication_", SERVER), // replication origins and slots
    ("pg_create_physical_replication_slot", SERVER), // creates a slot that outlives the transaction
    ("pg_create_logical_replication_slot", SERVER), // same
    ("pg_copy_", SERVER),        // pg_copy_{physical,logical}_replication_slot
    ("pg_stat_reset", SERVER),   // resets server-wide statistics
    ("pg_backup_", SERVER),      // starts or stops a base backup
    ("pg_wal_replay_", SERVER),  // pauses or resumes recovery
];
