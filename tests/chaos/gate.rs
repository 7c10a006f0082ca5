//! A gate between one replica and etcd: a TCP proxy on a free loopback port that passes bytes
//! both ways, and can hold what the replica sends from its next fenced write on — a write
//! delayed in the network, or sent the instant before a pause. Armed with the fence's stamp
//! key (`<prefix>/leader-writes`, which every fenced transaction puts and nothing else sends),
//! it holds the chunk holding that key and everything after, until released; what etcd sends
//! back passes all the while. So the test knows a fenced write of the paused leader is in
//! flight, lets another replica take the lease, and only then lets etcd see the write.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Mode {
    Open,
    /// Hold from the next chunk holding these bytes on.
    Armed(Vec<u8>),
    /// Holding what the replica sends.
    Holding(Vec<u8>),
}

struct Shared {
    upstream: SocketAddr,
    mode: watch::Sender<Mode>,
    /// Occurrences of the marker in what was held: the fenced writes held in flight.
    held: AtomicUsize,
}

pub(crate) struct Gate {
    port: u16,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Gate {
    /// A gate in front of etcd's client URL `upstream` (`http://127.0.0.1:<port>`).
    pub(crate) async fn start(upstream: &str) -> Gate {
        let upstream: SocketAddr = upstream
            .trim_start_matches("http://")
            .parse()
            .expect("an http://127.0.0.1:<port> etcd URL");
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the gate");
        let port = listener.local_addr().expect("its address").port();
        let shared = Arc::new(Shared {
            upstream,
            mode: watch::Sender::new(Mode::Open),
            held: AtomicUsize::new(0),
        });
        let task = tokio::spawn(accept(listener, shared.clone()));
        Gate { port, shared, task }
    }

    /// The URL a replica is given instead of etcd's.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Hold what the replica sends from the next chunk holding `marker` on.
    pub(crate) fn arm(&self, marker: &str) {
        self.shared
            .mode
            .send_replace(Mode::Armed(marker.as_bytes().to_vec()));
    }

    /// Whether it is holding (the marker went by since [`Gate::arm`]).
    pub(crate) fn holding(&self) -> bool {
        matches!(*self.shared.mode.borrow(), Mode::Holding(_))
    }

    /// How many times the marker was in what was held: the fenced writes held in flight.
    pub(crate) fn held_writes(&self) -> usize {
        self.shared.held.load(Ordering::SeqCst)
    }

    /// Let what was held through, and everything after.
    pub(crate) fn release(&self) {
        self.shared.mode.send_replace(Mode::Open);
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    while let Ok((client, _)) = listener.accept().await {
        let shared = shared.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(shared.upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            // etcd → replica: always through.
            let down = tokio::spawn(async move {
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                let _ = client_write.shutdown().await;
            });
            // replica → etcd: read on, look for the marker, and write only while open.
            let (chunks, mut queued) = mpsc::unbounded_channel::<Vec<u8>>();
            let mut mode = shared.mode.subscribe();
            let writer = tokio::spawn(async move {
                while let Some(chunk) = queued.recv().await {
                    if mode
                        .wait_for(|m| !matches!(m, Mode::Holding(_)))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    if server_write.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
                let _ = server_write.shutdown().await;
            });
            let mut buffer = vec![0u8; 64 * 1024];
            // The end of the last chunk, so a marker split between two reads is still seen.
            let mut tail: Vec<u8> = Vec::new();
            loop {
                let n = match client_read.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let chunk = buffer[..n].to_vec();
                let mut seen = tail.clone();
                seen.extend_from_slice(&chunk);
                shared.mode.send_if_modified(|mode| match mode {
                    Mode::Armed(marker) if occurrences(&seen, marker) > 0 => {
                        shared
                            .held
                            .fetch_add(occurrences(&seen, marker), Ordering::SeqCst);
                        *mode = Mode::Holding(std::mem::take(marker));
                        true
                    }
                    Mode::Holding(marker) => {
                        shared
                            .held
                            .fetch_add(occurrences(&seen, marker), Ordering::SeqCst);
                        false
                    }
                    _ => false,
                });
                let keep = match &*shared.mode.borrow() {
                    Mode::Armed(marker) | Mode::Holding(marker) => marker.len().saturating_sub(1),
                    Mode::Open => 0,
                };
                tail = seen[seen.len().saturating_sub(keep)..].to_vec();
                if chunks.send(chunk).is_err() {
                    break;
                }
            }
            drop(chunks);
            let _ = writer.await;
            let _ = down.await;
        });
    }
}

/// Non-overlapping occurrences of `marker` in `bytes`.
fn occurrences(bytes: &[u8], marker: &[u8]) -> usize {
    if marker.is_empty() || bytes.len() < marker.len() {
        return 0;
    }
    let mut count = 0;
    let mut at = 0;
    while at + marker.len() <= bytes.len() {
        if &bytes[at..at + marker.len()] == marker {
            count += 1;
            at += marker.len();
        } else {
            at += 1;
        }
    }
    count
}

#[test]
fn markers_are_counted_once_each() {
    assert_eq!(occurrences(b"xxabcxabcab", b"abc"), 2);
    assert_eq!(occurrences(b"ab", b"abc"), 0);
    assert_eq!(occurrences(b"abcabc", b""), 0);
}
