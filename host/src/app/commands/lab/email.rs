//! The lab's email rows (docs/effects.md): the handler writes an invoice,
//! sends an email and fails; a fresh consumer's handler succeeds. Asked for as
//! a request after commit, the failed run's email is never sent and the one
//! that commits is sent once; sent naively from the handler, without a key,
//! both runs' emails go out. The mail server is a real HTTP server on loopback
//! that applies a keyed email once, as a receiver that honours
//! `Idempotency-Key` does, and every keyless one.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use axum::http::HeaderMap;

use super::{is_processed, LabRow, Stage, RELAY_WAIT};
use crate::app::requests::{self, SenderSettings};
use crate::egress::{AllowList, Gate, GateSettings, Schedule};
use crate::embedded::{Email, NativeBilling};
use crate::inbox::Strategy;

/// Emails applied: keys seen, and how many arrived without one.
#[derive(Default)]
struct Mailbox {
    keys: HashSet<String>,
    keyless: usize,
}

/// A mail server on a loopback port, until dropped.
struct MailServer {
    url: String,
    origin: String,
    mailbox: Arc<Mutex<Mailbox>>,
    server: tokio::task::JoinHandle<()>,
}

impl MailServer {
    async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("the lab's mail server: binding a loopback port")?;
        let origin = format!("http://{}", listener.local_addr()?);
        let mailbox = Arc::new(Mutex::new(Mailbox::default()));
        let kept = mailbox.clone();
        let app = axum::Router::new().fallback(move |headers: HeaderMap| {
            let kept = kept.clone();
            async move {
                let mut mailbox = kept.lock().unwrap_or_else(|e| e.into_inner());
                match headers.get("idempotency-key").and_then(|v| v.to_str().ok()) {
                    Some(key) => {
                        mailbox.keys.insert(key.to_string());
                    }
                    None => mailbox.keyless += 1,
                }
                "sent"
            }
        });
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "the lab's mail server stopped");
            }
        });
        Ok(Self {
            url: format!("{origin}/send"),
            origin,
            mailbox,
            server,
        })
    }

    fn emails(&self) -> usize {
        let mailbox = self.mailbox.lock().unwrap_or_else(|e| e.into_inner());
        mailbox.keys.len() + mailbox.keyless
    }
}

impl Drop for MailServer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Stage {
    /// `after_commit`: the email is a request after commit, sent by the
    /// group's sender; otherwise the handler sends it itself.
    pub(super) async fn email(&self, after_commit: bool) -> anyhow::Result<LabRow> {
        let (name, slug) = if after_commit {
            ("email, request after commit", "email-after-commit")
        } else {
            ("email, naive call", "email-naive")
        };
        let (topic, group, id) = self.names(slug);
        self.create_topic(&topic).await?;
        self.publish(&topic, &id, 1).await?;
        let mail = MailServer::start().await?;
        let email = || match after_commit {
            true => Some(Email::AfterCommit(mail.url.clone())),
            false => Some(Email::Naive(mail.url.clone())),
        };
        let sender = after_commit
            .then(|| self.sender(&group, &mail.origin))
            .transpose()?;
        let failing = Arc::new(NativeBilling {
            fail_after_write: true,
            email: email(),
            ..NativeBilling::default()
        });
        let first = self
            .consume_once(&topic, &group, Strategy::ExactlyOnceInbox, failing)
            .await?
            .context("the first consumer received nothing")?;
        let first = format!(
            "processed={} invoices={} emails={}",
            is_processed(&first),
            self.invoices(&id).await?,
            mail.emails() + self.requests_waiting(&group).await? as usize
        );
        let fixed = Arc::new(NativeBilling {
            email: email(),
            ..NativeBilling::default()
        });
        let second = self
            .consume_once(&topic, &group, Strategy::ExactlyOnceInbox, fixed)
            .await?
            .context("the second consumer received nothing")?;
        let waiting_since = tokio::time::Instant::now();
        while self.requests_waiting(&group).await? > 0 && waiting_since.elapsed() < RELAY_WAIT {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        if let Some(sender) = sender {
            sender.abort();
        }
        Ok(format!(
            "{name}  first: {first}  second consumer: processed={} invoices={} emails={}",
            is_processed(&second),
            self.invoices(&id).await?,
            mail.emails()
        ))
    }

    /// The group's sender of requests after commit, allowed to reach `origin`.
    fn sender(&self, group: &str, origin: &str) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let allow =
            AllowList::parse(&[origin.to_string()]).map_err(|e| anyhow::anyhow!(e.join("; ")))?;
        let gate = Gate::new(GateSettings {
            allow: Arc::new(allow),
            ..GateSettings::default()
        })
        .map_err(|e| anyhow::anyhow!(e))?;
        let settings = SenderSettings {
            group: group.to_string(),
            worker_id: "lab".into(),
            schedule: Schedule::default(),
            per_origin: 1,
            lease: std::time::Duration::from_secs(30),
        };
        // Polled: the lab's pipeline has no wake-up to give it.
        let committed = Arc::new(tokio::sync::Notify::new());
        Ok(tokio::spawn(requests::send_forever(
            self.pool.clone(),
            Arc::new(gate),
            committed,
            settings,
        )))
    }

    /// Requests of `group` stored and not yet sent.
    async fn requests_waiting(&self, group: &str) -> anyhow::Result<i64> {
        Ok(
            sqlx::query_scalar(
                "SELECT count(*) FROM inbox_host.requests WHERE consumer_group = $1",
            )
            .bind(group)
            .fetch_one(&self.pool)
            .await?,
        )
    }
}
