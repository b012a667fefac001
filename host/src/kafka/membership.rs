//! Whether this member is in its consumer group: from librdkafka's statistics
//! (every 5 s, no round trip) and, where the brokers answer DescribeGroups,
//! from the coordinator's own list of members. Outside a steady group, with the
//! brokers answering, for longer than [`NOTICE_AFTER`]: logged once and
//! reported not ready; for longer than [`REJOIN_AFTER`]: made to leave and join
//! again.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::ClientConfig;

use super::poison::lock;
use super::settings::{MAX_POLL_INTERVAL_MS, SESSION_TIMEOUT_MS};

/// A rebalance that goes well ends within a session timeout or two (a
/// departed member is waited for that long, and a cooperative rebalance that
/// moves partitions takes two rounds); past three, the member is reported.
pub const NOTICE_AFTER: Duration = Duration::from_millis(SESSION_TIMEOUT_MS * 3);

/// Past twice librdkafka's own JoinGroup retry, the member leaves and joins
/// again by itself. Not sooner: each rejoin starts a rebalance for the whole
/// group, and members rejoining while others still wait out a killed member's
/// session kept a churning group from ever settling (measured).
pub const REJOIN_AFTER: Duration = Duration::from_millis(2 * (MAX_POLL_INTERVAL_MS + 3_000));

/// How often the coordinator is asked for the group's members.
const DESCRIBE_EVERY: Duration = Duration::from_secs(5);

/// Failed DescribeGroups calls, with none ever answered, after which the
/// brokers are taken not to support it (librdkafka's mock cluster does not).
const UNANSWERED_BEFORE_GIVING_UP: u32 = 3;

#[derive(Default)]
pub(super) struct Membership {
    /// Since when this member has been seen outside a steady group.
    outside_since: Mutex<Option<Instant>>,
    /// Outside for longer than [`NOTICE_AFTER`]: `/health/ready` says so.
    pub outside: Arc<AtomicBool>,
    /// Asks the poll thread to leave and join again.
    rejoin: AtomicBool,
    /// What the coordinator last said about the group.
    pub coordinator: Arc<CoordinatorView>,
}

/// The group as its coordinator lists it (DescribeGroups).
#[derive(Debug)]
pub struct CoordinatorView {
    /// Members listed in the group; -1 while not known (the brokers do not
    /// answer DescribeGroups, or have not yet).
    members: AtomicI64,
    /// 1: this member is listed; 0: the group is stable without it, although
    /// the coordinator listed it before; -1: not known.
    listed: AtomicI64,
    /// Whether the coordinator has ever listed this member: only then is its
    /// absence trusted (a broker may name members in a way not recognised).
    ever_listed: AtomicBool,
}

impl Default for CoordinatorView {
    fn default() -> Self {
        Self {
            members: AtomicI64::new(-1),
            listed: AtomicI64::new(-1),
            ever_listed: AtomicBool::new(false),
        }
    }
}

impl CoordinatorView {
    /// Members the coordinator lists in the group, when it answers.
    pub fn members(&self) -> Option<i64> {
        Some(self.members.load(Ordering::SeqCst)).filter(|m| *m >= 0)
    }

    /// Whether the coordinator lists this member, when it can tell.
    pub fn listed(&self) -> Option<bool> {
        match self.listed.load(Ordering::SeqCst) {
            1 => Some(true),
            0 => Some(false),
            _ => None,
        }
    }

    fn unknown(&self) {
        self.members.store(-1, Ordering::SeqCst);
        self.listed.store(-1, Ordering::SeqCst);
    }

    /// Reads one DescribeGroups answer: the group's state and its members'
    /// (member id, client id).
    fn describe(&self, state: &str, members: &[(&str, &str)], client_id: &str) {
        self.members.store(members.len() as i64, Ordering::SeqCst);
        let listed = members
            .iter()
            .any(|(member_id, listed_id)| is_this_member(listed_id, member_id, client_id));
        if listed {
            self.ever_listed.store(true, Ordering::SeqCst);
        }
        let stable = state == "Stable";
        let verdict = match (listed, stable && self.ever_listed.load(Ordering::SeqCst)) {
            (true, _) => 1,
            (false, true) => 0,
            (false, false) => -1,
        };
        self.listed.store(verdict, Ordering::SeqCst);
    }
}

