//! The embedded store's write-ahead log: one file of length-prefixed, CRC-checked records.
//!
//! A log is a snapshot (a header record, then one record per key with its retained history)
//! followed by one record per committed transaction. Compaction rewrites it as a fresh snapshot
//! (temp file, fsync, atomic rename, directory fsync), so the log does not grow forever and the
//! compacted revision survives a restart.
//!
//! Frame: `len: u32 LE | crc32(payload): u32 LE | payload`. A crash can only tear the last
//! frame; on open a bad last frame (or a bad frame followed only by zero bytes, as a file
//! extended before its data reached the disk looks) is truncated away, while a bad frame with
//! data after it is corruption and fails the open.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::mvcc::{Change, Live, Mvcc, Version};
use crate::storage::{Revision, StorageError};

const LOG_FILE: &str = "wal.log";
/// Held locked (flock) while the store is open: two processes appending to one log would
/// interleave records.
const LOCK_FILE: &str = "LOCK";
const TEMP_FILE: &str = "wal.log.tmp";
const FRAME_HEADER: usize = 8;
const MAGIC: &[u8; 8] = b"svm-wal\0";
const FORMAT_VERSION: u32 = 1;

const TAG_HEADER: u8 = 1;
const TAG_KEY: u8 = 2;
const TAG_TXN: u8 = 3;

const CHANGE_PUT: u8 = 1;
const CHANGE_DELETE: u8 = 2;

/// The open log, positioned for appends.
#[derive(Debug)]
pub(super) struct Wal {
    file: File,
    /// The data directory's lock, released when the store is dropped.
    _lock: File,
    dir: PathBuf,
    /// Bytes of whole records in the file; a failed append is cut back to this length.
    len: u64,
    /// Set when the file may hold a partial record we could not remove: no more writes then.
    broken: Option<String>,
}

/// What opening a log found.
pub(super) struct Opened {
    pub wal: Wal,
    pub mvcc: Mvcc,
    /// Bytes of a torn last record that were cut off (0 when the log was clean).
    pub truncated: u64,
}

impl Wal {
    /// Open (or create) the log in `dir` and replay it.
    pub fn open(dir: &Path) -> Result<Opened, StorageError> {
        fs::create_dir_all(dir)?;
        let lock = lock_dir(dir)?;
        // A leftover temp file is a compaction that crashed before its rename: the log itself
        // is still the complete one.
        match fs::remove_file(dir.join(TEMP_FILE)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        let path = dir.join(LOG_FILE);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let replayed = replay(&bytes)?;
        let Some(mvcc) = replayed.mvcc else {
            // Nothing whole in the file (new, or torn while writing its first record).
            let mvcc = Mvcc::new();
            let mut wal = Wal {
                file: OpenOptions::new().append(true).create(true).open(&path)?,
                _lock: lock,
                dir: dir.to_path_buf(),
                len: 0,
                broken: None,
            };
            wal.rewrite(&encode_snapshot(&mvcc)?)?;
            return Ok(Opened {
                wal,
                mvcc,
                truncated: bytes.len() as u64,
            });
        };
        let file = OpenOptions::new().append(true).open(&path)?;
        let truncated = (bytes.len() - replayed.valid_len) as u64;
        if truncated > 0 {
            file.set_len(replayed.valid_len as u64)?;
            file.sync_all()?;
        }
        Ok(Opened {
            wal: Wal {
                file,
                _lock: lock,
                dir: dir.to_path_buf(),
                len: replayed.valid_len as u64,
                broken: None,
            },
            mvcc,
            truncated,
        })
    }

    /// Why the log refuses writes, if it does.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Append a committed transaction and fsync it.
    pub fn append_txn(&mut self, revision: Revision, changes: &[Change]) -> io::Result<()> {
        if let Some(reason) = &self.broken {
            return Err(io::Error::other(reason.clone()));
        }
        let frame = frame(&encode_txn(revision, changes)?)?;
        let written = self
            .file
            .write_all(&frame)
            .and_then(|()| self.file.sync_data());
        if let Err(error) = written {
            // Cut off whatever part of the record reached the file, so a later append does
            // not land behind garbage (which would read as corruption before the tail).
            let rolled_back = self
                .file
                .set_len(self.len)
                .and_then(|()| self.file.sync_all());
            if let Err(rollback) = rolled_back {
                self.broken = Some(format!(
                    "write-ahead log append failed ({error}) and could not be rolled back \
                     ({rollback}); restart to recover"
                ));
            }
            return Err(error);
        }
        self.len += frame.len() as u64;
        Ok(())
    }

    /// Replace the whole log by `snapshot` (frames from [`encode_snapshot`]), atomically.
    pub fn rewrite(&mut self, snapshot: &[u8]) -> io::Result<()> {
        if let Some(reason) = &self.broken {
            return Err(io::Error::other(reason.clone()));
        }
        let temp = self.dir.join(TEMP_FILE);
        let written = File::create(&temp).and_then(|mut file| {
            file.write_all(snapshot)?;
            file.sync_all()
        });
        if let Err(error) = written.and_then(|()| fs::rename(&temp, self.dir.join(LOG_FILE))) {
            let _ = fs::remove_file(&temp);
            return Err(error);
        }
        // From here the new log is in place: failing to use it means no more safe writes.
        let reopened = sync_dir(&self.dir).and_then(|()| {
            OpenOptions::new()
                .append(true)
                .open(self.dir.join(LOG_FILE))
        });
        match reopened {
            Ok(file) => {
                self.file = file;
                self.len = snapshot.len() as u64;
                Ok(())
            }
            Err(error) => {
                self.broken = Some(format!(
                    "write-ahead log was rewritten but could not be reopened ({error}); \
                     restart to recover"
                ));
                Err(error)
            }
        }
    }
}

fn lock_dir(dir: &Path) -> Result<File, StorageError> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(fs::TryLockError::WouldBlock) => Err(StorageError::Unavailable(format!(
            "data directory {} is in use by another store",
            dir.display()
        ))),
        Err(fs::TryLockError::Error(e)) => Err(e.into()),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The snapshot of `mvcc` as log frames: a header, then every key's retained history.
pub(super) fn encode_snapshot(mvcc: &Mvcc) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut header = Encoder::new(TAG_HEADER);
    header.bytes_raw(MAGIC);
    header.u32(FORMAT_VERSION);
    header.i64(mvcc.current());
    header.i64(mvcc.compacted());
    out.extend(frame(&header.0)?);
    for (key, versions) in mvcc.histories() {
        let mut record = Encoder::new(TAG_KEY);
        record.bytes(key.as_bytes())?;
        record.len(versions.len())?;
        for version in versions {
            record.i64(version.revision);
            record.u32(version.sub);
            match &version.live {
                Some(live) => {
                    record.u8(1);
                    record.i64(live.create_revision);
                    record.bytes(&live.value)?;
                }
                None => record.u8(0),
            }
        }
        out.extend(frame(&record.0)?);
    }
    Ok(out)
}

