//! The invoice row billing writes, shared with the test plugins that write it
//! before misbehaving.
use inbox_guest::{Db, Event, HandlerError};
use serde::{de::Error as _, Deserialize, Deserializer};

/// The marker of billing v1, also written by the test plugins.
pub const V1_MARKER: &str = "billing-v1";

/// An order message: `{"order_id": "A-17" or 17, "amount": 12.5}`.
#[derive(Debug, Deserialize)]
pub struct Order {
    /// A JSON string, or a JSON integer kept as its decimal text.
    #[serde(deserialize_with = "string_or_integer")]
    pub order_id: String,
    /// In currency units (not cents); bound as `float8` into the `numeric` column.
    pub amount: f64,
}

/// Decodes the payload as an [`Order`] and inserts its invoice row.
///
/// A payload that is not an order is a non-retryable error.
pub fn insert(event: &Event, db: &Db, marker: &str) -> Result<Order, HandlerError> {
    let order: Order = event.json()?;
    db.execute(
        "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)",
        &[
            order.order_id.as_str().into(),
            order.amount.into(),
            event.message_id.as_str().into(),
            marker.into(),
        ],
    )?;
    Ok(order)
}

fn string_or_integer<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => Ok(s),
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
        other => Err(D::Error::custom(format!(
            "order_id must be a string or an integer, not {other}"
        ))),
    }
}
