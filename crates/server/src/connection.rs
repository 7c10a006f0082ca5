//! One client connection, from the TLS handshake to the last byte: the handshake under a
//! timeout, HTTP/1.1 or HTTP/2 by ALPN (as Go's server: no ALPN means HTTP/1.1, so a client
//! that sends nothing never parks in protocol detection), hyper's header-read timer, an idle
//! timeout, and a close that lets the last response arrive (TLS close_notify, then reading on
//! for a while so the peer does not get a reset while it still sends).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::metrics::{EdgeMetrics, ReasonLabels};
use crate::auth::PeerCertificates;

/// After the server closes its side, it reads (and discards) what the client still sends for
/// at most this long and this much, so the client reads the response instead of a reset (Go's
/// server waits 500 ms for the same reason; reading on also keeps the receive window open).
const LINGER_TIME: Duration = Duration::from_secs(5);
const LINGER_BYTES: usize = 64 << 20;

/// kube-apiserver's (Go's) HTTP/2 concurrent-stream limit per connection.
const HTTP2_MAX_CONCURRENT_STREAMS: u32 = 250;
/// HTTP/2 pings find peers that vanished without closing (their idle watches would otherwise
/// hold the connection forever).
const HTTP2_KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(20));

/// The timeouts and bounds of every connection (from `ServeOptions`).
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// How long a client may take to finish the TLS handshake (`--tls-handshake-timeout`).
    pub tls_handshake_timeout: Duration,
    /// How long a client may take to send a request's headers, so also how long an idle HTTP/1.1
    /// connection is kept (`--read-header-timeout`).
    pub read_header_timeout: Duration,
    /// How long an HTTP/2 connection with no request in flight is kept
    /// (`--idle-connection-timeout`).
    pub idle_connection_timeout: Duration,
    /// The most client connections open at once (`--max-open-connections`).
    pub max_open_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            tls_handshake_timeout: Duration::from_secs(10),
            read_header_timeout: Duration::from_secs(32),
            idle_connection_timeout: Duration::from_secs(90),
            max_open_connections: 8192,
        }
    }
}

/// What every connection task shares.
pub(super) struct ConnectionContext {
    pub tls: TlsAcceptor,
    pub app: axum::Router,
    pub limits: ConnectionLimits,
    pub metrics: EdgeMetrics,
    /// Cancelled when the server shuts down: connections finish their requests and close.
    pub closing: CancellationToken,
    http1: auto::Builder<TokioExecutor>,
    http2: auto::Builder<TokioExecutor>,
}

impl ConnectionContext {
    pub(crate) fn new(
        tls: TlsAcceptor,
        app: axum::Router,
        limits: ConnectionLimits,
        metrics: EdgeMetrics,
    ) -> Self {
        let mut http1 = auto::Builder::new(TokioExecutor::new()).http1_only();
        http1
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.read_header_timeout);
        let mut http2 = auto::Builder::new(TokioExecutor::new()).http2_only();
        http2
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(HTTP2_MAX_CONCURRENT_STREAMS)
            .keep_alive_interval(HTTP2_KEEP_ALIVE.0)
            .keep_alive_timeout(HTTP2_KEEP_ALIVE.1);
        ConnectionContext {
            tls,
            app,
            limits,
            metrics,
            closing: CancellationToken::new(),
            http1,
            http2,
        }
    }

    /// The connection builder of the protocol ALPN chose.
    fn builder(&self, http2: bool) -> &auto::Builder<TokioExecutor> {
        if http2 { &self.http2 } else { &self.http1 }
    }

    fn closed(&self, reason: &'static str) {
        self.metrics
            .closed_connections
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
}

/// Put into every request's extensions: lets a handler end its own connection (a watcher
/// that stopped reading cannot be told anything else over HTTP/1.1).
#[derive(Clone, Debug)]
pub struct ConnectionControl {
    kill: CancellationToken,
    http1: bool,
}

impl ConnectionControl {
    /// Close the connection now if it is HTTP/1.x, whose only request is the caller's; an
    /// HTTP/2 connection carries other streams and is left alone (the stream ends with
    /// RST_STREAM when hyper next polls its body). Returns whether it closed.
    pub fn close_if_http1(&self) -> bool {
        if self.http1 {
            self.kill.cancel();
        }
        self.http1
    }
}

