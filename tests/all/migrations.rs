//! The host's migrations beside an application's own sqlx migrations in the
//! same database, in both orders, and the move from the old layout.

use inbox_host::inbox;
use inbox_host_tests::TestDb;
use sqlx::migrate::Migrator;

/// An application's sqlx migrations, in `public` as sqlx keeps them by default.
async fn application() -> (Migrator, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("20250101000000_app.sql"),
        "CREATE TABLE public.app_things (id int PRIMARY KEY);",
    )
    .expect("app migration");
    let migrator = Migrator::new(dir.path()).await.expect("app migrator");
    (migrator, dir)
}

async fn fresh() -> TestDb {
    let db = TestDb::start().await;
    db.execute("DROP SCHEMA inbox_host CASCADE").await;
    db
}

async fn versions(db: &TestDb, table: &str) -> Vec<i64> {
    sqlx::query_scalar(&format!("SELECT version FROM {table} ORDER BY version"))
        .fetch_all(&db.pool)
        .await
        .expect(table)
}

#[tokio::test]
async fn host_and_application_migrations_live_side_by_side_whichever_runs_first() {
    for host_first in [true, false] {
        let db = fresh().await;
        let (app, _dir) = application().await;
        if host_first {
            inbox::migrate(&db.pool).await.expect("host migrates");
            app.run(&db.pool)
                .await
                .expect("the application migrates after the host");
        } else {
            app.run(&db.pool).await.expect("application migrates");
            inbox::migrate(&db.pool)
                .await
                .expect("the host migrates after the application");
        }
        // Both again, each in the other's presence.
        app.run(&db.pool)
            .await
            .expect("the application migrates again");
        inbox::migrate(&db.pool)
            .await
            .expect("the host migrates again");
        assert_eq!(
            versions(&db, "public._sqlx_migrations").await,
            [20250101000000]
        );
        let ours = versions(&db, "inbox_host._sqlx_migrations").await;
        assert!(
            !ours.is_empty() && !ours.contains(&20250101000000),
            "{ours:?}"
        );
        assert_eq!(db.count("SELECT count(*) FROM inbox_host.inbox").await, 0);
        assert_eq!(db.count("SELECT count(*) FROM public.app_things").await, 0);
    }
}

#[tokio::test]
async fn records_of_an_older_host_in_public_move_to_the_hosts_schema_once() {
    let db = fresh().await;
    // What hosts before this change did: their records in public._sqlx_migrations.
    sqlx::migrate!("../migrations")
        .run(&db.pool)
        .await
        .expect("old layout");
    let (app, _dir) = application().await;
    assert!(
        app.run(&db.pool).await.is_err(),
        "the old layout should break the application's migrate"
    );
    db.execute("SELECT inbox_host.inbox_prepare('g', now(), now())")
        .await;
    db.execute("INSERT INTO inbox_host.inbox (message_id, consumer_group, worker_id, plugin_digest, topic, kafka_partition, kafka_offset) VALUES ('kept', 'g', 'w', 'd', 't', 0, 0)").await;

    inbox::migrate(&db.pool)
        .await
        .expect("the host adopts its records");
    assert!(versions(&db, "public._sqlx_migrations").await.is_empty());
    assert!(!versions(&db, "inbox_host._sqlx_migrations")
        .await
        .is_empty());
    assert_eq!(
        db.count("SELECT count(*) FROM inbox_host.inbox").await,
        1,
        "data kept"
    );
    app.run(&db.pool)
        .await
        .expect("the application migrates once the host moved out");
    inbox::migrate(&db.pool)
        .await
        .expect("and the host still does");
}

#[tokio::test]
async fn a_login_without_rights_is_told_each_missing_grant_and_passes_once_granted() {
    let db = TestDb::start().await;
    db.execute("CREATE ROLE runtime_login LOGIN").await;
    let url = db.url.replacen("postgres@", "runtime_login@", 1);
    let pool = inbox::pool_options(1)
        .connect(&url)
        .await
        .expect("runtime login");

    let missing = inbox::check_rights(&pool)
        .await
        .expect_err("no rights yet")
        .to_string();
    assert!(
        missing.contains("GRANT USAGE ON SCHEMA inbox_host"),
        "{missing}"
    );
    assert!(
        missing.contains("GRANT INSERT ON inbox_host.inbox TO <login>"),
        "{missing}"
    );
    assert!(
        missing.contains("GRANT UPDATE ON inbox_host.attempts TO <login>"),
        "{missing}"
    );

    let grants: Vec<String> = inbox::RUNTIME_RIGHTS
        .iter()
        .map(|(table, rights)| format!("GRANT {rights} ON {table} TO runtime_login;"))
        .collect();
    db.execute(&format!(
        "GRANT USAGE ON SCHEMA inbox_host TO runtime_login; {}",
        grants.join(" ")
    ))
    .await;
    inbox::check_rights(&pool)
        .await
        .expect("every right granted");

    db.execute("DROP SCHEMA inbox_host CASCADE").await;
    let unmigrated = inbox::check_rights(&pool)
        .await
        .expect_err("not migrated")
        .to_string();
    assert!(
        unmigrated.contains("run `inbox-host migrate`"),
        "{unmigrated}"
    );
}
