//! Binds the same SQL text first with a text and then with an integer parameter
//! and records the type PostgreSQL saw each time in `typed_probe(first, second)`.
//! A statement cache keyed by SQL text alone would reuse the text statement for
//! the integer and fail (or worse, misread it).
use inbox_guest::{Db, Event, HandlerError};

inbox_guest::handler!(handle);

const SQL: &str = "SELECT pg_typeof($1)::text AS seen";

fn handle(_event: &Event, db: &Db) -> Result<(), HandlerError> {
    let first: String = db
        .query(SQL, &["abc".into()])?
        .get(0)
        .map(|r| r.get("seen"))
        .transpose()?
        .unwrap_or_default();
    let second: String = db
        .query(SQL, &[42i64.into()])?
        .get(0)
        .map(|r| r.get("seen"))
        .transpose()?
        .unwrap_or_default();
    db.execute(
        "INSERT INTO typed_probe (first, second) VALUES ($1, $2)",
        &[first.into(), second.into()],
    )?;
    Ok(())
}
