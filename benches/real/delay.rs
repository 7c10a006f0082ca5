//! A loopback TCP proxy that delays every byte by a fixed time each way: a real cluster's
//! network between the migrator and kube-apiserver, without tc/netem. Bytes are forwarded as
//! they come, each chunk released `delay` after it was read, so the delay adds latency and
//! takes no bandwidth (a window of chunks is in flight at once, as on a long wire). TLS passes
//! through untouched (the serving certificate names 127.0.0.1, whatever the port).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The proxy's address; it runs until the process ends.
pub(crate) async fn start(upstream: SocketAddr, delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the delay proxy");
    let local = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(server) = TcpStream::connect(upstream).await {
                    relay(client, server, delay).await;
                }
            });
        }
    });
    local
}

/// Both directions of one connection, each delayed.
async fn relay(client: TcpStream, server: TcpStream, delay: Duration) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = tokio::spawn(one_way(client_read, server_write, delay));
    let down = tokio::spawn(one_way(server_read, client_write, delay));
    let _ = tokio::join!(up, down);
}

/// Reads chunks from `from` and writes each to `to` once `delay` has passed since it was read.
async fn one_way(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx
                    .send((Instant::now() + delay, buffer[..n].to_vec()))
                    .is_err()
                {
                    break;
                }
            }
        }
    }
    drop(tx);
    let _ = writer.await;
}
