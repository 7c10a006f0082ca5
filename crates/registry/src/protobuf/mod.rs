//! The Kubernetes protobuf wire format (`application/vnd.kubernetes.protobuf`), as
//! k8s.io/apimachinery's protobuf serializer writes it (tests/fixtures/recordings/20*):
//!
//! - a body is the 4-byte magic `k8s\0` followed by a `runtime.Unknown` envelope whose
//!   `typeMeta` names the apiVersion and kind and whose `raw` is the object's own message
//!   (built-in messages carry no apiVersion or kind of their own);
//! - a watch stream (`;stream=watch`) is a sequence of frames, each a 4-byte big-endian length
//!   and a `metav1.WatchEvent` message *without* magic or envelope, whose `object.raw` is the
//!   event's object as a whole body (magic and envelope included).
//!
//! The messages are kube-rs's `k8s-pb` (prost bindings of upstream's `generated.proto`); a
//! kind of ours gives its own through [`ProtobufKind`]. What is hand-written here is the
//! mapping between those messages and the JSON forms the registry works in ([`meta`]).

pub mod meta;

use bytes::{Buf, BytesMut};
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;
use serde_json::Value;

/// The media type of a protobuf body.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The Content-Type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
/// What every protobuf body starts with (apimachinery's `protoEncodingPrefix`).
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// Why a protobuf body or message could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    /// An empty body where an object was expected.
    #[error("empty data")]
    Empty,
    /// No `k8s\0` prefix: not a Kubernetes protobuf body at all.
    #[error(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    )]
    NoMagic,
    /// The bytes are not the message they claim to be (truncated, a wrong wire type, a length
    /// past the end, an invalid UTF-8 string, nesting too deep).
    #[error("{what}: {source}")]
    Malformed {
        /// The message being read, e.g. `Status`.
        what: &'static str,
        /// prost's reason.
        #[source]
        source: prost::DecodeError,
        /// What Go's decoder says of the same bytes ([`ProtobufError::in_go_words`]).
        go: String,
    },
    /// A field holds a value its JSON form cannot carry (a time out of range, a managed-fields
    /// set that is not JSON).
    #[error("{what}: {detail}")]
    Invalid {
        /// The field, e.g. `metav1.Time`.
        what: &'static str,
        /// Why its value does not fit.
        detail: String,
    },
    /// A JSON object that does not have the shape of its kind, on the way to protobuf.
    #[error("{what}: {source}")]
    Shape {
        /// The JSON being converted, e.g. `DeleteOptions`.
        what: &'static str,
        /// serde's reason.
        #[source]
        source: serde_json::Error,
    },
    /// No protobuf message exists for this apiVersion and kind (apimachinery's
    /// "object does not implement the protobuf marshalling interface").
    #[error(
        "object {api_version}, Kind={kind} does not implement the protobuf marshalling interface"
    )]
    NotMarshalable {
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
    },
    /// A watch frame longer than the body limit.
    #[error("a protobuf watch frame of {length} bytes is larger than the limit of {limit}")]
    FrameTooLarge {
        /// The frame's declared length, in bytes.
        length: usize,
        /// The largest frame accepted, in bytes.
        limit: usize,
    },
}

impl ProtobufError {
    /// Maps a prost decode error of `what` to [`ProtobufError::Malformed`], with Go's words for it.
    pub fn malformed(what: &'static str) -> impl FnOnce(prost::DecodeError) -> Self {
        move |source| ProtobufError::Malformed {
            what,
            go: go_words(&source),
            source,
        }
    }

