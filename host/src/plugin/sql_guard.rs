//! The statement check run on every guest SQL string before it reaches PostgreSQL.
//!
//! It parses with PostgreSQL's own grammar (libpg_query, through `pg_query`), so
//! quoting, comments, dollar quotes and case cannot hide a statement from it. The
//! database role remains the real guard; this one refuses early, with a message
//! the guest can act on, what a handler must never do inside the host's
//! transaction: end or change the transaction, change session state, reach
//! outside the transaction, or touch the host's own schema.
//!
//! The guard parses with PostgreSQL's default `standard_conforming_strings = on`;
//! the host's sessions must keep that default, or the server could read a string
//! literal differently from the guard.

use pg_query::protobuf::{KeywordKind, Token};
use pg_query::NodeEnum;
use serde_json::Value;

/// Why a guest statement was refused: the rule's short name and a sentence for the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: &'static str,
    pub message: String,
}

/// The host's own schema: guests never name it.
const HOST_SCHEMA: &str = "inbox_host";

const SESSION: &str = "it changes session state that would outlive this message";
const LOCKS: &str = "advisory locks can outlive this message and block other consumers";
const WAITS: &str = "a handler must not hold the inbox transaction open while it waits";
const SERVER: &str = "it acts on the server or on other sessions, outside this transaction";
const FILES: &str = "it reaches the server's file system";
const DYNAMIC: &str = "it runs a SQL string that this check cannot see";
const OUTSIDE: &str = "it reaches outside the inbox transaction";
const EARLIER: &str = "it shows SQL that earlier messages sent on this connection";

/// Functions refused wherever they are called, by unqualified lower-case name.
const DENIED_FUNCTIONS: &[(&str, &str)] = &[
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
const DENIED_PREFIXES: &[(&str, &str)] = &[
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

/// The stack of the thread a statement is checked on. PostgreSQL's parser and
/// the tree's decoding recurse as deep as the statement nests, which a guest
/// chooses: on a worker's (or a guest fiber's) stack of a few MiB, a crafted
/// statement could overflow it and abort the process. Pages are only touched
/// as deep as a check goes.
const CHECK_STACK_BYTES: usize = 256 << 20;

/// Checks one guest statement. Ok means it may run inside the inbox transaction.
///
/// Runs on a thread of its own with a deep stack (see [`CHECK_STACK_BYTES`]);
/// callers remember verdicts, so only statements not seen before pay for it.
pub fn check(sql: &str) -> Result<(), Violation> {
    let unchecked = |why: String| {
        violation(
            "syntax",
            format!("the statement could not be checked ({why}): simplify it"),
        )
    };
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("sql-check".into())
            .stack_size(CHECK_STACK_BYTES)
            .spawn_scoped(scope, || check_here(sql))
            .map_err(|e| unchecked(e.to_string()))?
            .join()
            .unwrap_or_else(|_| Err(unchecked("the check panicked".into())))
    })
}

fn check_here(sql: &str) -> Result<(), Violation> {
    let parsed = pg_query::parse(sql, 0).map_err(|e| syntax_violation(sql, e))?;
    let stmt = match parsed.protobuf.stmts.as_slice() {
        [only] => only.stmt.as_ref().and_then(|n| n.node.as_ref()),
        [] => {
            return Err(violation(
                "single-statement",
                "an empty statement is not allowed: send exactly one SQL statement".into(),
            ))
        }
        many => {
            return Err(violation(
                "single-statement",
                format!(
                "{} statements were sent, and only one is allowed per call: send them one by one",
                many.len()
            ),
            ))
        }
    };
    let Some(stmt) = stmt else {
        return Err(violation(
            "syntax",
            "the statement parsed to nothing".into(),
        ));
    };
    check_kind(sql, stmt)?;
    // A generic walk of the serialized tree reaches every node, whatever its type;
    // `pg_query`'s own `nodes()` only visits a subset (not VALUES lists or RETURNING).
    let tree = serde_json::to_value(stmt).map_err(|e| {
        violation(
            "syntax",
            format!("the parsed statement could not be inspected: {e}"),
        )
    })?;
    walk(&tree)
}

fn violation(rule: &'static str, message: String) -> Violation {
    Violation { rule, message }
}

