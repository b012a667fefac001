//! Claiming messages: the inbox rows that make a message ours, in the
//! partitions of its group and its record's hour (docs/semantics.md, "The
//! inbox over time"). The host's statements, on the host's role.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use std::collections::HashSet;
use std::time::Duration;

use super::store::{millis, sqlstate, ClaimBy, LOCK_NOT_AVAILABLE};
use super::Message;

/// By default, how far apart two records' timestamps may be for one to be a
/// duplicate of the other by message id alone (a producer that sends an id
/// again as a new record), across an hour boundary (`--resend-window-secs`).
/// Every delivery of the same record is a duplicate however old (its
/// timestamp, hence its partition, is the same), and so is every record of the
/// same id stamped in the same hour.
pub const DEFAULT_RESEND_WINDOW_SECS: u64 = 600;

/// The longest resend window: the lookup reaches into the neighbouring hours only.
pub const MAX_RESEND_WINDOW_SECS: u64 = 1_800;

const HOUR_MS: i64 = 3_600_000;

/// What inserting a batch's inbox rows told us.
pub(super) enum BatchClaim {
    /// These message ids got new rows (the others are duplicates); `xid` is the
    /// transaction, `None` when every row already existed.
    New {
        ids: HashSet<String>,
        xid: Option<String>,
    },
    /// Another open transaction holds one of the messages.
    Locked,
}

/// The rows, into the partitions of their group and their records' hours,
/// where a unique index on the dedupe key catches every other delivery of the
/// same record (and any record of the id in the same hour); minus the ids the
/// pre-0.4 table holds. `{resent}` adds the resend lookup of the neighbouring
/// hours ([`Neighbours`]). The timeouts sit in the row source, so they hold
/// before the insert can wait on another transaction's uncommitted row; the
/// role switch sits in `RETURNING`, evaluated after the rows are written with
/// the host's rights, and only when one was (a duplicate runs no handler).
const CLAIM: &str = "
    WITH m AS (SELECT id, topic, part, off, timestamptz 'epoch' + ms * interval '1 millisecond' AS at
                 FROM unnest($1::text[], $5::text[], $6::int[], $7::bigint[], $8::bigint[])
                      AS u(id, topic, part, off, ms)),
         before AS (SELECT b.message_id FROM inbox_host.inbox_before_0_4 b
                     WHERE b.message_id = ANY($1) AND b.consumer_group = $2)
         {seen}
    INSERT INTO inbox_host.inbox
        (message_id, consumer_group, worker_id, plugin_digest, topic, kafka_partition, kafka_offset, record_at)
    SELECT m.id, $2, $3, $4, m.topic, m.part, m.off, m.at
    FROM m, (SELECT set_config('lock_timeout', $9, true),
                    set_config('statement_timeout', $10, true),
                    set_config('idle_in_transaction_session_timeout', $11, true)) AS transaction_limits
    WHERE NOT EXISTS (SELECT FROM before b WHERE b.message_id = m.id) {resent}
    ON CONFLICT DO NOTHING
    RETURNING message_id, pg_current_xact_id()::text, set_config('role', coalesce($12, 'none'), true)";

/// The neighbouring hours' rows of the batch's ids, read with the hours as
/// constants ($13..$16): the statement is planned for its values, so
/// PostgreSQL plans, and locks, only those hours' partitions.
const SEEN: &str = ",
         seen AS (SELECT i.dedupe_key, i.record_at FROM inbox_host.inbox i
                   WHERE i.consumer_group = $2
                     AND i.dedupe_key = ANY(ARRAY(SELECT inbox_host.message_key($2, id) FROM m))
                     AND (i.record_at >= $13 AND i.record_at < $14 OR i.record_at >= $15 AND i.record_at <= $16))";

const RESENT: &str = "
      AND NOT EXISTS (SELECT FROM seen s
                       WHERE s.dedupe_key = inbox_host.message_key($2, m.id)
                         AND s.record_at >= m.at - make_interval(secs => $17)
                         AND s.record_at <= m.at + make_interval(secs => $17))";