fn encode_txn(revision: Revision, changes: &[Change]) -> io::Result<Vec<u8>> {
    let mut record = Encoder::new(TAG_TXN);
    record.i64(revision);
    record.len(changes.len())?;
    for change in changes {
        match change {
            Change::Put { key, value } => {
                record.u8(CHANGE_PUT);
                record.bytes(key.as_bytes())?;
                record.bytes(value)?;
            }
            Change::Delete { key } => {
                record.u8(CHANGE_DELETE);
                record.bytes(key.as_bytes())?;
            }
        }
    }
    Ok(record.0)
}

fn frame(payload: &[u8]) -> io::Result<Vec<u8>> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "record larger than 4 GiB"))?;
    let mut out = Vec::with_capacity(FRAME_HEADER + payload.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

struct Replayed {
    /// `None` when the file holds no whole record.
    mvcc: Option<Mvcc>,
    /// Length of the prefix made of whole, valid records.
    valid_len: usize,
}

fn replay(bytes: &[u8]) -> Result<Replayed, StorageError> {
    let mut mvcc: Option<Mvcc> = None;
    let mut saw_txn = false;
    let mut offset = 0;
    while offset < bytes.len() {
        let payload = match read_frame(&bytes[offset..]) {
            Ok(payload) => payload,
            Err(problem) => {
                if is_torn_tail(&bytes[offset..]) {
                    break;
                }
                return Err(StorageError::Corrupt(format!(
                    "write-ahead log record at byte {offset} is damaged ({problem}) and is not \
                     the last one"
                )));
            }
        };
        let corrupt = |what: String| {
            StorageError::Corrupt(format!("write-ahead log record at byte {offset}: {what}"))
        };
        let mut decoder = Decoder::new(payload);
        match (decoder.u8().map_err(corrupt)?, mvcc.as_mut()) {
            (TAG_HEADER, None) => {
                let magic = decoder.bytes_raw(MAGIC.len()).map_err(corrupt)?;
                let version = decoder.u32().map_err(corrupt)?;
                if magic != MAGIC || version != FORMAT_VERSION {
                    return Err(corrupt(format!(
                        "not a svm-apiserver log of format {FORMAT_VERSION}"
                    )));
                }
                let current = decoder.i64().map_err(corrupt)?;
                let compacted = decoder.i64().map_err(corrupt)?;
                decoder.finish().map_err(corrupt)?;
                mvcc = Some(Mvcc::restored(current, compacted)?);
            }
            (TAG_KEY, Some(state)) if !saw_txn => {
                let (key, versions) = decode_key_history(&mut decoder).map_err(corrupt)?;
                state.restore_key(key, versions)?;
            }
            (TAG_TXN, Some(state)) => {
                let revision = decoder.i64().map_err(corrupt)?;
                let changes = decode_changes(&mut decoder).map_err(corrupt)?;
                state.apply(revision, changes)?;
                saw_txn = true;
            }
            (tag, _) => {
                return Err(corrupt(format!("unexpected record type {tag}")));
            }
        }
        offset += FRAME_HEADER + payload.len();
    }
    Ok(Replayed {
        mvcc,
        valid_len: offset,
    })
}

/// The payload of the frame at the start of `bytes`, if it is whole and intact.
fn read_frame(bytes: &[u8]) -> Result<&[u8], &'static str> {
    let header = bytes.get(..FRAME_HEADER).ok_or("truncated frame header")?;
    let (len, crc) = header.split_at(4);
    let len = u32::from_le_bytes(len.try_into().map_err(|_| "bad length")?) as usize;
    let crc = u32::from_le_bytes(crc.try_into().map_err(|_| "bad checksum")?);
    if len == 0 {
        return Err("empty record");
    }
    let payload = FRAME_HEADER
        .checked_add(len)
        .and_then(|end| bytes.get(FRAME_HEADER..end))
        .ok_or("truncated record")?;
    if crc32fast::hash(payload) != crc {
        return Err("checksum mismatch");
    }
    Ok(payload)
}

