//! A guest's stdout or stderr: kept in memory, at most `capacity` bytes per
//! message (writing more traps, as wasmtime's own memory pipe does), and
//! drained after each message so a reused instance starts every message with
//! an empty pipe.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

#[derive(Clone)]
pub(crate) struct GuestOutput {
    capacity: usize,
    buffer: Arc<Mutex<Vec<u8>>>,
}

impl GuestOutput {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            buffer: Arc::default(),
        }
    }

    /// What the guest wrote since the last call.
    pub fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.buffer.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        let mut buffer = self.lock();
        if bytes.len() > self.capacity - buffer.len() {
            return Err(StreamError::Trap(wasmtime::format_err!(
                "guest wrote more than {} bytes of output in one message",
                self.capacity
            )));
        }
        buffer.extend_from_slice(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        match self.capacity - self.lock().len() {
            0 => Err(StreamError::Closed),
            room => Ok(room),
        }
    }
}

#[async_trait::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let mut buffer = self.lock();
        let taken = bytes.len().min(self.capacity - buffer.len());
        buffer.extend_from_slice(&bytes[..taken]);
        Poll::Ready(Ok(taken))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}