static CLAIM_IN_AN_HOUR: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| CLAIM.replace("{seen}", "").replace("{resent}", ""));
static CLAIM_ACROSS_HOURS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| CLAIM.replace("{seen}", SEEN).replace("{resent}", RESENT));

/// Claims the messages' inbox rows and switches to the guest role; ids must be
/// distinct.
///
/// A batch whose records and resend windows lie in one hour needs one
/// statement: its rows meet that hour's unique index, which decides. A batch
/// whose windows reach into a neighbouring hour first takes a transaction lock
/// per message id (in one order, so batches never deadlock; the timeouts come
/// first, so the wait ends as *locked*), then claims with a snapshot taken
/// after those locks, looking the ids up in the neighbouring hours. Two
/// records of one id stamped within the resend window in different hours
/// are both such claims, so they wait for each other and the second finds the
/// first (docs/semantics.md).
pub(super) async fn claim_batch(
    conn: &mut PgConnection,
    messages: &[&Message],
    by: &ClaimBy<'_>,
) -> Result<BatchClaim, sqlx::Error> {
    let ids: Vec<&str> = messages.iter().map(|m| m.message_id.as_str()).collect();
    let stamps: Vec<Option<i64>> = messages.iter().map(|m| m.timestamp_ms).collect();
    let neighbours = Neighbours::of(&stamps, by.resend_window);
    if neighbours.is_some() {
        let locked = sqlx::query(
            "SELECT set_config('lock_timeout', $2, true),
                    set_config('statement_timeout', $3, true),
                    set_config('idle_in_transaction_session_timeout', $4, true),
                    (SELECT count(pg_advisory_xact_lock($6, h))
                       FROM (SELECT hashtext($5 || ':' || id) AS h FROM unnest($1::text[]) id ORDER BY 1) AS ids)",
        )
        .bind(&ids)
        .bind(millis(by.lock_timeout))
        .bind(millis(by.statement_timeout))
        .bind(millis(by.transaction_timeout))
        .bind(by.group)
        .bind(CLAIM_LOCK_CLASS)
        .execute(&mut *conn)
        .await;
        if let Err(e) = locked {
            if sqlstate(&e).as_deref() == Some(LOCK_NOT_AVAILABLE) {
                return Ok(BatchClaim::Locked);
            }
            return Err(e);
        }
    }
    let topics: Vec<&str> = messages.iter().map(|m| m.topic.as_str()).collect();
    let partitions: Vec<i32> = messages.iter().map(|m| m.partition).collect();
    let offsets: Vec<i64> = messages.iter().map(|m| m.offset).collect();
    let sql = match neighbours {
        None => CLAIM_IN_AN_HOUR.as_str(),
        Some(_) => CLAIM_ACROSS_HOURS.as_str(),
    };
    let query = sqlx::query_as(sql)
        .bind(&ids)
        .bind(by.group)
        .bind(by.worker_id)
        .bind(by.version)
        .bind(&topics)
        .bind(&partitions)
        .bind(&offsets)
        .bind(&stamps)
        .bind(millis(by.lock_timeout))
        .bind(millis(by.statement_timeout))
        .bind(millis(by.transaction_timeout))
        .bind(by.guest_role);
    let query = match neighbours {
        None => query,
        // Not kept prepared: planned each time for these hours.
        Some(n) => query
            .bind(n.before.0)
            .bind(n.before.1)
            .bind(n.after.0)
            .bind(n.after.1)
            .bind(by.resend_window.as_secs_f64())
            .persistent(false),
    };
    let inserted: Result<Vec<(String, String, String)>, sqlx::Error> =
        query.fetch_all(&mut *conn).await;
    match inserted {
        Ok(rows) => {
            let xid = rows.first().map(|(_, xid, _)| xid.clone());
            let ids = rows.into_iter().map(|(id, _, _)| id).collect();
            Ok(BatchClaim::New { ids, xid })
        }
        Err(e) if sqlstate(&e).as_deref() == Some(LOCK_NOT_AVAILABLE) => Ok(BatchClaim::Locked),
        Err(e) => Err(e),
    }
}