/// Whether a listed member is this one: by its client id, or (brokers that
/// leave it empty) by the member id Kafka makes of it (`<client.id>-<uuid>`).
fn is_this_member(listed_client_id: &str, member_id: &str, client_id: &str) -> bool {
    listed_client_id == client_id
        || member_id
            .strip_prefix(client_id)
            .is_some_and(|rest| rest.starts_with('-'))
}

impl Membership {
    /// Reads the group's state from one statistics report. Time while the
    /// brokers are unreachable does not count: the member cannot rejoin then,
    /// and `/health/ready` already says the brokers are away.
    pub(super) fn observe(&self, state: &str, join_state: &str, brokers_reachable: bool) {
        let mut since = lock(&self.outside_since);
        if !brokers_reachable {
            *since = None;
            return;
        }
        let steady = state == "up" && join_state == "steady";
        let dropped = self.coordinator.listed() == Some(false);
        if steady && !dropped {
            *since = None;
            if self.outside.swap(false, Ordering::SeqCst) {
                tracing::info!("back in the consumer group");
            }
            return;
        }
        let outside_for = since.get_or_insert_with(Instant::now).elapsed();
        if outside_for >= NOTICE_AFTER && !self.outside.swap(true, Ordering::SeqCst) {
            tracing::warn!(
                state,
                join_state,
                coordinator_lists_member = !dropped,
                outside_s = outside_for.as_secs(),
                "this member has been outside its consumer group (or joining it) for too long; \
                 reported not ready, and it leaves and joins again if this lasts {} s",
                REJOIN_AFTER.as_secs()
            );
        }
        if outside_for >= REJOIN_AFTER {
            tracing::warn!(
                state,
                join_state,
                outside_s = outside_for.as_secs(),
                "leaving the consumer group and joining it again"
            );
            // The next attempt gets the whole bound again.
            *since = Some(Instant::now());
            self.rejoin.store(true, Ordering::SeqCst);
        }
    }

    /// Whether the poll thread should leave and join again (clears the request).
    pub fn take_rejoin(&self) -> bool {
        self.rejoin.swap(false, Ordering::SeqCst)
    }
}

/// Asks the coordinator for the group's members every [`DESCRIBE_EVERY`],
/// through a client of its own (`connection`: no group, so nothing here ever
/// holds the member up), until `running` is cleared; stops early when the
/// brokers never answer.
pub(super) fn spawn_describer(
    connection: ClientConfig,
    group: String,
    client_id: String,
    view: Arc<CoordinatorView>,
    running: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let client: BaseConsumer = connection
        .create()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    thread::Builder::new()
        .name("kafka-describe".into())
        .spawn(move || {
            let mut answered = false;
            let mut unanswered = 0;
            while running.load(Ordering::SeqCst) {
                match client.fetch_group_list(Some(&group), DESCRIBE_EVERY) {
                    Ok(list) => match list.groups().iter().find(|g| g.name() == group) {
                        Some(info) => {
                            let members: Vec<(&str, &str)> = info
                                .members()
                                .iter()
                                .map(|m| (m.id(), m.client_id()))
                                .collect();
                            tracing::debug!(
                                state = info.state(),
                                ?members,
                                "the coordinator's view of the group"
                            );
                            answered = true;
                            view.describe(info.state(), &members, &client_id);
                        }
                        None => {
                            tracing::debug!(
                                groups = list.groups().len(),
                                "the coordinator did not describe the group"
                            );
                            view.unknown()
                        }
                    },
                    Err(e) => {
                        tracing::debug!(error = %e, "DescribeGroups failed");
                        view.unknown();
                        unanswered += 1;
                        if !answered && unanswered >= UNANSWERED_BEFORE_GIVING_UP {
                            tracing::info!(
                                error = %e,
                                "the brokers do not answer DescribeGroups; whether this member is \
                                 in its group is judged from librdkafka's state alone"
                            );
                            return;
                        }
                    }
                }
                let next = Instant::now() + DESCRIBE_EVERY;
                while running.load(Ordering::SeqCst) && Instant::now() < next {
                    thread::sleep(Duration::from_millis(100));
                }
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_member_is_recognised_by_client_id_or_by_the_member_id_made_of_it() {
        assert!(is_this_member("inbox-host-a", "whatever", "inbox-host-a"));
        assert!(is_this_member("", "inbox-host-a-0f3c", "inbox-host-a"));
        assert!(!is_this_member("", "inbox-host-ab-0f3c", "inbox-host-a"));
        assert!(!is_this_member(
            "inbox-host-b",
            "inbox-host-b-1",
            "inbox-host-a"
        ));
    }
}
