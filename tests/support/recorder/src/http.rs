//! A minimal HTTP/1.1 client over TLS that writes the request bytes itself and keeps the
//! response head as received (header names in the server's case, in its order), so a recording
//! shows headers exactly as sent and received. One connection per request, as curl made them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

pub(crate) const USER_AGENT: &str = "kube-recorder/1.0";
/// The status line shown when the server closed the connection before answering.
pub(crate) const NO_RESPONSE: &str =
    "(no response: the server closed the connection before sending a status line)";
/// A guard only: every watch here ends by its `timeoutSeconds`.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// kube-apiserver at `127.0.0.1:port`, as the admin of the PKI in `pki`.
#[derive(Clone)]
pub(crate) struct Client {
    port: u16,
    config: Arc<rustls::ClientConfig>,
}

/// A request as it will be written.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub method: String,
    pub path: String,
    pub accept: String,
    pub content_type: Option<String>,
    pub body: Option<Vec<u8>>,
    /// Headers after Accept (Impersonate-User, ...), in order.
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub(crate) fn new(method: &str, path: &str) -> Request {
        Request {
            method: method.into(),
            path: path.into(),
            accept: "*/*".into(),
            content_type: None,
            body: None,
            headers: Vec::new(),
        }
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub(crate) fn get(path: &str) -> Request {
        Request::new("GET", path)
    }

    pub(crate) fn accept(mut self, accept: &str) -> Request {
        self.accept = accept.into();
        self
    }

    pub(crate) fn body(mut self, content_type: &str, body: Vec<u8>) -> Request {
        self.content_type = Some(content_type.into());
        self.body = Some(body);
        self
    }
}

/// One request and the answer, as bytes on the wire (the response body de-chunked).
#[derive(Clone, Debug)]
pub(crate) struct Exchange {
    pub request: Request,
    /// The request line and headers as written, lines joined by `\n`.
    pub request_head: String,
    pub status: u16,
    /// The status line as received.
    pub status_line: String,
    /// Every response header as received, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// From the request written to the body's end.
    pub elapsed: Duration,
}

impl Exchange {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn content_type(&self) -> &str {
        self.header("Content-Type").unwrap_or_default()
    }
}

impl Client {
    pub(crate) fn new(port: u16, pki: &Path) -> Result<Client> {
        let mut roots = rustls::RootCertStore::empty();
        let ca = CertificateDer::from_pem_file(pki.join("ca.crt")).context("ca.crt")?;
        roots.add(ca).context("the cluster CA")?;
        let certs = CertificateDer::pem_file_iter(pki.join("admin.crt"))
            .context("admin.crt")?
            .collect::<Result<Vec<_>, _>>()
            .context("admin.crt")?;
        let key = PrivateKeyDer::from_pem_file(pki.join("admin.key")).context("admin.key")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS versions")?
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .context("the admin client certificate")?;
        // No ALPN: the server speaks HTTP/1.1, as to curl --http1.1.
        Ok(Client {
            port,
            config: Arc::new(config),
        })
    }