/// Whether a bad frame at the start of `rest` is what a crash during the last append leaves:
/// the frame reaches (or claims to reach past) the end of the file, or nothing but zeros follows.
fn is_torn_tail(rest: &[u8]) -> bool {
    let Some(header) = rest.get(..FRAME_HEADER) else {
        return true;
    };
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let reaches_end = FRAME_HEADER.saturating_add(len) >= rest.len();
    reaches_end || rest.iter().all(|&b| b == 0)
}

fn decode_key_history(decoder: &mut Decoder<'_>) -> Result<(String, Vec<Version>), String> {
    let key = decoder.string()?;
    let count = decoder.u32()?;
    let mut versions = Vec::new();
    for _ in 0..count {
        let revision = decoder.i64()?;
        let sub = decoder.u32()?;
        let live = match decoder.u8()? {
            0 => None,
            1 => {
                let create_revision = decoder.i64()?;
                let value = decoder.bytes()?;
                Some(Live {
                    value: Arc::from(value),
                    create_revision,
                })
            }
            other => return Err(format!("unknown version kind {other}")),
        };
        versions.push(Version {
            revision,
            sub,
            live,
        });
    }
    decoder.finish()?;
    Ok((key, versions))
}

fn decode_changes(decoder: &mut Decoder<'_>) -> Result<Vec<Change>, String> {
    let count = decoder.u32()?;
    let mut changes = Vec::new();
    for _ in 0..count {
        let change = match decoder.u8()? {
            CHANGE_PUT => Change::Put {
                key: decoder.string()?,
                value: Arc::from(decoder.bytes()?),
            },
            CHANGE_DELETE => Change::Delete {
                key: decoder.string()?,
            },
            other => return Err(format!("unknown change kind {other}")),
        };
        changes.push(change);
    }
    decoder.finish()?;
    if changes.is_empty() {
        return Err("transaction without changes".into());
    }
    Ok(changes)
}

/// Little-endian, length-prefixed encoding of one record payload.
struct Encoder(Vec<u8>);

impl Encoder {
    fn new(tag: u8) -> Self {
        Self(vec![tag])
    }
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn len(&mut self, len: usize) -> io::Result<()> {
        let len = u32::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many items"))?;
        self.u32(len);
        Ok(())
    }
    fn bytes(&mut self, v: &[u8]) -> io::Result<()> {
        self.len(v.len())?;
        self.0.extend_from_slice(v);
        Ok(())
    }
    fn bytes_raw(&mut self, v: &[u8]) {
        self.0.extend_from_slice(v);
    }
}

/// Reads what [`Encoder`] wrote; every read is bounds-checked, since the input is from disk.
struct Decoder<'a> {
    rest: &'a [u8],
}

