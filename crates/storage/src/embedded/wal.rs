//! The embedded store's write-ahead log: one file of length-prefixed, CRC-checked records.
//!
//! A log is a snapshot (a header record, then one record per key with its retained history)
//! followed by one record per committed transaction. Compaction rewrites it as a fresh snapshot
//! (temp file, fsync, atomic rename, directory fsync), so the log does not grow forever and the
//! compacted revision survives a restart.
//!
//! Frame: `len: u32 LE | crc32(payload): u32 LE | payload`. The header records how many key
//! records its snapshot holds (format 2), so where the snapshot ends is known.
//!
//! What a crash can leave, and what opening does about it:
//! - a snapshot is written whole or not at all (temp file + rename), so any damage to the
//!   header or to a snapshot record is corruption;
//! - only the transaction being appended can be torn: a prefix of its frame, possibly followed
//!   by zeros or stale bytes of a file extended before its data reached the disk. A damaged
//!   frame after which no intact frame follows is such a torn final record and is cut off;
//! - a damaged frame followed by any intact frame (a flipped bit or a bad length field in the
//!   middle, a bad checksum) is corruption: the open fails with the file and byte offset, and
//!   nothing is cut. [`verify`] reports it; [`recover`] keeps every record before the damage
//!   (moving the damaged file aside) and counts the intact records after it that are lost.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::mvcc::{Change, Live, Mvcc, Version};
use crate::{Revision, StorageError};