    /// As [`ProtobufError::malformed`], for a decode of `message`: its top-level fields are
    /// walked as Go's decoder walks them, for Go's words where prost has none (a declared
    /// length of 2^63 or more is "negative" to Go).
    pub fn malformed_in<'a>(
        what: &'static str,
        message: &'a [u8],
    ) -> impl FnOnce(prost::DecodeError) -> Self + 'a {
        move |source| ProtobufError::Malformed {
            what,
            go: go_wire_error(message).unwrap_or_else(|| go_words(&source)),
            source,
        }
    }

    /// The error as kube-apiserver words it in a 400 about a body (recording 20h): malformed
    /// bytes in the words of Go's generated decoder (`unexpected EOF` for a field cut short or
    /// a length past the end, `proto: negative length found during unmarshaling`, `proto:
    /// integer overflow`, `proto: illegal wireType 7`); anything else as it displays.
    pub fn in_go_words(&self) -> String {
        match self {
            ProtobufError::Malformed { go, .. } => go.clone(),
            other => other.to_string(),
        }
    }

    /// Maps a serde error converting `what` to [`ProtobufError::Shape`].
    pub fn shape(what: &'static str) -> impl FnOnce(serde_json::Error) -> Self {
        move |source| ProtobufError::Shape { what, source }
    }
}

/// Go's `io.ErrUnexpectedEOF`, which its generated decoders return for bytes cut short.
const GO_UNEXPECTED_EOF: &str = "unexpected EOF";

/// Go's words for a prost decode error of a nested field (the top level is walked by
/// [`go_wire_error`]): prost's "buffer underflow" and "invalid varint" are bytes that end too
/// soon, Go's `unexpected EOF`.
fn go_words(source: &prost::DecodeError) -> String {
    let text = source.to_string();
    if text.ends_with("buffer underflow") || text.ends_with("invalid varint") {
        return GO_UNEXPECTED_EOF.into();
    }
    if let Some((_, value)) = text.rsplit_once("invalid wire type value: ") {
        return format!("proto: illegal wireType {value}");
    }
    text
}

/// The first fault in `message`'s top-level fields as Go's generated `Unmarshal` finds it (a
/// varint of more than 10 bytes, a declared length that is negative as an int64 or runs past
/// the end, bytes that end inside a field, a wire type that does not exist); `None` when the
/// top level is well formed (a fault is deeper, or is of a kind this walk does not see).
fn go_wire_error(message: &[u8]) -> Option<String> {
    fn varint(rest: &mut &[u8]) -> Result<u64, String> {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            if shift >= 64 {
                return Err("proto: integer overflow".into());
            }
            let Some((&byte, tail)) = rest.split_first() else {
                return Err(GO_UNEXPECTED_EOF.into());
            };
            *rest = tail;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
            shift += 7;
        }
    }
    fn skip(rest: &mut &[u8], length: u64) -> Result<(), String> {
        match usize::try_from(length) {
            Ok(length) if length <= rest.len() => {
                *rest = &rest[length..];
                Ok(())
            }
            _ => Err(GO_UNEXPECTED_EOF.into()),
        }
    }
    let mut rest = message;
    let walked = (|| {
        while !rest.is_empty() {
            let key = varint(&mut rest)?;
            match key & 7 {
                0 => {
                    varint(&mut rest)?;
                }
                1 => skip(&mut rest, 8)?,
                2 => {
                    let length = varint(&mut rest)?;
                    if i64::try_from(length).is_err() {
                        return Err("proto: negative length found during unmarshaling".into());
                    }
                    skip(&mut rest, length)?;
                }
                5 => skip(&mut rest, 4)?,
                // Groups (3, 4) are left to prost.
                3 | 4 => return Ok(()),
                other => return Err(format!("proto: illegal wireType {other}")),
            }
        }
        Ok(())
    })();
    walked.err()
}

/// The messages of one of our kinds: its served JSON (an object or a list, in one served
/// version) to the message bytes, and back. The envelope is not theirs to write.
pub trait ProtobufKind: Send + Sync + 'static {
    /// An object or a `<Kind>List` in `version`'s JSON, as its message.
    fn encode(&self, version: &str, value: &Value) -> Result<Vec<u8>, ProtobufError>;

    /// An object's message in `version`, as its JSON with apiVersion and kind set.
    fn decode(&self, version: &str, raw: &[u8]) -> Result<Value, ProtobufError>;
}

