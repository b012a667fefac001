use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

/// How much the throwaway cluster may cut corners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// PostgreSQL's defaults (fsync, synchronous commit): for benchmarks.
    Production,
    /// No fsync: for tests, where a lost cluster costs nothing.
    Throwaway,
}

/// A PostgreSQL cluster started with `initdb` + `pg_ctl` in a temp dir on a free
/// loopback port, stopped and deleted on drop.
pub struct TempPostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    options: String,
}

impl TempPostgres {
    pub fn start(durability: Durability) -> anyhow::Result<Self> {
        Self::start_with(durability, "")
    }

    /// [`TempPostgres::start`] with extra server options (`-c name=value ...`).
    pub fn start_with(durability: Durability, extra_options: &str) -> anyhow::Result<Self> {
        let bin = server_bin_dir()?;
        let dir = tempfile::Builder::new().prefix("inbox-pg-").tempdir()?;
        let data = dir.path().join("data");
        let as_root = is_root();
        if as_root {
            // initdb refuses to run as root; the cluster belongs to `postgres`.
            chown_to_postgres(dir.path())?;
        }
        run(
            as_root,
            Command::new(bin.join("initdb"))
                .args([
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                    "-D",
                ])
                .arg(&data),
        )
        .context("initdb failed")?;
        let port = free_port()?;
        let mut options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -k {} -c max_connections=200",
            dir.path().display()
        );
        if durability == Durability::Throwaway {
            options.push_str(" -c fsync=off -c full_page_writes=off");
        }
        options.push(' ');
        options.push_str(extra_options);
        let cluster = Self {
            dir,
            bin,
            port,
            options,
        };
        cluster.resume()?;
        Ok(cluster)
    }

    /// Stops the server (fast shutdown: sessions are cut); [`TempPostgres::resume`]
    /// starts it again with its data.
    pub fn stop(&self) -> anyhow::Result<()> {
        self.stop_in("fast")
    }

    /// Crashes the server: `pg_ctl -m immediate`, every process ended without a
    /// checkpoint, so [`TempPostgres::resume`] starts with crash recovery.
    pub fn crash(&self) -> anyhow::Result<()> {
        self.stop_in("immediate")
    }

    fn stop_in(&self, mode: &str) -> anyhow::Result<()> {
        run(
            is_root(),
            Command::new(self.bin.join("pg_ctl"))
                .args(["-w", "-m", mode, "-D"])
                .arg(self.dir.path().join("data"))
                .arg("stop"),
        )
        .with_context(|| format!("pg_ctl stop -m {mode} failed"))
    }

    /// Starts the server on its port and data directory.
    pub fn resume(&self) -> anyhow::Result<()> {
        run(
            is_root(),
            Command::new(self.bin.join("pg_ctl"))
                .args(["-w", "-t", "60", "-l"])
                .arg(self.dir.path().join("server.log"))
                .args(["-o", &self.options, "-D"])
                .arg(self.dir.path().join("data"))
                .arg("start"),
        )
        .context("pg_ctl start failed")
    }

    /// The cluster's directory (its data is in `data/`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A URL for the `postgres` superuser's `postgres` database.
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    pub fn url_for(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        let _ = run(
            is_root(),
            Command::new(self.bin.join("pg_ctl"))
                .args(["-m", "immediate", "-D"])
                .arg(self.dir.path().join("data"))
                .arg("stop"),
        );
    }
}

/// Finds `initdb`/`pg_ctl`: `PG_BIN`, then PATH, then Debian's layout.
fn server_bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let debian = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            let mut versions: Vec<PathBuf> = d.flatten().map(|e| e.path().join("bin")).collect();
            versions.sort();
            versions.reverse();
            versions
        })
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(debian)
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
        .context(
            "PostgreSQL server binaries (initdb, pg_ctl) not found: run scripts/setup \
             (installs Debian's `postgresql`), set PG_BIN, or set DATABASE_URL to use a running server",
        )
}

fn run(as_postgres: bool, command: &mut Command) -> anyhow::Result<()> {
    let mut command = if as_postgres {
        let mut wrapped = Command::new("runuser");
        wrapped
            .args(["-u", "postgres", "--"])
            .arg(command.get_program())
            .args(command.get_args());
        wrapped
    } else {
        std::mem::replace(command, Command::new("true"))
    };
    let output = command.stdin(Stdio::null()).output()?;
    if !output.status.success() {
        bail!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

fn chown_to_postgres(path: &Path) -> anyhow::Result<()> {
    let status = Command::new("chown").arg("postgres:").arg(path).status()?;
    if !status.success() {
        bail!(
            "chown postgres {} failed (is Debian's postgresql installed? run scripts/setup)",
            path.display()
        );
    }
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