/// Allows SELECT (VALUES, set operations, CTEs), INSERT, UPDATE, DELETE and MERGE.
fn check_kind(sql: &str, stmt: &NodeEnum) -> Result<(), Violation> {
    use NodeEnum::*;
    let reason = match stmt {
        SelectStmt(_) | InsertStmt(_) | UpdateStmt(_) | DeleteStmt(_) | MergeStmt(_) => {
            return Ok(())
        }
        TransactionStmt(_) => {
            return Err(violation(
                "statement-kind",
                format!(
                    "transaction control ({}) is not allowed: the host owns the transaction; \
                     return an error from the handler to roll back",
                    leading_keywords(sql)
                ),
            ))
        }
        VariableShowStmt(_) => "read a setting with SELECT current_setting('name')",
        VariableSetStmt(_) | DiscardStmt(_) | AlterSystemStmt(_) => {
            "settings and session state belong to the host, and would outlive this message"
        }
        ListenStmt(_) | UnlistenStmt(_) | NotifyStmt(_) => {
            "notifications reach other sessions; write a row instead"
        }
        CopyStmt(_) => "COPY reaches files, programs or the client connection",
        LockStmt(_) => {
            "table locks stall other consumers until the host commits; \
             lock rows with SELECT ... FOR UPDATE"
        }
        DoStmt(_) | CallStmt(_) => {
            "procedural code runs outside this check, and procedures can commit"
        }
        ExplainStmt(_) => "EXPLAIN ANALYZE executes its statement outside this check",
        PrepareStmt(_) | ExecuteStmt(_) | DeallocateStmt(_) => {
            "prepared statements are session state"
        }
        DeclareCursorStmt(_) | FetchStmt(_) | ClosePortalStmt(_) => "cursors are session state",
        _ => {
            "a handler runs only SELECT, INSERT, UPDATE, DELETE and MERGE; \
             schema changes and maintenance belong to migrations"
        }
    };
    let what = leading_keywords(sql);
    Err(violation(
        "statement-kind",
        format!("{what} is not allowed: {reason}"),
    ))
}

/// The statement's leading keywords as the guest wrote them (`END`, `SET LOCAL`,
/// `CREATE TEMP TABLE`), to name what was refused.
fn leading_keywords(sql: &str) -> String {
    let words: Vec<String> = pg_query::scan(sql)
        .map(|scan| {
            scan.tokens
                .iter()
                .filter(|t| {
                    t.token != Token::SqlComment as i32 && t.token != Token::CComment as i32
                })
                .take_while(|t| t.keyword_kind != KeywordKind::NoKeyword as i32)
                .take(3)
                .filter_map(|t| sql.get(t.start as usize..t.end as usize))
                .map(str::to_uppercase)
                .collect()
        })
        .unwrap_or_default();
    if words.is_empty() {
        "this statement".into()
    } else {
        words.join(" ")
    }
}

/// Visits every node of the serialized tree. Nodes are recognised by fields only
/// their type has, not by the `{"FuncCall": {...}}` wrapper: a node held directly
/// by its parent (`InsertStmt.relation`, `SelectStmt.larg`) has no wrapper.
fn walk(value: &Value) -> Result<(), Violation> {
    match value {
        Value::Array(items) => items.iter().try_for_each(walk),
        Value::Object(fields) => {
            let has = |key: &str| fields.get(key).is_some_and(|v| !v.is_null());
            if has("funcname") && has("funcformat") {
                check_function(value)?; // FuncCall
            }
            if let (Some(Value::String(schema)), Some(Value::String(relname))) =
                (fields.get("schemaname"), fields.get("relname"))
            {
                check_relation(schema, relname)?; // RangeVar
            }
            if has("into_clause") {
                // SelectStmt; also the leftmost arm of a set operation, which PostgreSQL
                // turns into CREATE TABLE AS.
                return Err(violation(
                    "select-into",
                    "SELECT ... INTO is not allowed: it creates a table; use INSERT INTO ... SELECT"
                        .into(),
                ));
            }
            if fields.contains_key("returning_clause") {
                check_write_target(value)?; // INSERT, UPDATE, DELETE, MERGE
            }
            fields.values().try_for_each(walk)
        }
        _ => Ok(()),
    }
}