/// The envelope of a protobuf body, opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// The envelope's `typeMeta.apiVersion`, e.g. `storagemigration.k8s.io/v1`.
    pub api_version: String,
    /// The envelope's `typeMeta.kind`, e.g. `StorageVersionMigration`.
    pub kind: String,
    /// The object's own message.
    pub raw: Vec<u8>,
}

/// A whole protobuf body: magic, then the `runtime.Unknown` envelope around `raw`.
pub fn encode_body(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
        }),
        raw: Some(raw),
        // Go writes its string fields whether empty or not.
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    body.extend_from_slice(&MAGIC);
    unknown.encode_raw(&mut body);
    body
}

/// Open a protobuf body: check the magic and read the envelope.
pub fn decode_body(body: &[u8]) -> Result<Envelope, ProtobufError> {
    if body.is_empty() {
        return Err(ProtobufError::Empty);
    }
    let Some(message) = body.strip_prefix(&MAGIC) else {
        return Err(ProtobufError::NoMagic);
    };
    let unknown = Unknown::decode(message)
        .map_err(ProtobufError::malformed_in("runtime.Unknown", message))?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    Ok(Envelope {
        api_version: type_meta.api_version.unwrap_or_default(),
        kind: type_meta.kind.unwrap_or_default(),
        raw: unknown.raw.unwrap_or_default(),
    })
}

/// One frame of a protobuf stream: a 4-byte big-endian length, then the message.
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut framed = Vec::with_capacity(4 + message.len());
    // A message is never near 4 GiB: the body limit is megabytes.
    framed.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    framed.extend_from_slice(message);
    framed
}

/// Reads the frames of a protobuf stream as its bytes arrive.
#[derive(Debug)]
pub struct FrameReader {
    buffer: BytesMut,
    limit: usize,
}

impl FrameReader {
    /// A reader refusing frames longer than `limit` bytes.
    pub fn new(limit: usize) -> Self {
        FrameReader {
            buffer: BytesMut::new(),
            limit,
        }
    }

    /// Add bytes as they arrive.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole frame, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<BytesMut>, ProtobufError> {
        let Some(prefix) = self.buffer.get(..4) else {
            return Ok(None);
        };
        let length = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        if length > self.limit {
            return Err(ProtobufError::FrameTooLarge {
                length,
                limit: self.limit,
            });
        }
        if self.buffer.len() < 4 + length {
            return Ok(None);
        }
        self.buffer.advance(4);
        Ok(Some(self.buffer.split_to(length)))
    }

    /// Bytes of an unfinished frame (a stream that ends here was cut).
    pub fn pending(&self) -> usize {
        self.buffer.len()
    }
}