const LOG_FILE: &str = "wal.log";
/// Held locked (flock) while the store is open: two processes appending to one log would
/// interleave records.
const LOCK_FILE: &str = "LOCK";
const TEMP_FILE: &str = "wal.log.tmp";
const FRAME_HEADER: usize = 8;
const MAGIC: &[u8; 8] = b"svm-wal\0";
/// Format 2 adds the snapshot's key-record count to the header; format 1 logs still open
/// (their snapshot end is not known, so their key records are judged like transactions).
const FORMAT_VERSION: u32 = 2;
const FORMAT_VERSION_1: u32 = 1;

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
    /// Open (or create) the log in `dir` and replay it. A torn final record is cut off; any
    /// other damage fails the open with [`StorageError::Corrupt`] naming the file and offset.
    pub(super) fn open(dir: &Path) -> Result<Opened, StorageError> {
        fs::create_dir_all(dir)?;
        let lock = lock_dir(dir)?;
        remove_leftover_temp(dir)?;
        let path = dir.join(LOG_FILE);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A new store. (A log is only ever created whole, by `rewrite`.)
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
                    truncated: 0,
                });
            }
            Err(e) => return Err(e.into()),
        };
        let replayed = replay(&bytes);
        let mvcc = match (replayed.mvcc, &replayed.damage) {
            (Some(mvcc), None) => mvcc,
            (Some(mvcc), Some(damage)) if damage.torn => mvcc,
            (_, damage) => {
                let damage = damage.clone().unwrap_or(Damage {
                    offset: 0,
                    problem: "the file is empty".into(),
                    torn: false,
                });
                return Err(StorageError::Corrupt(refusal(dir, &path, &damage)));
            }
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
    pub(super) fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Append a committed transaction and fsync it.
    pub(super) fn append_txn(&mut self, revision: Revision, changes: &[Change]) -> io::Result<()> {
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
    pub(super) fn rewrite(&mut self, snapshot: &[u8]) -> io::Result<()> {
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

/// What [`verify`] found in a data directory's log.
#[derive(Clone, Debug)]
pub struct Verification {
    /// The log file read (`wal.log` in the data directory).
    pub path: PathBuf,
    /// The log file's size, in bytes.
    pub bytes: u64,
    /// Records readable before any damage, the header included.
    pub records: usize,
    /// The current revision of the readable part (`None`: no intact header).
    pub revision: Option<Revision>,
    /// The oldest revision the readable part still keeps (`None`: no intact header).
    pub compacted: Option<Revision>,
    /// The first damage, if any (`None`: the whole log is intact).
    pub damage: Option<DamageReport>,
}

/// Where a log is damaged, and what recovering it would lose.
#[derive(Clone, Debug)]
pub struct DamageReport {
    /// Byte offset in the log file where the damage starts.
    pub offset: u64,
    /// What is wrong there, in words (a bad checksum, a record cut short).
    pub problem: String,
    /// A torn final record (a write that never completed): opening cuts it off.
    pub torn: bool,
    /// Intact records after the damage: lost if the log is recovered.
    pub intact_after: usize,
    /// The revisions of the transactions among them.
    pub revisions_after: Option<(Revision, Revision)>,
}

/// Reads the log in `dir` without changing anything (or taking its lock: a running server's
/// last record may be mid-append, and then reads as torn).
pub fn verify(dir: &Path) -> Result<Verification, StorageError> {
    let path = dir.join(LOG_FILE);
    let bytes = fs::read(&path)?;
    let replayed = replay(&bytes);
    let damage = replayed.damage.map(|d| {
        let (intact_after, revisions_after) = intact_after(&bytes, d.offset);
        DamageReport {
            offset: d.offset as u64,
            problem: d.problem,
            torn: d.torn,
            intact_after,
            revisions_after,
        }
    });
    Ok(Verification {
        path,
        bytes: bytes.len() as u64,
        records: replayed.records,
        revision: replayed.mvcc.as_ref().map(Mvcc::current),
        compacted: replayed.mvcc.as_ref().map(Mvcc::compacted),
        damage,
    })
}

/// What [`recover`] did.
#[derive(Clone, Debug)]
pub struct Recovery {
    /// The damage found (`None`: the log was intact and nothing changed).
    pub damage: Option<DamageReport>,
    /// Records kept.
    pub kept_records: usize,
    /// The revision the recovered store is at.
    pub revision: Revision,
    /// Where the damaged log was kept (`None` when only a torn final record was cut).
    pub damaged_copy: Option<PathBuf>,
    /// The header was damaged and was rebuilt from the records after it.
    pub header_rebuilt: bool,
}

/// Makes the log in `dir` openable again, keeping every record before its first damage: a
/// torn final record is cut (as opening does); otherwise the damaged log is kept beside as
/// `wal.log.damaged-<unix seconds>` and replaced, atomically, by a snapshot of the readable
/// prefix. A damaged header is rebuilt from the intact records after it (current revision:
/// the one before their first transaction; older history counts as compacted). Never makes an
/// empty store out of a damaged one: with nothing readable it fails.
pub fn recover(dir: &Path) -> Result<Recovery, StorageError> {
    let _lock = lock_dir(dir)?;
    remove_leftover_temp(dir)?;
    let path = dir.join(LOG_FILE);
    let bytes = fs::read(&path)?;
    let verification = verify(dir)?;
    let replayed = replay(&bytes);
    let Some(damage) = replayed.damage.clone() else {
        return Ok(Recovery {
            damage: None,
            kept_records: replayed.records,
            revision: replayed.mvcc.as_ref().map_or(1, Mvcc::current),
            damaged_copy: None,
            header_rebuilt: false,
        });
    };
    let report = verification.damage;
    if damage.torn {
        let file = OpenOptions::new().write(true).open(&path)?;
        file.set_len(replayed.valid_len as u64)?;
        file.sync_all()?;
        return Ok(Recovery {
            damage: report,
            kept_records: replayed.records,
            revision: replayed.mvcc.as_ref().map_or(1, Mvcc::current),
            damaged_copy: None,
            header_rebuilt: false,
        });
    }
    let (mvcc, kept_records, report, header_rebuilt) = match replayed.mvcc {
        Some(mvcc) => (mvcc, replayed.records, report, false),
        None => {
            let rebuilt = rebuild_without_header(&bytes).map_err(|problem| {
                StorageError::Corrupt(format!(
                    "write-ahead log {} cannot be recovered: its header is damaged and {problem}",
                    path.display()
                ))
            })?;
            // What is lost now is what follows the first damage after the rebuilt part.
            let report = match rebuilt.damage {
                Some(d) => {
                    let (intact_after, revisions_after) = intact_after(&bytes, d.offset);
                    Some(DamageReport {
                        offset: 0,
                        problem: format!(
                            "{}; then at byte {}: {}",
                            damage.problem, d.offset, d.problem
                        ),
                        torn: false,
                        intact_after,
                        revisions_after,
                    })
                }
                None => Some(DamageReport {
                    offset: 0,
                    problem: damage.problem.clone(),
                    torn: false,
                    intact_after: 0,
                    revisions_after: None,
                }),
            };
            (rebuilt.mvcc, rebuilt.records, report, true)
        }
    };
    let snapshot = encode_snapshot(&mvcc)?;
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let copy = dir.join(format!("{LOG_FILE}.damaged-{seconds}"));
    // The damaged log gets a second name first, so that at every instant `wal.log` is either
    // the damaged log or the recovered one — never missing (which would open as a new store).
    fs::hard_link(&path, &copy)?;
    sync_dir(dir)?;
    let temp = dir.join(TEMP_FILE);
    let mut file = File::create(&temp)?;
    file.write_all(&snapshot)?;
    file.sync_all()?;
    fs::rename(&temp, &path)?;
    sync_dir(dir)?;
    Ok(Recovery {
        damage: report,
        kept_records,
        revision: mvcc.current(),
        damaged_copy: Some(copy),
        header_rebuilt,
    })
}

/// A log whose header is damaged, read from the records after it.
struct Rebuilt {
    mvcc: Mvcc,
    records: usize,
    /// The next damage after the rebuilt part, if any.
    damage: Option<Damage>,
}

fn rebuild_without_header(bytes: &[u8]) -> Result<Rebuilt, String> {
    let mut offset = next_intact(bytes, 1).ok_or("no intact record follows it: nothing to keep")?;
    let mut keys = Vec::new();
    let mut txns = Vec::new();
    let mut damage = None;
    while offset < bytes.len() {
        let payload = match read_frame(&bytes[offset..]) {
            Ok(payload) => payload,
            Err(problem) => {
                damage = Some(Damage {
                    offset,
                    problem: problem.into(),
                    torn: false,
                });
                break;
            }
        };
        let mut decoder = Decoder::new(payload);
        let decoded = match decoder.u8() {
            Ok(TAG_KEY) if txns.is_empty() => {
                decode_key_history(&mut decoder).map(|key| keys.push(key))
            }
            Ok(TAG_TXN) => decoder.i64().and_then(|revision| {
                decode_changes(&mut decoder).map(|changes| txns.push((offset, revision, changes)))
            }),
            Ok(tag) => Err(format!("unexpected record type {tag}")),
            Err(e) => Err(e),
        };
        if let Err(problem) = decoded {
            damage = Some(Damage {
                offset,
                problem,
                torn: false,
            });
            break;
        }
        offset += FRAME_HEADER + payload.len();
    }
    let newest_key = keys
        .iter()
        .flat_map(|(_, versions)| versions.iter().map(|v| v.revision))
        .max()
        .unwrap_or(1);
    let current = txns
        .first()
        .map_or(newest_key, |(_, revision, _)| revision - 1);
    let mut mvcc = Mvcc::restored(current, current).map_err(reason)?;
    let mut records = 1;
    for (key, versions) in keys {
        mvcc.restore_key(key, versions).map_err(reason)?;
        records += 1;
    }
    for (at, revision, changes) in txns {
        if let Err(err) = mvcc.apply(revision, changes) {
            // Kept so far; what follows cannot be applied.
            damage = Some(Damage {
                offset: at,
                problem: reason(err),
                torn: false,
            });
            break;
        }
        records += 1;
    }
    Ok(Rebuilt {
        mvcc,
        records,
        damage,
    })
}

impl std::fmt::Display for DamageReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.torn {
            return write!(
                f,
                "a torn final record at byte {} ({}): a write that never completed; opening \
                 the store cuts it off",
                self.offset, self.problem
            );
        }
        write!(
            f,
            "DAMAGED at byte {} ({}); `store recover` would lose the damaged record and the {} \
             intact records after it",
            self.offset, self.problem, self.intact_after
        )?;
        if let Some((low, high)) = self.revisions_after {
            write!(f, " (transactions of revisions {low}..={high})")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for Verification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} bytes, {} readable records",
            self.path.display(),
            self.bytes,
            self.records
        )?;
        if let (Some(revision), Some(compacted)) = (self.revision, self.compacted) {
            write!(f, " (revision {revision}, compacted {compacted})")?;
        }
        match &self.damage {
            None => write!(f, "; intact"),
            Some(damage) => write!(f, "; {damage}"),
        }
    }
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(damage) = &self.damage else {
            return write!(
                f,
                "the log is intact ({} records, revision {}); nothing changed",
                self.kept_records, self.revision
            );
        };
        if damage.torn {
            return write!(
                f,
                "cut off a torn final record at byte {}; kept {} records (revision {})",
                damage.offset, self.kept_records, self.revision
            );
        }
        write!(
            f,
            "kept {} records before the damage at byte {} ({}); the store is at revision {}. \
             LOST: the damaged record and the {} intact records after it",
            self.kept_records, damage.offset, damage.problem, self.revision, damage.intact_after
        )?;
        if let Some((low, high)) = damage.revisions_after {
            write!(f, " (transactions of revisions {low}..={high})")?;
        }
        if self.header_rebuilt {
            write!(
                f,
                ". The header was rebuilt from the records after it: history before revision \
                 {} counts as compacted",
                self.revision
            )?;
        }
        if let Some(copy) = &self.damaged_copy {
            write!(f, ". The damaged log is kept as {}", copy.display())?;
        }
        Ok(())
    }
}