fn check_relation(schema: &str, relname: &str) -> Result<(), Violation> {
    if relname.eq_ignore_ascii_case("pg_prepared_statements") {
        return Err(violation(
            "function",
            format!("{relname} is not allowed: {EARLIER}"),
        ));
    }
    if schema.eq_ignore_ascii_case(HOST_SCHEMA) {
        return Err(violation(
            "host-schema",
            format!(
                "{schema}.{relname} is not allowed: \
                 the {HOST_SCHEMA} schema belongs to the host; use your own tables"
            ),
        ));
    }
    Ok(())
}

/// Writing `pg_settings` runs `set_config()` through the view's update rule.
fn check_write_target(stmt: &Value) -> Result<(), Violation> {
    let relname = stmt
        .get("relation")
        .and_then(|r| r.get("relname"))
        .and_then(Value::as_str);
    if relname.is_some_and(|r| r.eq_ignore_ascii_case("pg_settings")) {
        return Err(violation(
            "function",
            format!("writing pg_settings is not allowed: it calls set_config(), and {SESSION}"),
        ));
    }
    Ok(())
}

/// `funcname` is the qualified name as a list of `{"node": {"String": {"sval": ..}}}`.
fn check_function(call: &Value) -> Result<(), Violation> {
    let parts: Vec<&str> = call
        .get("funcname")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(|n| n.pointer("/node/String/sval").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    let Some((name, qualifiers)) = parts.split_last() else {
        return Ok(());
    };
    if let Some(schema) = qualifiers
        .last()
        .filter(|s| s.eq_ignore_ascii_case(HOST_SCHEMA))
    {
        return Err(violation(
            "host-schema",
            format!(
                "{schema}.{name}() is not allowed: the {HOST_SCHEMA} schema belongs to the host"
            ),
        ));
    }
    let name = name.to_lowercase();
    let denied = DENIED_FUNCTIONS
        .iter()
        .find(|(n, _)| *n == name)
        .or_else(|| DENIED_PREFIXES.iter().find(|(p, _)| name.starts_with(p)));
    match denied {
        Some((_, why)) => Err(violation(
            "function",
            format!("{name}() is not allowed: {why}"),
        )),
        None => Ok(()),
    }
}

/// The parser's message, with the 1-based character position PostgreSQL would
/// report (`pg_query` drops libpg_query's cursor position, so it is found again).
fn syntax_violation(sql: &str, error: pg_query::Error) -> Violation {
    let message = match error {
        pg_query::Error::Parse(m) | pg_query::Error::Scan(m) => m,
        pg_query::Error::Conversion(_) => "the statement contains a NUL byte".into(),
        // prost refuses trees over 100 messages deep (about 50 nested expressions).
        pg_query::Error::Decode(_) => "the statement is nested too deeply to check".into(),
        other => other.to_string(),
    };
    let at = error_offset(sql, &message)
        .map(|byte| format!(" (at character {})", sql[..byte].chars().count() + 1));
    violation(
        "syntax",
        format!(
            "PostgreSQL cannot parse the statement: {message}{}",
            at.unwrap_or_default()
        ),
    )
}

/// Byte offset of the token a `... at or near "X"` / `... at end of input` error names.
fn error_offset(sql: &str, message: &str) -> Option<usize> {
    if message.ends_with("at end of input") {
        return Some(sql.len());
    }
    let near = message.split_once(" at or near \"")?.1.strip_suffix('"')?;
    let candidates: Vec<usize> = match pg_query::scan(sql) {
        Ok(scan) => scan
            .tokens
            .iter()
            .filter(|t| sql.get(t.start as usize..t.end as usize) == Some(near))
            .map(|t| t.start as usize)
            .collect(),
        Err(_) => sql.match_indices(near).map(|(i, _)| i).collect(),
    };
    // When the token occurs more than once, the first one whose prefix fails the
    // same way is where the parser stopped: a shorter prefix only runs out of input,
    // a longer one stops there too. So the answer is a partition point, found
    // with a logarithmic number of parses (a linear search made a statement
    // repeating the token take seconds to refuse).
    // The parser alone (no tree built and decoded) answers the question.
    let fails_here = |start: &usize| {
        let prefix = sql.get(..start + near.len()).unwrap_or(sql);
        matches!(pg_query::split_with_parser(prefix), Err(pg_query::Error::Split(m)) if m == message)
    };
    match candidates.as_slice() {
        [only] => Some(*only),
        _ => {
            let at = candidates.partition_point(|start| !fails_here(start));
            candidates.get(at).copied()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(sql: &str) -> Violation {
        match check(sql) {
            Ok(()) => panic!("allowed: {sql}"),
            Err(v) => v,
        }
    }

    fn assert_rule(rule: &str, cases: &[&str]) {
        for sql in cases {
            let v = refused(sql);
            assert_eq!(v.rule, rule, "{sql}: {}", v.message);
        }
    }

    #[test]
    fn allows_data_statements() {
        for sql in [
            "SELECT id, amount FROM invoices WHERE order_id = $1",
            "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)",
            "INSERT INTO invoices (order_id) VALUES ($1) RETURNING id",
            "UPDATE invoices SET amount = amount + $1 WHERE id = $2",
            "DELETE FROM invoices WHERE id = $1",
            "MERGE INTO stock s USING (VALUES ($1, $2)) v(sku, n) ON s.sku = v.sku \
             WHEN MATCHED THEN UPDATE SET n = s.n + v.n WHEN NOT MATCHED THEN INSERT VALUES (v.sku, v.n)",
            "INSERT INTO totals (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = totals.n + 1",
            "WITH ins AS (INSERT INTO orders (x) VALUES ($1) RETURNING id) SELECT id FROM ins",
            "SELECT now(), current_setting('TimeZone'), txid_current()",
            "VALUES (1)",
            "SELECT 1 UNION ALL SELECT 2",
            "SELECT * FROM t FOR UPDATE",
            "SELECT 1;",
            "  select 1 ; ",
            "-- comment\nSELECT count(*) FROM public.inbox",
        ] {
            assert_eq!(check(sql), Ok(()), "{sql}");
        }
    }

    #[test]
    fn single_statement() {
        assert_rule(
            "single-statement",
            &[
                "SELECT 1; COMMIT",
                "INSERT INTO t VALUES (1); COMMIT",
                "",
                "   ",
                ";",
                "-- nothing",
            ],
        );
    }

    #[test]
    fn statement_kind() {
        assert_rule(
            "statement-kind",
            &[
                "COMMIT",
                "END",
                "ROLLBACK",
                "ABORT",
                "BEGIN",
                "START TRANSACTION",
                "SAVEPOINT a",
                "ROLLBACK TO a",
                "RELEASE a",
                "PREPARE TRANSACTION 'x'",
                "COMMIT PREPARED 'x'",
                "SET ROLE postgres",
                "RESET ROLE",
                "SET SESSION AUTHORIZATION postgres",
                "SET statement_timeout = 0",
                "SET LOCAL statement_timeout = 0",
                "SHOW search_path",
                "CREATE TEMP TABLE inbox (x int)",
                "CREATE TABLE x (a int)",
                "ALTER TABLE t ADD COLUMN b int",
                "DROP TABLE t",
                "TRUNCATE inbox_host.inbox",
                "GRANT SELECT ON t TO public",
                "REVOKE SELECT ON t FROM public",
                "COMMENT ON TABLE t IS 'x'",
                "LISTEN x",
                "NOTIFY x",
                "UNLISTEN *",
                "COPY t TO PROGRAM 'id'",
                "DO $$ BEGIN END $$",
                "CALL p()",
                "LOCK TABLE t",
                "DISCARD ALL",
                "PREPARE q AS SELECT 1",
                "EXECUTE q",
                "DEALLOCATE q",
                "VACUUM t",
                "ANALYZE t",
                "CHECKPOINT",
                "LOAD 'x'",
                "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
                "FETCH c",
                "CLOSE c",
                "REFRESH MATERIALIZED VIEW v",
                "CLUSTER t",
                "REINDEX TABLE t",
                "SECURITY LABEL ON TABLE t IS 'x'",
                "IMPORT FOREIGN SCHEMA s FROM SERVER f INTO public",
                "EXPLAIN ANALYZE DELETE FROM t",
                "/* hi */ commit",
            ],
        );
    }

    #[test]
    fn messages_name_the_statement() {
        assert_eq!(
            refused("COMMIT").message,
            "transaction control (COMMIT) is not allowed: the host owns the transaction; return an error from the handler to roll back"
        );
        assert!(refused("end")
            .message
            .starts_with("transaction control (END) "));
        assert!(refused("ROLLBACK TO a")
            .message
            .starts_with("transaction control (ROLLBACK TO) "));
        assert!(refused("SET LOCAL statement_timeout = 0")
            .message
            .starts_with("SET LOCAL is not allowed"));
        assert!(refused("CREATE TEMP TABLE inbox (x int)")
            .message
            .starts_with("CREATE TEMP TABLE is not allowed"));
    }

    #[test]
    fn function() {
        assert_rule(
            "function",
            &[
                "SELECT set_config('role','postgres',false)",
                "select PG_CATALOG.set_config('statement_timeout','0',false)",
                "SELECT \"set_config\"('role','p',false)",
                "SELECT pg_catalog.SET_CONFIG('role','p',false)",
                "SELECT pg_advisory_lock(1)",
                "SELECT pg_try_advisory_xact_lock(1)",
                "SELECT pg_sleep(10)",
                "SELECT pg_terminate_backend(123)",
                "SELECT dblink_exec('x','y')",
                "SELECT * FROM dblink('x','y') AS t(a int)",
                "WITH x AS (SELECT set_config('role','p',false)) SELECT 1",
                "INSERT INTO t SELECT pg_sleep(1)",
                "SELECT lo_import('/etc/passwd')",
                "SELECT pg_read_file('/etc/passwd')",
                "SELECT query_to_xml('commit', true, true, '')",
                "SELECT pg_notify('c', 'x')",
                "SELECT pg_ls_dir('.')",
                "SELECT pg_stat_reset()",
                "SELECT pg_create_logical_replication_slot('s', 'p')",
                "VALUES (pg_sleep(1))",
                "SELECT 1 UNION SELECT pg_sleep(1)",
                "SELECT 1 EXCEPT (SELECT 2 INTERSECT SELECT pg_sleep(1))",
                "INSERT INTO t VALUES (1) RETURNING pg_sleep(1)",
                "UPDATE t SET a = 1 WHERE b IN (SELECT pg_sleep(1))",
                "DELETE FROM t RETURNING set_config('role','p',false)",
                "SELECT 1 FROM t ORDER BY pg_sleep(1)",
                "SELECT ARRAY[pg_sleep(1)]",
                "SELECT count(*) FILTER (WHERE pg_sleep(1) IS NULL) FROM t",
                "SELECT coalesce(pg_sleep(1), pg_sleep(2))",
                "SELECT CASE WHEN true THEN pg_sleep(1) END",
                "SELECT * FROM ROWS FROM (pg_sleep(1))",
                "MERGE INTO t USING s ON t.a = s.a WHEN MATCHED THEN UPDATE SET b = pg_sleep(1)::text",
                "INSERT INTO t VALUES (1) ON CONFLICT (a) DO UPDATE SET b = set_config('role','p',true)",
                "UPDATE pg_settings SET setting = '0' WHERE name = 'statement_timeout'",
            ],
        );
        assert_eq!(
            refused("SELECT set_config('role','postgres',false)").message,
            "set_config() is not allowed: it changes session state that would outlive this message"
        );
    }

    #[test]
    fn host_schema() {
        assert_rule(
            "host-schema",
            &[
                "DELETE FROM inbox_host.inbox",
                "UPDATE inbox_host.inbox SET status = 'x'",
                "SELECT * FROM inbox_host.inbox",
                "SELECT * FROM \"inbox_host\".\"inbox\"",
                "INSERT INTO t SELECT * FROM INBOX_HOST.inbox",
                "SELECT 1 WHERE EXISTS (SELECT 1 FROM inbox_host.inbox)",
                "WITH d AS (DELETE FROM inbox_host.inbox RETURNING 1) SELECT 1",
                "SELECT inbox_host.claim()",
                "SELECT 1 UNION SELECT 1 FROM inbox_host.inbox",
                "MERGE INTO inbox_host.inbox i USING t ON true WHEN MATCHED THEN DELETE",
            ],
        );
    }

    #[test]
    fn select_into() {
        assert_rule(
            "select-into",
            &[
                "SELECT 1 INTO newt",
                "SELECT * INTO TEMP t2 FROM t",
                "SELECT 1 INTO newt UNION SELECT 2",
                "WITH a AS (SELECT 1 INTO z) SELECT 1",
            ],
        );
    }

    #[test]
    fn syntax() {
        let v = refused("SELECT FROM WHERE");
        assert_eq!(v.rule, "syntax");
        assert_eq!(v.message, "PostgreSQL cannot parse the statement: syntax error at or near \"WHERE\" (at character 13)");
        // The second `t` is where it stops, as PostgreSQL would report.
        assert!(refused("SELECT t FROM t t t")
            .message
            .ends_with("syntax error at or near \"t\" (at character 19)"));
        assert!(refused("SELECT 1 +")
            .message
            .ends_with("syntax error at end of input (at character 11)"));
        assert!(refused("SELECT 'abc")
            .message
            .contains("unterminated quoted string"));
        assert_rule("syntax", &["SELEC 1", "SELECT (", "SELECT 1\0"]);
        // pg_query's decoder stops at 100 nested messages: refused, not crashed.
        let deep = refused(&format!("SELECT 1{}", "+1".repeat(100)));
        assert_eq!(
            (deep.rule, deep.message.contains("nested too deeply")),
            ("syntax", true)
        );
    }

    /// Statements built to be slow to check, each 64 KiB (the longest accepted):
    /// a syntax error after thousands of copies of its token, deep nesting of
    /// each kind, long lists. Each must be checked in milliseconds.
    fn adversarial_statements(bytes: usize) -> Vec<(&'static str, String)> {
        let fill = |head: &str, unit: &str, tail: &str| {
            let n = (bytes - head.len() - tail.len()) / unit.len();
            format!("{head}{}{tail}", unit.repeat(n))
        };
        vec![
            ("repeated error token", fill("SELECT t", ", t", " t t")),
            ("parentheses", {
                let n = bytes / 2 - 8;
                format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n))
            }),
            ("operators", fill("SELECT 1", "+1", "")),
            ("unary minus", fill("SELECT ", "- ", "1")),
            ("NOT", fill("SELECT ", "NOT ", "true")),
            ("IN list", fill("SELECT 1 WHERE 1 IN (1", ",1", ")")),
            ("CASE", fill("SELECT CASE", " WHEN true THEN 1", " END")),
            ("subqueries", {
                let n = bytes / 16;
                format!("SELECT {}1{}", "(SELECT ".repeat(n), ")".repeat(n))
            }),
            ("unterminated", fill("SELECT '", "x", "")),
        ]
    }

    #[test]
    fn statements_made_to_be_slow_are_checked_in_milliseconds() {
        for (what, sql) in adversarial_statements(64 << 10) {
            let started = std::time::Instant::now();
            let verdict = check(&sql);
            let took = started.elapsed();
            println!(
                "{what}: {took:?} {:?}",
                verdict.as_ref().map_err(|v| v.rule)
            );
            // Generous for a debug build on a loaded machine (a release build
            // takes a fraction); the quadratic check took 16-26 s at 1/40 of this size.
            assert!(took < std::time::Duration::from_secs(2), "{what}: {took:?}");
        }
    }

    /// `cargo test -p inbox-host --lib sql_guard -- --ignored --nocapture`
    #[test]
    #[ignore = "timing, not a check"]
    fn timing() {
        let sql =
            "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)";
        let mut per_round: Vec<f64> = (0..10)
            .map(|_| {
                let start = std::time::Instant::now();
                for _ in 0..1_000 {
                    assert!(check(std::hint::black_box(sql)).is_ok());
                }
                start.elapsed().as_secs_f64() * 1e6 / 1_000.0
            })
            .collect();
        per_round.sort_by(f64::total_cmp);
        println!(
            "sql_guard::check: median {:.1} µs/statement over 10 x 1000 checks ({per_round:.1?})",
            per_round[5]
        );
    }
}