impl<'a> Decoder<'a> {
    fn new(payload: &'a [u8]) -> Self {
        Self { rest: payload }
    }
    fn bytes_raw(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.rest.len() < n {
            return Err("record ends early".into());
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.bytes_raw(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        let raw = self.bytes_raw(4)?;
        Ok(u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]))
    }
    fn i64(&mut self) -> Result<i64, String> {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(self.bytes_raw(8)?);
        Ok(i64::from_le_bytes(buf))
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let len = self.u32()? as usize;
        self.bytes_raw(len)
    }
    fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| "key is not UTF-8".to_string())
    }
    fn finish(&self) -> Result<(), String> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(format!("{} unexpected trailing bytes", self.rest.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value: &[u8]) -> Change {
        Change::Put {
            key: key.into(),
            value: Arc::from(value),
        }
    }

    /// A log with a snapshot header and `n` transactions putting `/k<i>`.
    fn log_with(n: i64) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = encode_snapshot(&Mvcc::new()).unwrap();
        let mut ends = vec![bytes.len()];
        for i in 0..n {
            let changes = vec![put(&format!("/k{i}"), b"value")];
            bytes.extend(frame(&encode_txn(2 + i, &changes).unwrap()).unwrap());
            ends.push(bytes.len());
        }
        (bytes, ends)
    }

    #[test]
    fn replays_a_clean_log() {
        let (bytes, _) = log_with(3);
        let replayed = replay(&bytes).unwrap();
        assert_eq!(replayed.valid_len, bytes.len());
        assert_eq!(replayed.mvcc.unwrap().current(), 4);
    }

    #[test]
    fn a_torn_last_record_is_cut_at_every_byte() {
        let (bytes, ends) = log_with(2);
        for cut in ends[1] + 1..ends[2] {
            let replayed = replay(&bytes[..cut]).unwrap();
            assert_eq!(replayed.valid_len, ends[1], "cut at {cut}");
            assert_eq!(replayed.mvcc.unwrap().current(), 2);
        }
    }

    #[test]
    fn a_zero_filled_tail_is_torn_not_corrupt() {
        let (mut bytes, ends) = log_with(1);
        bytes.extend(std::iter::repeat_n(0u8, 64));
        let replayed = replay(&bytes).unwrap();
        assert_eq!(replayed.valid_len, ends[1]);
    }

    #[test]
    fn damage_before_the_last_record_is_corruption() {
        let (mut bytes, ends) = log_with(3);
        // Flip a byte inside the first transaction's payload.
        bytes[ends[0] + FRAME_HEADER + 2] ^= 0xff;
        assert!(matches!(replay(&bytes), Err(StorageError::Corrupt(_))));
    }

    #[test]
    fn a_damaged_last_record_is_torn() {
        let (mut bytes, ends) = log_with(2);
        bytes[ends[1] + FRAME_HEADER + 2] ^= 0xff;
        let replayed = replay(&bytes).unwrap();
        assert_eq!(replayed.valid_len, ends[1]);
    }

    #[test]
    fn a_revision_gap_is_corruption() {
        let mut bytes = encode_snapshot(&Mvcc::new()).unwrap();
        bytes.extend(frame(&encode_txn(3, &[put("/a", b"1")]).unwrap()).unwrap());
        bytes.extend(frame(&encode_txn(4, &[put("/b", b"1")]).unwrap()).unwrap());
        assert!(matches!(replay(&bytes), Err(StorageError::Corrupt(_))));
    }

    #[test]
    fn a_file_that_is_not_a_log_is_rejected() {
        let mut bytes = frame(b"\x01not-a-log-header-at-all").unwrap();
        bytes.extend(frame(b"more").unwrap());
        assert!(matches!(replay(&bytes), Err(StorageError::Corrupt(_))));
    }

    #[test]
    fn a_snapshot_round_trips() {
        let mut mvcc = Mvcc::new();
        mvcc.apply(2, vec![put("/a", b"1"), put("/b", b"2")])
            .unwrap();
        mvcc.apply(3, vec![Change::Delete { key: "/a".into() }])
            .unwrap();
        mvcc.apply(4, vec![put("/b", b"3")]).unwrap();
        mvcc.compact(3).unwrap();
        let bytes = encode_snapshot(&mvcc).unwrap();
        let restored = replay(&bytes).unwrap().mvcc.unwrap();
        assert_eq!(restored.current(), 4);
        assert_eq!(restored.compacted(), 3);
        let original: Vec<_> = mvcc.histories().collect();
        let back: Vec<_> = restored.histories().collect();
        assert_eq!(original, back);
    }
}