/// A leftover temp file is a compaction (or recovery) that crashed before its rename: the log
/// itself is still the complete one.
fn remove_leftover_temp(dir: &Path) -> io::Result<()> {
    match fs::remove_file(dir.join(TEMP_FILE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Why a damaged log is not opened, and what the operator can do.
fn refusal(dir: &Path, path: &Path, damage: &Damage) -> String {
    format!(
        "write-ahead log {} is damaged at byte {} ({}), and that is not a torn final record: \
         refusing to start rather than drop the records after it. `svm-apiserver store verify \
         --data-dir {}` reports the damage; `svm-apiserver store recover --data-dir {}` keeps \
         every record before it (the damaged log is kept beside it)",
        path.display(),
        damage.offset,
        damage.problem,
        dir.display(),
        dir.display()
    )
}

fn lock_dir(dir: &Path) -> Result<File, StorageError> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(fs::TryLockError::WouldBlock) => Err(StorageError::unavailable(format!(
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
    header.len(mvcc.histories().count())?;
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

/// The first problem found reading a log.
#[derive(Clone, Debug)]
struct Damage {
    offset: usize,
    problem: String,
    /// A torn final record (what a crash mid-append leaves), cut off on open; anything else is
    /// corruption.
    torn: bool,
}

struct Replayed {
    /// The state of the valid prefix; `None` when not even its header is intact.
    mvcc: Option<Mvcc>,
    /// Length of the prefix made of whole, valid records.
    valid_len: usize,
    /// Records in that prefix, the header included.
    records: usize,
    damage: Option<Damage>,
}

/// Reads records in order into the state they describe.
#[derive(Default)]
struct Reader {
    mvcc: Option<Mvcc>,
    /// Key records the snapshot still owes (`None`: a format 1 log, which does not say).
    keys_left: Option<u32>,
    saw_txn: bool,
}

impl Reader {
    /// Whether the next record belongs to the snapshot, which is never torn (it is written to
    /// a temp file and renamed into place whole).
    fn in_snapshot(&self) -> bool {
        self.mvcc.is_none() || self.keys_left.is_some_and(|n| n > 0)
    }

    /// Why the file cannot end here, if it cannot.
    fn incomplete(&self) -> Option<String> {
        match (&self.mvcc, self.keys_left) {
            (None, _) => Some("the log has no header record".into()),
            (Some(_), Some(n)) if n > 0 => Some(format!("the snapshot ends {n} key records early")),
            _ => None,
        }
    }

    /// Applies one intact record. Fails, changing nothing, on a record that cannot follow
    /// what came before.
    fn record(&mut self, payload: &[u8]) -> Result<(), String> {
        let mut decoder = Decoder::new(payload);
        match (decoder.u8()?, self.mvcc.as_mut()) {
            (TAG_HEADER, None) => {
                let magic = decoder.bytes_raw(MAGIC.len())?;
                let version = decoder.u32()?;
                if magic != MAGIC || !(version == FORMAT_VERSION || version == FORMAT_VERSION_1) {
                    return Err(format!(
                        "not a svm-apiserver log of format {FORMAT_VERSION_1} or {FORMAT_VERSION}"
                    ));
                }
                let current = decoder.i64()?;
                let compacted = decoder.i64()?;
                let keys = (version == FORMAT_VERSION)
                    .then(|| decoder.u32())
                    .transpose()?;
                decoder.finish()?;
                self.mvcc = Some(Mvcc::restored(current, compacted).map_err(reason)?);
                self.keys_left = keys;
            }
            (TAG_KEY, Some(state)) if !self.saw_txn && self.keys_left != Some(0) => {
                let (key, versions) = decode_key_history(&mut decoder)?;
                state.restore_key(key, versions).map_err(reason)?;
                if let Some(left) = self.keys_left.as_mut() {
                    *left -= 1;
                }
            }
            (TAG_TXN, Some(state)) if self.keys_left.is_none_or(|n| n == 0) => {
                let revision = decoder.i64()?;
                let changes = decode_changes(&mut decoder)?;
                state.apply(revision, changes).map_err(reason)?;
                self.saw_txn = true;
            }
            (tag, _) => return Err(format!("unexpected record type {tag}")),
        }
        Ok(())
    }
}

/// A storage error's message without the "storage data corrupt" prefix.
fn reason(err: StorageError) -> String {
    match err {
        StorageError::Corrupt(message) => message,
        other => other.to_string(),
    }
}

/// Reads the log up to its end or its first damage. Never fails: what is wrong is in
/// `damage`.
fn replay(bytes: &[u8]) -> Replayed {
    let mut reader = Reader::default();
    let mut offset = 0;
    let mut records = 0;
    let damage = loop {
        if offset >= bytes.len() {
            break reader.incomplete().map(|problem| Damage {
                offset,
                problem,
                torn: false,
            });
        }
        let payload = match read_frame(&bytes[offset..]) {
            Ok(payload) => payload,
            Err(problem) => {
                let torn = !reader.in_snapshot() && is_torn_tail(bytes, offset);
                break Some(Damage {
                    offset,
                    problem: problem.into(),
                    torn,
                });
            }
        };
        if let Err(problem) = reader.record(payload) {
            break Some(Damage {
                offset,
                problem,
                torn: false,
            });
        }
        offset += FRAME_HEADER + payload.len();
        records += 1;
    };
    Replayed {
        mvcc: reader.mvcc,
        valid_len: offset,
        records,
        damage,
    }
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
        .ok_or("the length field points past the end of the file")?;
    if crc32fast::hash(payload) != crc {
        return Err("checksum mismatch");
    }
    Ok(payload)
}

/// Whether the damaged frame at `offset` is what a crash during the last append leaves:
/// nothing but zeros follows (a file extended before its data reached the disk), or no intact
/// frame starts anywhere after it. A bad length field in the middle of a log is told apart
/// from a torn end this way: the records behind it are still intact.
fn is_torn_tail(bytes: &[u8], offset: usize) -> bool {
    bytes[offset..].iter().all(|&b| b == 0) || next_intact(bytes, offset + 1).is_none()
}

/// The offset of the first intact frame (whole, with the right checksum and a known record
/// type) starting at or after `from`.
fn next_intact(bytes: &[u8], from: usize) -> Option<usize> {
    (from..bytes.len().saturating_sub(FRAME_HEADER)).find(|&at| {
        let rest = &bytes[at..];
        // The checksum is computed only where a record type byte could start a payload.
        matches!(
            rest.get(FRAME_HEADER),
            Some(&(TAG_HEADER | TAG_KEY | TAG_TXN))
        ) && read_frame(rest).is_ok()
    })
}

/// The intact frames after damage at `offset` (what recovering loses), and the revisions of
/// the transactions among them.
fn intact_after(bytes: &[u8], offset: usize) -> (usize, Option<(Revision, Revision)>) {
    let mut count = 0;
    let mut revisions: Option<(Revision, Revision)> = None;
    let mut at = next_intact(bytes, offset + 1);
    while let Some(start) = at {
        let Ok(payload) = read_frame(&bytes[start..]) else {
            at = next_intact(bytes, start + 1);
            continue;
        };
        count += 1;
        if payload.first() == Some(&TAG_TXN) {
            let mut decoder = Decoder::new(&payload[1..]);
            if let Ok(revision) = decoder.i64() {
                revisions = Some(match revisions {
                    None => (revision, revision),
                    Some((low, high)) => (low.min(revision), high.max(revision)),
                });
            }
        }
        at = Some(start + FRAME_HEADER + payload.len());
        if at.is_some_and(|next| next >= bytes.len()) {
            break;
        }
    }
    (count, revisions)
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
mod tests;