/// Serve one accepted TCP connection until it closes; the permit is the connection's slot
/// under `--max-open-connections`.
pub(super) async fn serve(
    tcp: TcpStream,
    peer: SocketAddr,
    context: Arc<ConnectionContext>,
    permit: OwnedSemaphorePermit,
) {
    let _slot = OpenConnection::new(permit, &context.metrics);
    set_nodelay(&tcp, peer);
    let Some(stream) = handshake(tcp, peer, &context).await else {
        return;
    };
    let http2 = stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
    let certificates = PeerCertificates::of(stream.get_ref().1);
    let (activity, active) = watch::channel(0usize);
    let control = ConnectionControl {
        kill: CancellationToken::new(),
        http1: !http2,
    };
    let service = request_service(
        context.app.clone(),
        peer,
        certificates,
        control.clone(),
        Arc::new(activity),
    );
    let connection = context.builder(http2).serve_connection(
        TokioIo::new(Lingering::new(stream)),
        TowerToHyperService::new(service),
    );
    tokio::pin!(connection);
    let mut lifecycle = Lifecycle::new(active, context.limits.idle_connection_timeout);
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!(%peer, error = %err, "connection ended with an error");
                }
                return;
            }
            wake = lifecycle.next(&context, &control.kill) => match wake {
                Wake::Kill => return,
                Wake::Close => connection.as_mut().graceful_shutdown(),
                Wake::Nothing => {}
            }
        }
    }
}

/// What a connection's [`Lifecycle`] woke for.
enum Wake {
    /// A handler asked to end the connection now.
    Kill,
    /// Stop taking requests: finish those in flight, then close.
    Close,
    /// Nothing to do (a request began or ended).
    Nothing,
}

/// What ends a connection besides its client: a handler's kill, the server's shutdown, and
/// the idle timeout, which runs only while no request is in flight.
struct Lifecycle {
    /// How many of the connection's requests are in flight.
    active: watch::Receiver<usize>,
    idle: Duration,
    /// Whether the connection was told to close (it is not told twice).
    closing: bool,
}

impl Lifecycle {
    fn new(active: watch::Receiver<usize>, idle: Duration) -> Self {
        Lifecycle {
            active,
            idle,
            closing: false,
        }
    }

    /// Wait for the next thing that may end the connection.
    async fn next(&mut self, context: &ConnectionContext, kill: &CancellationToken) -> Wake {
        let idle_now = *self.active.borrow_and_update() == 0;
        tokio::select! {
            () = kill.cancelled() => {
                context.closed("unresponsive_watcher");
                Wake::Kill
            }
            () = context.closing.cancelled(), if !self.closing => {
                self.closing = true;
                Wake::Close
            }
            changed = self.active.changed() => {
                if changed.is_err() {
                    // Only the service holds the sender: it is gone with the connection.
                    self.closing = true;
                }
                Wake::Nothing
            }
            () = tokio::time::sleep(self.idle), if idle_now && !self.closing && !self.idle.is_zero() => {
                context.closed("idle");
                self.closing = true;
                Wake::Close
            }
        }
    }
}

/// Without TCP_NODELAY a response's last small segment (a watch event, a page's tail) waits
/// for the client's delayed ACK: ~40 ms per request, measured by `make bench`.
fn set_nodelay(tcp: &TcpStream, peer: SocketAddr) {
    if let Err(err) = tcp.set_nodelay(true) {
        tracing::debug!(%peer, error = %err, "could not set TCP_NODELAY");
    }
}

/// The TLS handshake, within `--tls-handshake-timeout`; `None` when it failed, timed out or
/// the server is shutting down.
async fn handshake(
    tcp: TcpStream,
    peer: SocketAddr,
    context: &ConnectionContext,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let handshake = tokio::time::timeout(
        context.limits.tls_handshake_timeout,
        context.tls.accept(tcp),
    );
    tokio::select! {
        done = handshake => match done {
            Ok(Ok(stream)) => Some(stream),
            Ok(Err(err)) => {
                tracing::debug!(%peer, error = %err, "TLS handshake failed");
                context.closed("tls_handshake_failed");
                None
            }
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake timed out");
                context.closed("tls_handshake_timeout");
                None
            }
        },
        () = context.closing.cancelled() => None,
    }
}

/// The router as the connection's service: each request carries the client's certificates,
/// its address and the connection's control, and counts as in flight until its response
/// body is sent (a watch, for as long as it streams).
fn request_service(
    app: axum::Router,
    peer: SocketAddr,
    certificates: PeerCertificates,
    control: ConnectionControl,
    activity: Arc<watch::Sender<usize>>,
) -> impl tower::Service<
    http::Request<Incoming>,
    Response = http::Response<Body>,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<http::Response<Body>, std::convert::Infallible>> + Send,