/// The `(group/version, version)` of an apiVersion: `storagemigration.k8s.io/v1` -> `v1`.
pub fn version_of(api_version: &str) -> &str {
    api_version.rsplit('/').next().unwrap_or(api_version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_magic_then_the_envelope() {
        let body = encode_body("v1", "Status", vec![1, 2, 3]);
        assert_eq!(&body[..4], b"k8s\0");
        let opened = decode_body(&body).expect("opens");
        assert_eq!(
            opened,
            Envelope {
                api_version: "v1".into(),
                kind: "Status".into(),
                raw: vec![1, 2, 3],
            }
        );
    }

    #[test]
    fn bodies_that_are_not_protobuf_are_refused() {
        assert!(matches!(decode_body(b""), Err(ProtobufError::Empty)));
        assert!(matches!(
            decode_body(b"{\"kind\":1}"),
            Err(ProtobufError::NoMagic)
        ));
        assert!(matches!(decode_body(b"k8s"), Err(ProtobufError::NoMagic)));
        let body = encode_body("v1", "Status", vec![7; 40]);
        // Cut anywhere inside a field: an error. A cut between two fields is a shorter valid
        // message, as for any protobuf decoder: after the type meta (magic, tag, length,
        // "v1" and "Status" with theirs), after raw (tag, length, 40 bytes), after the empty
        // contentEncoding (tag, length 0).
        let type_meta_end = 4 + 2 + (2 + 2) + (2 + 6);
        let raw_end = type_meta_end + 2 + 40;
        let boundaries = [type_meta_end, raw_end, raw_end + 2];
        for cut in (5..body.len()).filter(|cut| !boundaries.contains(cut)) {
            assert!(
                matches!(
                    decode_body(&body[..cut]),
                    Err(ProtobufError::Malformed { .. })
                ),
                "cut at {cut}"
            );
        }
        let shorter = decode_body(&body[..type_meta_end]).expect("a shorter message");
        assert!(shorter.raw.is_empty());
        // A length that runs past the end (field 2, length 2^28).
        let overflow = [b'k', b'8', b's', 0, 0x12, 0x80, 0x80, 0x80, 0x80, 0x01];
        assert!(matches!(
            decode_body(&overflow),
            Err(ProtobufError::Malformed { .. })
        ));
    }

    /// Recording 20h's bad bodies, in Go's words.
    #[test]
    fn malformed_bodies_are_worded_as_go_words_them() {
        let words = |body: &[u8]| match decode_body(body) {
            Err(err @ ProtobufError::Malformed { .. }) => err.in_go_words(),
            other => panic!("{other:?}"),
        };
        let valid = encode_body("v1", "ConfigMap", vec![0x0a, 0x02, 0x0a, 0x00]);
        // Cut inside raw (20h step 4): a length past the end.
        assert_eq!(words(&valid[..valid.len() - 6]), "unexpected EOF");
        // raw declaring 2^64-1 bytes (20h step 12).
        let mut overflow = b"k8s\0".to_vec();
        overflow.extend([0x12]);
        overflow.extend([0xff; 9]);
        overflow.extend([0x01, 0x0a]);
        assert_eq!(
            words(&overflow),
            "proto: negative length found during unmarshaling"
        );
        // 2^62 bytes: positive, past the end.
        let mut long = b"k8s\0".to_vec();
        long.extend([
            0x12, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40, 0x0a,
        ]);
        assert_eq!(words(&long), "unexpected EOF");
        // A varint of eleven bytes; a wire type that does not exist.
        let mut varint = b"k8s\0".to_vec();
        varint.extend([0x08]);
        varint.extend([0x80; 10]);
        varint.extend([0x01]);
        assert_eq!(words(&varint), "proto: integer overflow");
        assert_eq!(words(b"k8s\0\x0f"), "proto: illegal wireType 7");
        // A message decoded from an envelope's raw: prost's nested faults in Go's words.
        let nested = k8s_pb::apimachinery::pkg::apis::meta::v1::Status::decode(
            &[0x0a, 0x03, 0x0a, 0x09, b'x'][..],
        )
        .map_err(ProtobufError::malformed("Status"))
        .expect_err("a nested string cut short");
        assert_eq!(nested.in_go_words(), "unexpected EOF");
        assert!(nested.to_string().starts_with("Status: failed to decode"));
    }

    #[test]
    fn frames_are_read_whole_whatever_the_chunks() {
        let mut stream = frame(b"first");
        stream.extend(frame(b""));
        stream.extend(frame(b"third one"));
        let mut reader = FrameReader::new(64);
        let mut frames = Vec::new();
        for byte in &stream {
            reader.push(std::slice::from_ref(byte));
            while let Some(frame) = reader.next_frame().expect("frame") {
                frames.push(frame.to_vec());
            }
        }
        assert_eq!(
            frames,
            vec![b"first".to_vec(), vec![], b"third one".to_vec()]
        );
        assert_eq!(reader.pending(), 0);
    }

    #[test]
    fn a_frame_over_the_limit_is_an_error() {
        let mut reader = FrameReader::new(4);
        reader.push(&frame(b"too long"));
        assert!(matches!(
            reader.next_frame(),
            Err(ProtobufError::FrameTooLarge {
                length: 8,
                limit: 4
            })
        ));
    }

    #[test]
    fn version_of_takes_the_last_segment() {
        assert_eq!(version_of("storagemigration.k8s.io/v1beta1"), "v1beta1");
        assert_eq!(version_of("v1"), "v1");
    }
}
