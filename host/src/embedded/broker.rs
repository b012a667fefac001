use std::sync::mpsc;
use std::thread;

use anyhow::Context;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::RDKafkaRespErr;

type Cluster = MockCluster<'static, DefaultProducerContext>;

enum Request {
    CreateTopic {
        name: String,
        partitions: i32,
        reply: mpsc::Sender<anyhow::Result<()>>,
    },
    /// Take the broker down (connections cut, new ones refused) or back up.
    SetDown {
        down: bool,
        reply: mpsc::Sender<anyhow::Result<()>>,
    },
    /// Make a topic's partitions leaderless in metadata, or whole again.
    SetTopicAvailable {
        name: String,
        available: bool,
        reply: mpsc::Sender<anyhow::Result<()>>,
    },
}

/// librdkafka's mock cluster (a Kafka-protocol broker on loopback) on a thread of
/// its own; stopped on drop. Clients reach it only through its bootstrap address,
/// exactly as they would a production cluster.
pub struct LocalBroker {
    bootstrap: String,
    requests: Option<mpsc::Sender<Request>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl LocalBroker {
    pub fn start() -> anyhow::Result<Self> {
        let (ready_tx, ready_rx) = mpsc::channel();
        let (requests, inbox) = mpsc::channel::<Request>();
        let thread = thread::Builder::new()
            .name("local-broker".into())
            .spawn(move || {
                let cluster: Cluster = match MockCluster::new(1) {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(cluster.bootstrap_servers()));
                // Serves requests until the handle is dropped.
                for request in inbox {
                    match request {
                        Request::CreateTopic {
                            name,
                            partitions,
                            reply,
                        } => {
                            let created = cluster
                                .create_topic(&name, partitions, 1)
                                .with_context(|| format!("creating topic {name}"));
                            let _ = reply.send(created);
                        }
                        Request::SetDown { down, reply } => {
                            let set = if down {
                                cluster.broker_down(1)
                            } else {
                                cluster.broker_up(1)
                            };
                            let _ = reply.send(set.context("changing the broker's state"));
                        }
                        Request::SetTopicAvailable {
                            name,
                            available,
                            reply,
                        } => {
                            let error = if available {
                                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR
                            } else {
                                RDKafkaRespErr::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE
                            };
                            let set = cluster
                                .topic_error(&name, error)
                                .with_context(|| format!("changing topic {name}"));
                            let _ = reply.send(set);
                        }
                    }
                }
            })?;
        let bootstrap = ready_rx
            .recv()
            .context("local broker thread died")?
            .context("starting librdkafka's mock cluster")?;
        Ok(Self {
            bootstrap,
            requests: Some(requests),
            thread: Some(thread),
        })
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    pub fn create_topic(&self, name: &str, partitions: i32) -> anyhow::Result<()> {
        let name = name.to_string();
        self.ask(|reply| Request::CreateTopic {
            name,
            partitions,
            reply,
        })
    }

    /// Takes the broker down (`true`: connections cut and refused) or back up:
    /// an outage, for tests.
    pub fn set_down(&self, down: bool) -> anyhow::Result<()> {
        self.ask(|reply| Request::SetDown { down, reply })
    }

    /// Makes `topic` unavailable (metadata says its leader is not available,
    /// so nothing can be produced to it) or available again, for tests.
    pub fn set_topic_available(&self, topic: &str, available: bool) -> anyhow::Result<()> {
        let name = topic.to_string();
        self.ask(|reply| Request::SetTopicAvailable {
            name,
            available,
            reply,
        })
    }

    fn ask(
        &self,
        request: impl FnOnce(mpsc::Sender<anyhow::Result<()>>) -> Request,
    ) -> anyhow::Result<()> {
        let (reply, answer) = mpsc::channel();
        self.requests
            .as_ref()
            .context("local broker stopped")?
            .send(request(reply))
            .ok()
            .context("local broker stopped")?;
        answer.recv().context("local broker stopped")?
    }
}

impl Drop for LocalBroker {
    fn drop(&mut self) {
        drop(self.requests.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
