//! The reference lab (README, "The reference lab"): each acknowledgement strategy against a
//! handler that writes an invoice and then fails, the duplicate case, the
//! outbox and an email beyond the database. Every number printed is read back
//! from the database, the broker and the lab's mail server.

mod email;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use sqlx::PgPool;

use crate::app::consume::{Pipeline, StopWhen};
use crate::app::database::{connect, connect_in};
use crate::app::delivery::Delivery;
use crate::app::relay::{self, RelayStatus};
use crate::cli::LabArgs;
use crate::embedded::NativeBilling;
use crate::embedded::{Durability, LocalBroker, TempPostgres};
use crate::inbox::{self, CommitOn, Outcome, Runner, RunnerSettings, Strategy};
use crate::kafka::{self, Consumer, ConsumerSettings, IdSources, OutgoingRecord, Publisher};

/// How long the lab waits for the relay to send the consume-transform-produce
/// row's message.
const RELAY_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// One printed row of the lab.
pub type LabRow = String;

/// Where the lab runs: the given broker and database, or throwaway ones.
struct Stage {
    brokers: String,
    pool: PgPool,
    run: String,
    /// On a database given with --database-url: the schema the lab's tables
    /// live in, dropped when the lab ends.
    schema: Option<String>,
    /// On brokers given with --brokers: the topics the lab made, deleted when
    /// it ends.
    topics: std::sync::Mutex<Vec<String>>,
    _broker: Option<LocalBroker>,
    _postgres: Option<TempPostgres>,
}

pub async fn lab(args: LabArgs) -> anyhow::Result<Vec<LabRow>> {
    let stage = Stage::new(args).await?;
    let strategies = [
        ("at-most-once", Strategy::AtMostOnce),
        (
            "at-least-once, on-persist",
            Strategy::AtLeastOnce(CommitOn::Persist),
        ),
        (
            "at-least-once, on-success",
            Strategy::AtLeastOnce(CommitOn::Success),
        ),
        ("exactly-once-inbox", Strategy::ExactlyOnceInbox),
    ];
    // One scenario at a time: each is a handful of group joins, and running them
    // side by side only makes the broker's coordinator the bottleneck.
    let mut rows = Vec::new();
    for (name, strategy) in strategies {
        rows.push(stage.failing_handler(name, strategy).await?);
    }
    rows.push(stage.duplicate().await?);
    rows.push(stage.consume_transform_produce().await?);
    rows.push(stage.email(true).await?);
    rows.push(stage.email(false).await?);
    stage.clean_up().await?;
    Ok(rows)
}

impl Stage {
    async fn new(args: LabArgs) -> anyhow::Result<Self> {
        let (broker, brokers) = match args.brokers {
            Some(b) => (None, b),
            None => {
                let broker = LocalBroker::start()?;
                let bootstrap = broker.bootstrap().to_string();
                (Some(broker), bootstrap)
            }
        };
        let (postgres, url) = match args.database_url {
            Some(url) => (None, url),
            None => {
                let pg = tokio::task::spawn_blocking(|| TempPostgres::start(Durability::Throwaway))
                    .await??;
                let url = pg.url();
                (Some(pg), url)
            }
        };
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
        let run = format!("{}-{nanos}", std::process::id());
        // A database of the user's: the lab's tables go to a schema of its own
        // (its invoices are never the application's), dropped at the end.
        let schema = postgres
            .is_none()
            .then(|| format!("inbox_lab_{}", run.replace('-', "_")));
        if let Some(schema) = &schema {
            let admin = connect(&url, 1).await?;
            sqlx::raw_sql(&format!("CREATE SCHEMA {schema}"))
                .execute(&admin)
                .await
                .with_context(|| format!("creating the lab's schema {schema}"))?;
        }
        let pool = connect_in(&url, 4, schema.as_deref()).await?;
        inbox::migrate(&pool).await.context("applying migrations")?;
        inbox::apply_example_tables(&pool).await?;
        if let Some(schema) = &schema {
            sqlx::raw_sql(&format!(
                "GRANT USAGE ON SCHEMA {schema} TO {}",
                inbox::DEFAULT_GUEST_ROLE
            ))
            .execute(&pool)
            .await?;
        }
        Ok(Self {
            brokers,
            pool,
            run,
            schema,
            topics: std::sync::Mutex::default(),
            _broker: broker,
            _postgres: postgres,
        })
    }

