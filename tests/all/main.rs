//! End-to-end tests: real PostgreSQL, real plugins, real broker, real binary.

mod another_broker;
mod batching;
mod calls;
mod calls_languages;
mod cli;
mod components;
mod dead_letters;
mod hostile;
mod hot_swap;
mod inbox_core;
mod inbox_partitions;
mod kafka_runner;
mod languages;
mod liveness;
mod migrations;
mod outages;
mod outbox;
mod outbox_bounds;
mod outbox_pipeline;
mod plugin_loading;
mod requests;
mod sandbox;
mod security;
mod shadow;
mod tls;
mod traces;
