//! The statement check, case by case.

use super::*;

fn refused(sql: &str) -> Violation {
    match check(sql) {
        Ok(_) => panic!("allowed: {sql}"),
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
        assert!(check(sql).is_ok(), "{sql}");
    }
}

#[test]
fn statements_returning_rows_are_marked_for_the_row_bound_with_their_own_text() {
    for (sql, rows_in_cte, text) in [
        ("SELECT 1;", true, "SELECT 1"),
        ("  select 1 ; ", true, "select 1"),
        (
            "SELECT a FROM t -- trailing",
            true,
            "SELECT a FROM t -- trailing",
        ),
        ("INSERT INTO t (x) VALUES ($1) RETURNING id", true, ""),
        ("INSERT INTO t (x) VALUES ($1)", false, ""),
        ("UPDATE t SET x = 1 RETURNING x", true, ""),
        ("DELETE FROM t", false, ""),
        ("WITH a AS (SELECT 1) SELECT * FROM a", true, ""),
        (
            "WITH ins AS (INSERT INTO o (x) VALUES ($1) RETURNING id) SELECT id FROM ins",
            false,
            "",
        ),
        ("VALUES (1), (2)", true, ""),
    ] {
        let admitted = check(sql).expect(sql);
        assert_eq!(admitted.rows_in_cte, rows_in_cte, "{sql}");
        if !text.is_empty() {
            assert_eq!(sql[admitted.start..admitted.end].trim(), text, "{sql}");
        }
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
    let sql = "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)";
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
