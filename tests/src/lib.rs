//! Shared helpers of the end-to-end tests and the benchmarks: a throwaway
//! PostgreSQL per test, a local broker, the compiled plugins, the host binary.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use inbox_host::embedded::{Durability, TempPostgres};
use inbox_host::inbox::{self, Handler, HandlerError, Message, Tx};
use sqlx::postgres::PgPool;

pub mod bench;
pub mod broker;
pub mod host;
pub mod otlp;
pub mod raw_headers;
pub mod receiver;
pub mod stage;

/// A plugin built by `build.rs`, by crate name (`panic-after-write`). Library
/// components are named with underscores, command components keep their dashes.
pub fn plugin(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("PLUGIN_DIR"));
    let library = dir.join(format!("{}.wasm", name.replace('-', "_")));
    if library.is_file() {
        library
    } else {
        dir.join(format!("{name}.wasm"))
    }
}

/// A plugin in another language (`billing-py`, `sandbox-js`), built from
/// `plugins/<folder>` by the real `inbox-host build` the first time a test asks
/// for it after its sources (or the SDKs, or the WIT) changed. Tests in other
/// processes asking at the same time wait for that build.
pub fn guest_plugin(folder: &str) -> PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out_dir = PathBuf::from(env!("GUEST_PLUGIN_DIR"));
    std::fs::create_dir_all(&out_dir).expect("guest plugin folder");
    let lock = std::fs::File::create(out_dir.join(format!("{folder}.lock"))).expect("lock file");
    lock.lock().expect("lock");
    let source = root.join("plugins").join(folder);
    let stamp = sources_stamp(&[
        source.clone(),
        root.join("guest-sdk/python"),
        root.join("guest-sdk/js"),
        root.join("wit"),
    ]);
    let output = out_dir.join(format!("{folder}.wasm"));
    let stamp_file = out_dir.join(format!("{folder}.stamp"));
    if output.is_file() && std::fs::read_to_string(&stamp_file).ok() == Some(stamp.clone()) {
        return output;
    }
    let built = host::run(
        &[
            "build",
            source.to_str().expect("UTF-8 path"),
            "-o",
            output.to_str().expect("UTF-8 path"),
        ],
        &[],
    );
    assert!(
        built.status.success(),
        "inbox-host build {folder} failed:\n{}{}",
        String::from_utf8_lossy(&built.stdout),
        String::from_utf8_lossy(&built.stderr)
    );
    std::fs::write(&stamp_file, stamp).expect("stamp");
    output
}