    pub(crate) fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub(crate) fn send(&self, request: Request) -> Result<Exchange> {
        let mut head = vec![
            format!("{} {} HTTP/1.1", request.method, request.path),
            format!("Host: {}", self.host()),
            format!("User-Agent: {USER_AGENT}"),
            format!("Accept: {}", request.accept),
        ];
        head.extend(request.headers.iter().map(|(k, v)| format!("{k}: {v}")));
        if let Some(content_type) = &request.content_type {
            head.push(format!("Content-Type: {content_type}"));
        }
        if let Some(body) = &request.body {
            head.push(format!("Content-Length: {}", body.len()));
        }
        let mut bytes = head.join("\r\n").into_bytes();
        bytes.extend_from_slice(b"\r\n\r\n");
        if let Some(body) = &request.body {
            bytes.extend_from_slice(body);
        }

        let tcp = TcpStream::connect(("127.0.0.1", self.port))
            .with_context(|| format!("connecting to {}", self.host()))?;
        tcp.set_read_timeout(Some(READ_TIMEOUT))?;
        let server = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
        let connection = rustls::ClientConnection::new(self.config.clone(), server)
            .context("a TLS connection")?;
        let mut stream = Reader::new(rustls::StreamOwned::new(connection, tcp));
        stream
            .inner
            .write_all(&bytes)
            .context("writing the request")?;
        stream.inner.flush()?;
        let sent = Instant::now();

        // kube-apiserver may close the connection without a word (see 20g): recorded as such.
        let status_line = match stream.line() {
            Ok(line) => line,
            Err(_) if stream.ended && stream.buffer.is_empty() => {
                return Ok(Exchange {
                    request,
                    request_head: head.join("\n"),
                    status: 0,
                    status_line: NO_RESPONSE.into(),
                    headers: Vec::new(),
                    body: Vec::new(),
                    elapsed: sent.elapsed(),
                });
            }
            Err(e) => return Err(e),
        };
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("a status line: {status_line:?}"))?;
        let mut headers = Vec::new();
        loop {
            let line = stream.line()?;
            if line.is_empty() {
                break;
            }
            let (name, value) = line
                .split_once(": ")
                .with_context(|| format!("a header line: {line:?}"))?;
            headers.push((name.to_string(), value.to_string()));
        }
        let mut exchange = Exchange {
            request,
            request_head: head.join("\n"),
            status,
            status_line,
            headers,
            body: Vec::new(),
            elapsed: Duration::ZERO,
        };
        let chunked = exchange
            .header("Transfer-Encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        if exchange.request.method == "HEAD" || status == 304 || status == 204 {
            // No body.
        } else if chunked {
            loop {
                let size_line = stream.line()?;
                let size =
                    usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
                        .with_context(|| format!("a chunk size: {size_line:?}"))?;
                if size == 0 {
                    // Trailers, then the empty line.
                    while !stream.line()?.is_empty() {}
                    break;
                }
                exchange.body.extend(stream.exact(size)?);
                let end = stream.line()?;
                if !end.is_empty() {
                    bail!("chunk not followed by CRLF: {end:?}");
                }
            }
        } else if let Some(length) = exchange.header("Content-Length") {
            let length: usize = length.parse().context("Content-Length")?;
            exchange.body = stream.exact(length)?;
        } else {
            exchange.body = stream.rest()?;
        }
        exchange.elapsed = sent.elapsed();
        Ok(exchange)
    }
}

/// Buffered reads over the TLS stream (lines end in CRLF).
struct Reader {
    inner: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    buffer: Vec<u8>,
    /// The server closed the connection.
    ended: bool,
}

impl Reader {
    fn new(inner: rustls::StreamOwned<rustls::ClientConnection, TcpStream>) -> Reader {
        Reader {
            inner,
            buffer: Vec::new(),
            ended: false,
        }
    }

    fn fill(&mut self) -> Result<bool> {
        let mut chunk = [0u8; 16384];
        match self.inner.read(&mut chunk) {
            Ok(0) => {
                self.ended = true;
                Ok(false)
            }
            Ok(n) => {
                self.buffer.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            // Go closes without close_notify at times: the end of the stream all the same.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                self.ended = true;
                Ok(false)
            }
            Err(e) => Err(e).context("reading the response"),
        }
    }

    fn line(&mut self) -> Result<String> {
        loop {
            if let Some(at) = self.buffer.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buffer.drain(..at + 2).take(at).collect();
                return String::from_utf8(line).context("a header line is not UTF-8");
            }
            if !self.fill()? {
                bail!("the connection ended inside a line");
            }
        }
    }

    fn exact(&mut self, n: usize) -> Result<Vec<u8>> {
        while self.buffer.len() < n {
            if !self.fill()? {
                bail!("the connection ended {} bytes short", n - self.buffer.len());
            }
        }
        Ok(self.buffer.drain(..n).collect())
    }

    fn rest(&mut self) -> Result<Vec<u8>> {
        while self.fill()? {}
        Ok(std::mem::take(&mut self.buffer))
    }
}

/// A JSON POST to etcd's gRPC gateway (plain HTTP on loopback): `/v3/kv/range`,
/// `/v3/kv/compaction`. The answer's JSON.
pub(crate) fn etcd_post(
    port: u16,
    path: &str,
    body: &serde_json::Value,
) -> Result<serde_json::Value> {
    let body = body.to_string();
    let mut tcp = TcpStream::connect(("127.0.0.1", port))
        .with_context(|| format!("connecting to etcd on 127.0.0.1:{port}"))?;
    tcp.set_read_timeout(Some(READ_TIMEOUT))?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).context("etcd's answer")?;
    let text = String::from_utf8_lossy(&answer);
    let (head, rest) = text
        .split_once("\r\n\r\n")
        .context("etcd's answer has no head")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("etcd {path}: {head}\n{rest}");
    }
    // Chunked or not, the JSON is the one line that starts with '{'.
    let json = rest
        .lines()
        .find(|l| l.starts_with('{'))
        .context("etcd's answer has no JSON")?;
    serde_json::from_str(json).context("etcd's JSON")
}
