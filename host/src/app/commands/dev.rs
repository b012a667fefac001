//! `inbox-host dev`: a throwaway PostgreSQL and a local Kafka-protocol broker for
//! trying inbox-host out, with optional sample orders.

use std::fmt::Write as _;
use std::future::Future;

use anyhow::Context;

use crate::app::database::connect;
use crate::cli::DevArgs;
use crate::embedded::{Durability, LocalBroker, TempPostgres};
use crate::inbox;
use crate::kafka::{self, OutgoingRecord};

pub async fn dev(args: DevArgs, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let broker = LocalBroker::start()?;
    for topic in &args.topics {
        broker.create_topic(topic, args.partitions)?;
    }
    let postgres = if args.broker_only {
        None
    } else {
        Some(tokio::task::spawn_blocking(|| TempPostgres::start(Durability::Throwaway)).await??)
    };
    if let Some(pg) = &postgres {
        let pool = connect(&pg.url(), 4).await?;
        inbox::migrate(&pool).await.context("applying migrations")?;
        inbox::apply_example_tables(&pool).await?;
    }
    if args.sample_orders > 0 {
        let topic = args
            .topics
            .first()
            .context("--sample-orders needs a --topic")?;
        kafka::produce(
            broker.bootstrap(),
            &sample_orders(topic, args.sample_orders),
        )
        .await?;
    }

    // `export` lines: paste them into a shell, or source the --env-file.
    let mut env = format!(
        "export KAFKA_BROKERS={}\nexport INBOX_TOPIC={}\n",
        broker.bootstrap(),
        args.topics.join(",")
    );
    if let Some(pg) = &postgres {
        writeln!(env, "export DATABASE_URL={}", pg.url())?;
    }
    print!("{env}");
    if let Some(path) = &args.env_file {
        // Written last and renamed into place, so a reader never sees half of it.
        let partial = path.with_extension("partial");
        std::fs::write(&partial, &env)?;
        std::fs::rename(&partial, path)?;
    }
    eprintln!("local broker and database are up; Ctrl-C, SIGTERM or closing the terminal stops and deletes them");
    shutdown.await;
    Ok(())
}

/// `{"order_id": "order-N", "amount": N}` with a `message_id` header.
fn sample_orders(topic: &str, count: u32) -> Vec<OutgoingRecord> {
    (1..=count)
        .map(|n| {
            let id = format!("order-{n}");
            OutgoingRecord {
                topic: topic.to_string(),
                partition: None,
                key: Some(id.clone().into_bytes()),
                headers: vec![("message_id".into(), id.clone().into_bytes())],
                payload: serde_json::json!({ "order_id": id, "amount": 10 * n })
                    .to_string()
                    .into_bytes(),
                timestamp_ms: None,
            }
        })
        .collect()
}