/// The spans outside the batch's own hour that its records' resend windows
/// reach, `[from, to)` before it and `[from, to]` after it; `None` when there
/// are none (every window inside one hour, or no timestamps at all). A batch
/// spanning two hours looks at all of `[earliest - window, latest + window]`.
#[derive(Clone, Copy)]
struct Neighbours {
    before: (DateTime<Utc>, DateTime<Utc>),
    after: (DateTime<Utc>, DateTime<Utc>),
}

impl Neighbours {
    fn of(stamps: &[Option<i64>], window: Duration) -> Option<Self> {
        let window = i64::try_from(window.as_millis()).unwrap_or(HOUR_MS);
        let earliest = stamps.iter().flatten().copied().min()?;
        let latest = stamps.iter().flatten().copied().max()?;
        let (from, to) = (
            earliest.saturating_sub(window),
            latest.saturating_add(window),
        );
        let own_hour = earliest.div_euclid(HOUR_MS) * HOUR_MS;
        let one_hour = latest < own_hour + HOUR_MS;
        if one_hour && from >= own_hour && to < own_hour + HOUR_MS {
            return None;
        }
        let time = |ms: i64| DateTime::from_timestamp_millis(ms).unwrap_or_default();
        let (own_from, own_to) = if one_hour {
            (own_hour, own_hour + HOUR_MS)
        } else {
            (to, to)
        };
        Some(Self {
            before: (time(from), time(own_from.min(to))),
            after: (time(own_to.max(from)), time(to)),
        })
    }
}

/// The first key of the claims' transaction locks ("inbo" in ASCII): the
/// two-key advisory locks are a space of their own, apart from an
/// application's one-key locks.
const CLAIM_LOCK_CLASS: i32 = 0x696e_626f;

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;
    const H: i64 = 1_000 * HOUR_MS;
    const TEN_MINUTES: Duration = Duration::from_secs(DEFAULT_RESEND_WINDOW_SECS);

    fn ms(t: DateTime<Utc>) -> i64 {
        t.timestamp_millis()
    }

    #[test]
    fn a_batch_whose_windows_stay_in_its_hour_looks_nowhere_else() {
        let of = |stamps: &[Option<i64>]| Neighbours::of(stamps, TEN_MINUTES);
        assert!(of(&[Some(H + 30 * MIN), Some(H + 40 * MIN)]).is_none());
        assert!(of(&[None, None]).is_none());
        assert!(of(&[]).is_none());
        // Without a window, only a batch that spans two hours looks outside.
        let none = |stamps: &[Option<i64>]| Neighbours::of(stamps, Duration::ZERO);
        assert!(none(&[Some(H), Some(H + 59 * MIN)]).is_none());
        assert!(none(&[Some(H - 1), Some(H + 1)]).is_some());
    }

    #[test]
    fn a_batch_near_an_hour_boundary_looks_into_the_neighbouring_hour_only() {
        let early = Neighbours::of(&[Some(H + 3 * MIN), None], TEN_MINUTES).expect("reaches back");
        assert_eq!(
            (ms(early.before.0), ms(early.before.1)),
            (H - 7 * MIN, H),
            "the previous hour's last 7 minutes"
        );
        assert!(ms(early.after.0) > ms(early.after.1), "nothing after");
        let late = Neighbours::of(&[Some(H + 55 * MIN)], TEN_MINUTES).expect("reaches ahead");
        assert!(ms(late.before.0) >= ms(late.before.1), "nothing before");
        assert_eq!(
            (ms(late.after.0), ms(late.after.1)),
            (H + HOUR_MS, H + 65 * MIN)
        );
    }

    #[test]
    fn a_batch_spanning_two_hours_looks_at_its_whole_span() {
        let n =
            Neighbours::of(&[Some(H + 50 * MIN), Some(H + 70 * MIN)], TEN_MINUTES).expect("spans");
        assert_eq!(ms(n.before.0), H + 40 * MIN);
        assert_eq!(ms(n.before.1), ms(n.after.0));
        assert_eq!(ms(n.after.1), H + 80 * MIN);
    }
}
