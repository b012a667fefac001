//! Tries each ambient capability a WASI program might have and records one row
//! per probe in `sandbox_probe(message_id, probe, outcome)`, where outcome is
//! `allowed: <value>` or `denied: <error>`.
//!
//! Probes, in order: `file-read` (/etc/passwd), `dir-list` (/), `env-home`
//! ($HOME), `env-count` (number of variables; zero counts as denied),
//! `tcp-connect` (127.0.0.1:5432), `clock` (wall clock), `random` (8 bytes).
use std::fmt::Display;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, SystemTime};
use std::{env, fs};

use inbox_guest::{Db, Event, HandlerError};

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    let probes = [
        (
            "file-read",
            outcome(fs::read("/etc/passwd").map(|b| format!("{} bytes", b.len()))),
        ),
        (
            "dir-list",
            outcome(fs::read_dir("/").map(|d| format!("{} entries", d.count()))),
        ),
        ("env-home", outcome(env::var("HOME"))),
        ("env-count", env_count()),
        ("tcp-connect", tcp_connect()),
        ("clock", clock()),
        ("random", random()),
    ];
    for (probe, outcome) in probes {
        db.execute(
            "INSERT INTO sandbox_probe (message_id, probe, outcome) VALUES ($1, $2, $3)",
            &[
                event.message_id.as_str().into(),
                probe.into(),
                outcome.into(),
            ],
        )?;
    }
    Ok(())
}

fn outcome<T: Display, E: Display>(result: Result<T, E>) -> String {
    match result {
        Ok(value) => format!("allowed: {value}"),
        Err(err) => format!("denied: {err}"),
    }
}

fn env_count() -> String {
    match env::vars_os().count() {
        0 => "denied: no variables visible".to_owned(),
        n => format!("allowed: {n} variables"),
    }
}

fn tcp_connect() -> String {
    let addr = SocketAddr::from(([127, 0, 0, 1], 5432));
    outcome(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).map(|_| "connected"))
}

fn clock() -> String {
    outcome(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| format!("{}s since the epoch", d.as_secs())),
    )
}

fn random() -> String {
    let mut bytes = [0u8; 8];
    outcome(
        getrandom::fill(&mut bytes)
            .map(|()| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()),
    )
}
