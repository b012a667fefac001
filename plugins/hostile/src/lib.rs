//! One attack on the host per message, named by the payload: `<attack> [n]`.
//! What the host must survive, and the bound that holds, is in docs/security.md.
//!
//! - `sleep <ms>`: locks `hostile_target` row 1, then sleeps in a WASI clock poll.
//! - `busy-statements`: locks row 1, then runs short statements for ever.
//! - `error-nul`: fails (retryable) with a message holding a NUL byte.
//! - `error-huge <bytes>`: fails (retryable) with a message that long.
//! - `print <lines>`: writes that many lines to stdout, then succeeds.
//! - `refusals <n>`: sends n statements the host refuses (60 KB each), then succeeds.
//! - `params <n>`: one statement with n parameters.
//! - `param-mismatch`: one parameter fewer than the statement uses.
//! - `big-param <bytes>`: one text parameter that long.
//! - `timestamps`: reads `infinity` and `-infinity` (timestamptz and
//!   timestamp), writes what it got to `hostile_seen`, and binds them back.
//! - `timestamp-max`: reads the last timestamp PostgreSQL can hold.
//! - `extremes`: reads each type's extreme values, binds each back, and writes
//!   both to `hostile_seen`.
//! - `nulls <rows>`: selects that many rows of 400 NULLs.
//! - `slow-check`: a 64 KiB statement built to be slow to check (a syntax
//!   error after 21,000 copies of its token).
//! - `refused-result`: inserts into `hostile_seen`, then reads back a column
//!   type the host refuses (IH003), ignores the error and returns ok.
use inbox_guest::{Db, Event, HandlerError, Value};

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    let payload = event.payload_str()?;
    let (attack, n) = match payload.split_once(' ') {
        Some((attack, n)) => (attack, n.trim().parse::<usize>().unwrap_or(0)),
        None => (payload, 0),
    };
    let fatal = |e: inbox_guest::DbError| HandlerError::fatal(e.to_string());
    let seen = |what: &str, value: String| {
        db.execute(
            "INSERT INTO hostile_seen (message_id, what, value) VALUES ($1, $2, $3)",
            &[event.message_id.as_str().into(), what.into(), value.into()],
        )
    };
    match attack {
        "sleep" => {
            lock_target(db)?;
            std::thread::sleep(std::time::Duration::from_millis(n as u64));
        }
        "busy-statements" => {
            lock_target(db)?;
            loop {
                db.query("SELECT count(*) FROM generate_series(1, 20000)", &[])
                    .map_err(fatal)?;
            }
        }
        "error-nul" => return Err(HandlerError::retryable("poison\0pill")),
        "error-huge" => return Err(HandlerError::retryable("x".repeat(n))),
        "print" => {
            for i in 0..n {
                println!("2026-01-01T00:00:00Z  INFO inbox_host: forged host line {i}");
            }
        }
        "refusals" => {
            let padding = "x".repeat(60_000);
            for _ in 0..n {
                let _ = db.execute(&format!("SET statement_timeout = 0 /* {padding} */"), &[]);
            }
        }
        "params" => {
            let params = vec![Value::Int32(1); n];
            let err = db.query("SELECT $1::int", &params).map(drop).map_err(fatal);
            seen("params", format!("{err:?}")).map_err(fatal)?;
            err?;
        }
        "param-mismatch" => {
            db.query("SELECT $1::int, $2", &[Value::Int32(1)])
                .map_err(fatal)?;
        }
        "big-param" => {
            db.query("SELECT length($1)", &["y".repeat(n).into()])
                .map_err(fatal)?;
        }
        "timestamps" => {
            let rows = db
                .query(
                    "SELECT 'infinity'::timestamptz AS a, '-infinity'::timestamptz AS b,
                            'infinity'::timestamp AS c, '-infinity'::timestamp AS d",
                    &[],
                )
                .map_err(fatal)?;
            for (i, value) in rows.get(0).expect("one row").values().iter().enumerate() {
                seen(&format!("read {i}"), format!("{value:?}")).map_err(fatal)?;
            }
            let back = db
                .query(
                    "SELECT $1::text, $2::text",
                    &[Value::Timestamp(i64::MAX), Value::Timestamp(i64::MIN)],
                )
                .map_err(fatal)?;
            let row = back.get(0).expect("one row");
            seen("bound", format!("{:?}", row.values())).map_err(fatal)?;
        }
        "timestamp-max" => {
            db.query(
                "SELECT '294276-12-31 23:59:59.999999+00'::timestamptz AS last",
                &[],
            )
            .map_err(fatal)?;
        }
        "extremes" => {
            let rows = db
                .query(
                    "SELECT 2147483647::int4 AS a, (-2147483648)::int4 AS b,
                            9223372036854775807::int8 AS c, (-9223372036854775808)::int8 AS d,
                            32767::int2 AS e, (-32768)::int2 AS f,
                            'NaN'::float8 AS g, 'Infinity'::float8 AS h, '-Infinity'::float4 AS i,
                            ''::text AS j, ''::bytea AS k, 'null'::jsonb AS l, '[]'::json AS m,
                            true AS n",
                    &[],
                )
                .map_err(fatal)?;
            let values = rows.get(0).expect("one row").values().to_vec();
            for (i, value) in values.into_iter().enumerate() {
                let back = db
                    .query("SELECT $1::text", std::slice::from_ref(&value))
                    .map_err(fatal)?;
                let text = back.get(0).expect("one row").values().to_vec();
                seen(&format!("{i:02}"), format!("{value:?} -> {text:?}")).map_err(fatal)?;
            }
        }
        "nulls" => {
            let sql = format!(
                "SELECT {} FROM generate_series(1, {n})",
                vec!["NULL::int"; 400].join(", ")
            );
            db.query(&sql, &[]).map_err(fatal)?;
        }
        "slow-check" => {
            let sql = format!("SELECT t{} t t", ", t".repeat(21_000));
            db.execute(&sql, &[]).map_err(fatal)?;
        }
        "refused-result" => {
            seen("refused-result", "written before the refused result".into()).map_err(fatal)?;
            let _ignored = db.query("SELECT now()::date AS day", &[]);
        }
        other => return Err(HandlerError::fatal(format!("unknown attack {other:?}"))),
    }
    Ok(())
}

fn lock_target(db: &Db) -> Result<(), HandlerError> {
    db.execute(
        "UPDATE hostile_target SET touched = touched + 1 WHERE id = 1",
        &[],
    )
    .map(drop)
    .map_err(|e| HandlerError::fatal(e.to_string()))
}
