//! Every response reaches its client, also when the request body was never read (a 401, a 404,
//! a 413 or 415 answered before the body).
//!
//! Over HTTP/1.1 an unread body stays in the connection: closing it then makes the kernel reset
//! the connection, which can destroy the response before the client has read it (the client,
//! still sending, sees a reset or a TLS EOF instead of the 4xx). So after the answer, what is
//! left of the body is read and discarded — up to `--max-request-body-bytes`, the most a
//! request may carry anyway, within [`DRAIN_TIME`] — and the connection stays usable. A body
//! declared longer than that, or one that asked for `100-continue` and never got it, is not
//! read: the response says `Connection: close`, and the connection closes lingering (see
//! `connection::Lingering`), so the response still arrives. So does a request answered for its
//! `--request-timeout` (its client sends too slowly to be waited for).
//!
//! HTTP/2 needs none of this: a response sent before the body ends is followed by
//! RST_STREAM(NO_ERROR), which tells the client to stop sending, and the connection lives on.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, Version, header};
use http_body_util::BodyExt;
use hyper::body::{Body as _, Frame, SizeHint};

use super::AppState;
use super::timeout::Abandoned;

/// How long the unread rest of a body may take to arrive before the connection is closed.
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// Middleware: hand the handler a body that gives back what it did not read, then drain that
/// (HTTP/1.x).
pub(crate) async fn deliver(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if request.version() >= Version::HTTP_2 {
        return next.run(request).await;
    }
    let bound = state.max_request_body_bytes;
    let expects_continue = request
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (request, leftover) = track(request);
    let mut response = next.run(request).await;
    let Some(rest) = leftover.take() else {
        return response;
    };
    let too_long = declared.is_some_and(|len| len.saturating_sub(rest.read) > bound as u64);
    // A request answered for its timeout: its client was too slow to send the body in time,
    // and would hold the connection as long again.
    let abandoned = response.extensions().get::<Abandoned>().is_some();
    if too_long || abandoned || (expects_continue && rest.read == 0) {
        // Not worth reading (or not ours to ask for): say so, and let the connection close.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    let budget = (bound as u64).saturating_sub(rest.read);
    tokio::spawn(drain(rest.body, budget));
    response
}

/// Read and discard a body, up to `budget` bytes and [`DRAIN_TIME`]; dropping it early makes
/// hyper close the connection after the response.
async fn drain(mut body: Body, budget: u64) {
    let read = async {
        let mut left = budget;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return };
            if let Some(data) = frame.data_ref() {
                let n = data.len() as u64;
                if n > left {
                    return;
                }
                left -= n;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, read).await;
}

/// What the handler did not read of a body: the body itself and how much was read before.
struct Rest {
    body: Body,
    read: u64,
}

/// Where a dropped, unfinished body is handed back.
#[derive(Clone, Default)]
struct Leftover(Arc<Mutex<Option<Rest>>>);

impl Leftover {
    fn put(&self, rest: Rest) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(rest);
        }
    }

    fn take(&self) -> Option<Rest> {
        self.0.lock().ok().and_then(|mut slot| slot.take())
    }
}

fn track(request: Request) -> (Request, Leftover) {
    let leftover = Leftover::default();
    let request = request.map(|body| {
        Body::new(Returning {
            body: Some(body),
            read: 0,
            leftover: leftover.clone(),
        })
    });
    (request, leftover)
}

/// A request body that, dropped before its end, returns itself to the [`Leftover`].
struct Returning {
    body: Option<Body>,
    read: u64,
    leftover: Leftover,
}

impl hyper::body::Body for Returning {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let Some(body) = self.body.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                self.read = self.read.saturating_add(n);
            }
            // Finished (or broken): nothing to give back.
            Poll::Ready(_) => self.body = None,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        if let Some(body) = self.body.take()
            && !body.is_end_stream()
        {
            self.leftover.put(Rest {
                body,
                read: self.read,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn an_unread_body_is_handed_back_with_what_was_read() {
        let (tx, body) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, axum::Error>>(4);
        let body = Body::new(http_body_util::StreamBody::new(
            tokio_stream::wrappers::ReceiverStream::new(body),
        ));
        let request = http::Request::builder().body(body).expect("request");
        let (request, leftover) = track(request);
        tx.send(Ok(Frame::data(Bytes::from_static(b"abc"))))
            .await
            .expect("send");
        let mut body = request.into_body();
        let first = body.frame().await.expect("frame").expect("ok");
        assert_eq!(first.data_ref().map(|d| d.len()), Some(3));
        drop(body);
        let rest = leftover.take().expect("handed back");
        assert_eq!(rest.read, 3);
        tx.send(Ok(Frame::data(Bytes::from_static(b"defg"))))
            .await
            .expect("send");
        drop(tx);
        let remaining = rest.body.collect().await.expect("rest").to_bytes();
        assert_eq!(remaining, "defg");
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_is_not_handed_back() {
        let request = http::Request::builder()
            .body(Body::from("whole"))
            .expect("request");
        let (request, leftover) = track(request);
        let read = request
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        assert_eq!(read, "whole");
        assert!(leftover.take().is_none());
    }
}