    /// On brokers given with --brokers: deletes the lab's topics. On a database
    /// given with --database-url: drops the lab's schema and the host's rows
    /// about the lab's groups.
    async fn clean_up(&self) -> anyhow::Result<()> {
        let topics = std::mem::take(&mut *self.topics.lock().unwrap_or_else(|e| e.into_inner()));
        if !topics.is_empty() {
            let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
            kafka::delete_topics(&self.brokers, &[], &topics)
                .await
                .context("deleting the lab's topics")?;
        }
        let Some(schema) = &self.schema else {
            return Ok(());
        };
        let groups = format!("lab-%-{}", self.run);
        for table in ["inbox", "dead_letters", "attempts", "outbox", "requests"] {
            sqlx::query(&format!(
                "DELETE FROM inbox_host.{table} WHERE consumer_group LIKE $1"
            ))
            .bind(&groups)
            .execute(&self.pool)
            .await?;
        }
        sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// One message; the first consumer's handler writes an invoice and fails; a
    /// fresh consumer in the same group then gets whatever is left.
    async fn failing_handler(&self, name: &str, strategy: Strategy) -> anyhow::Result<LabRow> {
        let slug = name.replace([',', ' '], "");
        let (topic, group, id) = self.names(&slug);
        self.create_topic(&topic).await?;
        let offset = self.publish(&topic, &id, 1).await?[0];
        let handler = Arc::new(NativeBilling {
            fail_after_write: true,
            ..NativeBilling::default()
        });
        let first = self
            .consume_once(&topic, &group, strategy, handler.clone())
            .await?;
        let first = first.context("the first consumer received nothing")?;
        let committed = self.committed_past(&group, &topic, offset).await?;

        let fixed = Arc::new(NativeBilling::default());
        let second = self
            .consume_once(&topic, &group, strategy, fixed.clone())
            .await?;
        let runs = handler.runs.load(Ordering::SeqCst) + fixed.runs.load(Ordering::SeqCst);
        let second = match second {
            None => "nothing delivered".to_string(),
            Some(d) => format!("processed={}", is_processed(&d)),
        };
        Ok(format!(
            "{name}  first: processed={} committed={committed}  second consumer: {second}  handler ran={runs} invoices={}",
            is_processed(&first),
            self.invoices(&id).await?
        ))
    }

    /// The same message on the topic twice, default strategy, one consumer per
    /// delivery so each delivery's numbers are read before the next.
    async fn duplicate(&self) -> anyhow::Result<LabRow> {
        let (topic, group, id) = self.names("duplicate");
        self.create_topic(&topic).await?;
        let offsets = self.publish(&topic, &id, 2).await?;
        let mut parts = Vec::new();
        for (n, offset) in offsets.iter().enumerate() {
            let handler = Arc::new(NativeBilling::default());
            let delivery = self
                .consume_once(&topic, &group, Strategy::ExactlyOnceInbox, handler)
                .await?
                .with_context(|| format!("delivery {} never arrived", n + 1))?;
            parts.push(format!(
                "delivery {}: processed={} duplicate={} committed={} invoices={}",
                n + 1,
                is_processed(&delivery),
                delivery.outcome == Outcome::Duplicate,
                self.committed_past(&group, &topic, *offset).await?,
                self.invoices(&id).await?
            ));
        }
        Ok(format!("duplicate  {}", parts.join("  ")))
    }

    /// The outbox: the first consumer's handler writes an invoice, publishes
    /// `invoice-created` and fails; a fresh consumer's handler succeeds; the
    /// relay sends what committed. `published` counts the records on the output
    /// topic (and, for the first consumer, any outbox row left waiting).
    async fn consume_transform_produce(&self) -> anyhow::Result<LabRow> {
        let (topic, group, id) = self.names("consume-transform-produce");
        let output = format!("{topic}-invoices-created");
        self.create_topic(&topic).await?;
        self.create_topic(&output).await?;
        self.publish(&topic, &id, 1).await?;
        let status = Arc::new(RelayStatus::for_host(true));
        let relay = tokio::spawn(relay::relay_forever(
            self.pool.clone(),
            Publisher::for_relay(&self.brokers, &[])?,
            status.clone(),
        ));
        let failing = Arc::new(NativeBilling {
            fail_after_write: true,
            publish_to: Some(output.clone()),
            ..NativeBilling::default()
        });
        let first = self
            .consume_once(&topic, &group, Strategy::ExactlyOnceInbox, failing)
            .await?
            .context("the first consumer received nothing")?;
        let first_published = self.published(&output).await + self.outbox_rows(&group).await?;
        let first = format!(
            "processed={} invoices={} published={first_published}",
            is_processed(&first),
            self.invoices(&id).await?
        );
        let fixed = Arc::new(NativeBilling {
            publish_to: Some(output.clone()),
            ..NativeBilling::default()
        });
        let second = self
            .consume_once(&topic, &group, Strategy::ExactlyOnceInbox, fixed)
            .await?
            .context("the second consumer received nothing")?;
        status.committed();
        let waiting_since = tokio::time::Instant::now();
        while self.published(&output).await < 1 && waiting_since.elapsed() < RELAY_WAIT {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        relay.abort();
        Ok(format!(
            "consume-transform-produce  first: {first}  second consumer: processed={} invoices={} published={}",
            is_processed(&second),
            self.invoices(&id).await?,
            self.published(&output).await
        ))
    }

    /// Records on partition 0 of `topic` (0 when it does not exist yet).
    async fn published(&self, topic: &str) -> i64 {
        let (brokers, topic) = (self.brokers.clone(), topic.to_string());
        tokio::task::spawn_blocking(move || kafka::high_watermarks(&brokers, &topic, 1))
            .await
            .ok()
            .and_then(Result::ok)
            .map_or(0, |w| w[0])
    }

    async fn outbox_rows(&self, group: &str) -> anyhow::Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT count(*) FROM inbox_host.outbox WHERE consumer_group = $1")
                .bind(group)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// A topic of one partition for the lab: on brokers given with --brokers,
    /// made through the admin API (a production cluster may not make topics on
    /// first use) and deleted when the lab ends.
    async fn create_topic(&self, name: &str) -> anyhow::Result<()> {
        if let Some(broker) = &self._broker {
            return broker.create_topic(name, 1);
        }
        kafka::create_topic(&self.brokers, &[], name, 1)
            .await
            .with_context(|| format!("creating the lab's topic {name} on {}", self.brokers))?;
        self.topics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(name.to_string());
        Ok(())
    }

    fn names(&self, slug: &str) -> (String, String, String) {
        let base = format!("lab-{slug}-{}", self.run);
        (base.clone(), base.clone(), format!("{base}-order"))
    }

    /// Publishes `copies` identical records (same message id); returns their offsets.
    async fn publish(&self, topic: &str, id: &str, copies: usize) -> anyhow::Result<Vec<i64>> {
        let record = OutgoingRecord {
            topic: topic.to_string(),
            partition: Some(0),
            key: Some(id.as_bytes().to_vec()),
            headers: vec![("message_id".into(), id.as_bytes().to_vec())],
            payload: serde_json::json!({ "order_id": id, "amount": 42 })
                .to_string()
                .into_bytes(),
            timestamp_ms: None,
        };
        let placed = kafka::produce(&self.brokers, &vec![record; copies]).await?;
        Ok(placed.into_iter().map(|(_, offset)| offset).collect())
    }

    /// Runs a fresh consumer in `group` until it handled one record or has
    /// nothing left to receive; returns what it received.
    async fn consume_once(
        &self,
        topic: &str,
        group: &str,
        strategy: Strategy,
        handler: Arc<NativeBilling>,
    ) -> anyhow::Result<Option<Delivery>> {
        let consumer = Consumer::join(&ConsumerSettings {
            brokers: self.brokers.clone(),
            group: group.to_string(),
            topics: vec![topic.to_string()],
            id_sources: IdSources::default(),
            // The host's session timeout (6 s) already bounds how long a fresh
            // consumer waits on a member that did not leave cleanly.
            extra: Vec::new(),
            revoke_grace: kafka::DEFAULT_REVOKE_GRACE,
        })?;
        let runner = Runner::new(
            self.pool.clone(),
            RunnerSettings {
                strategy,
                ..RunnerSettings::defaults(group, "lab")
            },
        );
        let (mut pipeline, mut seen) = Pipeline::observed(consumer, runner, handler);
        // The lab shows each delivery on its own: one record per transaction.
        pipeline.limits.batch_max = 1;
        let stop = StopWhen {
            after_deliveries: Some(1),
            caught_up: true,
        };
        pipeline.run(std::future::pending(), stop).await?;
        Ok(seen.try_recv().ok())
    }

    async fn committed_past(&self, group: &str, topic: &str, offset: i64) -> anyhow::Result<bool> {
        let (brokers, group, topic) = (self.brokers.clone(), group.to_string(), topic.to_string());
        let committed = tokio::task::spawn_blocking(move || {
            kafka::committed_offset(&brokers, &group, &topic, 0)
        })
        .await??;
        Ok(committed.is_some_and(|next| next > offset))
    }

    async fn invoices(&self, message_id: &str) -> anyhow::Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT count(*) FROM invoices WHERE message_id = $1")
                .bind(message_id)
                .fetch_one(&self.pool)
                .await?,
        )
    }
}

fn is_processed(delivery: &Delivery) -> bool {
    delivery.outcome == Outcome::Processed
}