/// A digest of every file under `dirs` (paths and contents).
fn sources_stamp(dirs: &[PathBuf]) -> String {
    use std::hash::{Hash, Hasher};
    fn walk(dir: &std::path::Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() && name != "__pycache__" && name != "node_modules" {
                walk(&path, files);
            } else if path.is_file() && path.extension().is_none_or(|e| e != "wasm") {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    for dir in dirs {
        walk(dir, &mut files);
    }
    files.sort();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for file in files {
        file.hash(&mut hasher);
        std::fs::read(&file).expect("source file").hash(&mut hasher);
    }
    format!("{:016x}", hasher.finish())
}

/// `billing` built with the marker `billing-v2`.
pub fn billing_v2() -> PathBuf {
    PathBuf::from(env!("PLUGIN_V2_DIR")).join("billing.wasm")
}

/// A database for one test: a fresh throwaway cluster, or a fresh database on the
/// server `DATABASE_URL` names. Migrated, with the example tables.
pub struct TestDb {
    pub pool: PgPool,
    pub url: String,
    _cluster: Option<TempPostgres>,
}

static DATABASES: AtomicU64 = AtomicU64::new(0);

impl TestDb {
    pub async fn start() -> Self {
        Self::start_with(Durability::Throwaway).await
    }

    pub async fn start_with(durability: Durability) -> Self {
        let db = Self::start_empty(durability).await;
        inbox::migrate(&db.pool).await.expect("migrations");
        inbox::apply_example_tables(&db.pool)
            .await
            .expect("example tables");
        db
    }

    /// A database the host's migrations have not touched (no `inbox_host`).
    pub async fn start_empty(durability: Durability) -> Self {
        let (cluster, url) = match std::env::var("DATABASE_URL") {
            Ok(server) => (None, fresh_database(&server).await),
            Err(_) => {
                let pg = tokio::task::spawn_blocking(move || TempPostgres::start(durability))
                    .await
                    .expect("start task")
                    .expect(
                        "starting a throwaway PostgreSQL (run scripts/setup, or set DATABASE_URL)",
                    );
                let url = pg.url();
                (Some(pg), url)
            }
        };
        // Pinged before use: tests stop and restart the server under it.
        let pool = inbox::pool_options(8)
            .test_before_acquire(true)
            .connect(&url)
            .await
            .expect("connecting");
        Self {
            pool,
            url,
            _cluster: cluster,
        }
    }

    /// Runs a `SELECT count(*) ...` (or any single bigint) query.
    pub async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&self.pool)
            .await
            .expect(sql)
    }

    /// The throwaway cluster behind this database (`None` on `DATABASE_URL`).
    pub fn cluster(&self) -> Option<&TempPostgres> {
        self._cluster.as_ref()
    }

    /// Inserts the inbox row of `message_id` (group `billing`) in a transaction
    /// left open: a zombie consumer holding the row.
    pub async fn hold_inbox_row(
        &self,
        message_id: &str,
        offset: i64,
    ) -> sqlx::Transaction<'static, sqlx::Postgres> {
        inbox::prepare_partitions(&self.pool, "billing", inbox::PREPARED_BEHIND)
            .await
            .expect("the group's partitions");
        let mut zombie = self.pool.begin().await.expect("begin");
        sqlx::query(
            "INSERT INTO inbox_host.inbox (message_id, consumer_group, worker_id, plugin_digest, topic, kafka_partition, kafka_offset)
             VALUES ($1, 'billing', 'zombie', 'x', 'orders', 0, $2)",
        )
        .bind(message_id)
        .bind(offset)
        .execute(&mut *zombie)
        .await
        .expect("zombie claims the row");
        zombie
    }

    pub async fn execute(&self, sql: &str) {
        sqlx::raw_sql(sql).execute(&self.pool).await.expect(sql);
    }
}

async fn fresh_database(server: &str) -> String {
    let name = format!(
        "inbox_test_{}_{}",
        std::process::id(),
        DATABASES.fetch_add(1, Ordering::SeqCst)
    );
    let admin = PgPool::connect(server)
        .await
        .expect("connecting to DATABASE_URL");
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .expect("creating a test database");
    match server.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{name}"),
        None => panic!("DATABASE_URL must end in /<database>"),
    }
}

/// A unique name for topics and groups, so tests can share a broker.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// An order message as the billing plugin expects it.
pub fn order(id: &str, amount: i64) -> Message {
    Message {
        message_id: id.to_string(),
        topic: "orders".into(),
        partition: 0,
        offset: 0,
        timestamp_ms: None,
        key: Some(id.as_bytes().to_vec()),
        headers: vec![],
        payload: serde_json::json!({ "order_id": id, "amount": amount })
            .to_string()
            .into_bytes(),
    }
}

/// Wraps a handler and counts how often it really ran: outside any transaction,
/// so a rolled-back run still counts.
pub struct Counting<H> {
    pub inner: H,
    pub calls: AtomicU64,
}

impl<H> Counting<H> {
    pub fn new(inner: H) -> Self {
        Self {
            inner,
            calls: AtomicU64::new(0),
        }
    }

    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

impl<H: Handler> Handler for Counting<H> {
    fn version(&self) -> &str {
        self.inner.version()
    }

    async fn handle(
        &self,
        message: &Message,
        tx: Tx,
    ) -> (Tx, Result<inbox_host::inbox::AfterCommit, HandlerError>) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.handle(message, tx).await
    }
}

/// Polls `condition` every 50 ms until it holds; panics with `what` after `limit`.
pub async fn wait_until<F, Fut>(what: &str, limit: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !condition().await {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
