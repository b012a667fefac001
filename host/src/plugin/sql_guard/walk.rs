//! The walk over every node of a parsed statement: function calls, relations
//! and write targets, checked against what is denied.

use serde_json::Value;

use super::denied::{DENIED_FUNCTIONS, DENIED_PREFIXES, EARLIER, SESSION};
use super::{violation, Violation, HOST_SCHEMA};

/// Visits every node of the serialized tree. Nodes are recognised by fields only
/// their type has, not by the `{"FuncCall": {...}}` wrapper: a node held directly
/// by its parent (`InsertStmt.relation`, `SelectStmt.larg`) has no wrapper.
pub(super) fn walk(value: &Value) -> Result<(), Violation> {
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
