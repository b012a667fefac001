//! TLS to PostgreSQL: a throwaway server with `ssl=on` and a CA made by the
//! test; `verify-full` against the right and the wrong host name, through the
//! real binary.

use std::path::Path;
use std::process::Command;

use inbox_host::embedded::{Durability, TempPostgres};
use inbox_host_tests::host;

/// A CA and a server certificate for `localhost`, signed by it, in `dir`.
fn make_certificates(dir: &Path) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=inbox-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost\n").expect("san");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "server.pem",
    ]);
}

/// Makes `dir` and its files the server's (it runs as `postgres` when we are
/// root) with the key private, as PostgreSQL demands.
fn hand_to_server(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        dir.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    if root {
        let status = Command::new("chown")
            .args(["-R", "postgres:"])
            .arg(dir)
            .status()
            .expect("chown");
        assert!(status.success());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_host_connects_with_verify_full_and_refuses_a_certificate_for_another_name() {
    let certs = tempfile::tempdir().expect("tempdir");
    make_certificates(certs.path());
    hand_to_server(certs.path());
    let options = format!(
        "-c ssl=on -c ssl_cert_file={0}/server.pem -c ssl_key_file={0}/server.key",
        certs.path().display()
    );
    let pg = tokio::task::spawn_blocking(move || {
        TempPostgres::start_with(Durability::Throwaway, &options)
    })
    .await
    .expect("task")
    .expect("PostgreSQL with TLS");
    let ca = certs.path().join("ca.pem");
    let url = |host: &str, mode: &str| {
        format!(
            "postgres://postgres@{host}:{}/postgres?sslmode={mode}&sslrootcert={}",
            pg.port(),
            ca.display()
        )
    };

    let right = url("localhost", "verify-full");
    let out = host::run(&["migrate"], &[("DATABASE_URL", &right)]);
    assert!(
        out.status.success(),
        "verify-full against localhost: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("migrations applied"));

    let pool = sqlx::PgPool::connect(&right)
        .await
        .expect("connect over TLS");
    let encrypted: bool =
        sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&pool)
            .await
            .expect("pg_stat_ssl");
    assert!(encrypted, "the session is not encrypted");

    let wrong = url("127.0.0.1", "verify-full");
    let out = host::run(&["migrate"], &[("DATABASE_URL", &wrong)]);
    assert!(
        !out.status.success(),
        "a certificate for localhost was accepted for 127.0.0.1"
    );
    let stderr = host::strip_ansi(&String::from_utf8_lossy(&out.stderr)).to_lowercase();
    assert!(
        stderr.contains("cannot connect to postgresql")
            && (stderr.contains("certificate") || stderr.contains("tls")),
        "{stderr}"
    );

    let out = host::run(
        &["migrate"],
        &[("DATABASE_URL", &url("127.0.0.1", "require"))],
    );
    assert!(
        out.status.success(),
        "sslmode=require: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