> + Clone
+ Send {
    tower::service_fn(move |mut request: http::Request<Incoming>| {
        let extensions = request.extensions_mut();
        extensions.insert(certificates.clone());
        extensions.insert(ConnectInfo(peer));
        extensions.insert(control.clone());
        let in_flight = InFlight::begin(activity.clone());
        let app = app.clone();
        async move {
            let response = app.oneshot(request.map(Body::new)).await?;
            Ok::<_, std::convert::Infallible>(response.map(|body| {
                Body::new(Tracked {
                    body,
                    _in_flight: in_flight,
                })
            }))
        }
    })
}

/// Counts the connection as open while it lives.
struct OpenConnection {
    _permit: OwnedSemaphorePermit,
    metrics: EdgeMetrics,
}

impl OpenConnection {
    fn new(permit: OwnedSemaphorePermit, metrics: &EdgeMetrics) -> Self {
        metrics.open_connections.inc();
        OpenConnection {
            _permit: permit,
            metrics: metrics.clone(),
        }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.metrics.open_connections.dec();
    }
}

/// One request in flight on the connection (counted in its activity channel).
struct InFlight(Arc<watch::Sender<usize>>);

impl InFlight {
    fn begin(activity: Arc<watch::Sender<usize>>) -> Self {
        activity.send_modify(|n| *n += 1);
        InFlight(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A response body that keeps its request counted as in flight until it is done or dropped.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The connection's stream, closed the way that gets the last response delivered: a TLS
/// close_notify and a FIN, then reading on (discarding) until the client closes too, for at
/// most [`LINGER_TIME`] and [`LINGER_BYTES`]. Closing a socket that still has unread input
/// makes the kernel send a reset, which can destroy the response before the client reads it.
pub(super) struct Lingering<S> {
    inner: S,
    phase: Phase,
}

enum Phase {
    Open,
    Draining {
        deadline: Pin<Box<tokio::time::Sleep>>,
        left: usize,
    },
    Closed,
}

impl<S> Lingering<S> {
    pub(super) fn new(inner: S) -> Self {
        Lingering {
            inner,
            phase: Phase::Open,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Lingering<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Lingering<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            match &mut this.phase {
                Phase::Open => {
                    // tokio-rustls sends close_notify, flushes, then shuts the TCP write side.
                    let shut = ready!(Pin::new(&mut this.inner).poll_shutdown(cx));
                    if shut.is_err() {
                        this.phase = Phase::Closed;
                        return Poll::Ready(shut);
                    }
                    this.phase = Phase::Draining {
                        deadline: Box::pin(tokio::time::sleep(LINGER_TIME)),
                        left: LINGER_BYTES,
                    };
                }
                Phase::Draining { deadline, left } => {
                    if deadline.as_mut().poll(cx).is_ready() {
                        this.phase = Phase::Closed;
                        continue;
                    }
                    let mut scratch = [0u8; 8192];
                    let mut buf = ReadBuf::new(&mut scratch);
                    match Pin::new(&mut this.inner).poll_read(cx, &mut buf) {
                        Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                            *left = left.saturating_sub(buf.filled().len());
                            if *left == 0 {
                                this.phase = Phase::Closed;
                            }
                        }
                        // The client closed (or broke) its side too.
                        Poll::Ready(_) => this.phase = Phase::Closed,
                        Poll::Pending => return Poll::Pending,
                    }
                }
                Phase::Closed => return Poll::Ready(Ok(())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The closing side sends its FIN at once and reads until the peer closes, so a peer
    /// still sending sees the response and then a clean end, never a reset.
    #[tokio::test]
    async fn shutdown_sends_eof_then_reads_until_the_peer_closes() {
        let (server, mut client) = tokio::io::duplex(1024);
        let mut server = Lingering::new(server);
        server.write_all(b"response").await.expect("write");
        let closing = tokio::spawn(async move { server.shutdown().await });
        let mut got = Vec::new();
        // The peer is still sending while it reads: far more than the pipe holds.
        client
            .write_all(&[b'x'; 4096])
            .await
            .expect("peer keeps sending");
        client.read_to_end(&mut got).await.expect("clean end");
        assert_eq!(got, b"response");
        assert!(!closing.is_finished(), "it waits for the peer");
        drop(client);
        closing.await.expect("task").expect("shutdown");
    }

    #[tokio::test(start_paused = true)]
    async fn lingering_ends_after_its_time() {
        let (server, client) = tokio::io::duplex(1024);
        let mut server = Lingering::new(server);
        let closing = tokio::spawn(async move { server.shutdown().await });
        tokio::time::sleep(LINGER_TIME + Duration::from_secs(1)).await;
        assert!(closing.is_finished());
        closing.await.expect("task").expect("shutdown");
        drop(client);
    }
}
