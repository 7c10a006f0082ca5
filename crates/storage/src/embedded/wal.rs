//! The embedded store's write-ahead log: one file of length-prefixed, CRC-checked records.
//!
//! A log is a snapshot (a header record, then one record per key with its retained history)
//! followed by one record per committed transaction. Compaction rewrites it as a fresh snapshot
//! (temp file, fsync, atomic rename, directory fsync), so the log does not grow forever and the
//! compacted revision survives a restart. A new store's first log is made the same way, after
//! its directory's creation is made durable (an fsync of the directory it was created in).
//!
//! Frame: `len: u32 LE | crc32(payload): u32 LE | payload`. The header records how many key
//! records its snapshot holds (format 2), so where the snapshot ends is known.
//!
//! What a crash can leave, and what opening does about it. A log is only changed in place by
//! appending a record and fsyncing it before the next one is written (and by cutting a torn
//! record off, then fsyncing), so a power loss can leave only the record being appended
//! unfinished — the file's last. Of its bytes, written but not yet fsynced, any part may be
//! missing: the file may end anywhere inside it, and any 512-byte sector it touches (sectors
//! start at file offsets that are multiples of 512; the disk writes a sector whole or not at
//! all) may read as zeros, never written. What is missing of such a record is cut off on open,
//! with a warning. It is a record:
//! - *cut short*: the file ends inside its 8-byte header, or inside the body its length field
//!   announces — unless the bytes there, taken whole, carry the record's checksum (then it is
//!   whole and its length field is damaged: corruption);
//! - *whole by its length, with a wrong checksum and a sector piece of zeros*: a piece of the
//!   frame between sector boundaries (or its start or end) that is all zeros, never written;
//! - *starting with zeros*: its first sector piece is all zeros, so its length field is
//!   unknown (a zero length is no record's);
//!
//! and in each case no intact record starts anywhere after it (what follows it is at most the
//! rest of the same record). A snapshot is written whole or not at all (temp file + rename),
//! so its records are never torn. Anything else is corruption, and refuses to open, naming the
//! file and byte offset and changing nothing: a whole record with a wrong checksum and no
//! zeros (a flipped bit — in the last record too: it was fsynced, so it was acknowledged), a
//! length field that points anywhere wrong, a damaged header or snapshot record, records
//! after the damage. (A sector of zeros where a disk lost an acknowledged last record reads
//! as a torn write and is cut: the one case told apart from a crash by nothing, the trade
//! etcd's WAL makes too.) [`verify`] reports the damage; [`recover`] keeps every record before
//! it (moving the damaged file aside) and counts the intact records after it that are lost.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::fs::{DirLock, Disk, Fs, LogFile};
use super::mvcc::{Change, Live, Mvcc, Version};
use crate::{Revision, StorageError};

const LOG_FILE: &str = "wal.log";
/// Held locked (flock) while the store is open: two processes appending to one log would
/// interleave records.
const LOCK_FILE: &str = "LOCK";
const TEMP_FILE: &str = "wal.log.tmp";
const FRAME_HEADER: usize = 8;
/// The unit a disk writes whole or not at all, at file offsets that are its multiples: a torn
/// write leaves whole sectors unwritten, reading as zeros.
const SECTOR: usize = 512;
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
    fs: Arc<dyn Fs>,
    file: Box<dyn LogFile>,
    /// The data directory's lock, released when the store is dropped.
    _lock: DirLock,
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
    /// The torn last record that was cut off, if there was one.
    pub cut: Option<Cut>,
}

/// A torn last record, cut off on open.
pub(super) struct Cut {
    /// Where it started.
    pub offset: u64,
    /// Its bytes, cut off.
    pub bytes: u64,
    /// How it was torn, in words.
    pub problem: String,
}

impl Wal {
    /// Open (or create) the log in `dir` and replay it. A torn final record is cut off; any
    /// other damage fails the open with [`StorageError::Corrupt`] naming the file and offset.
    pub(super) fn open(fs: Arc<dyn Fs>, dir: &Path) -> Result<Opened, StorageError> {
        create_dirs(&*fs, dir)?;
        let lock = lock_dir(&*fs, dir)?;
        remove_leftover_temp(&*fs, dir)?;
        let path = dir.join(LOG_FILE);
        let bytes = match fs.read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Self::create(fs, lock, dir),
            Err(e) => return Err(e.into()),
        };
        let replayed = replay(&bytes);
        let valid_len = replayed.valid_len;
        let (mvcc, torn) = usable(dir, &path, &bytes, replayed)?;
        let mut file = fs.open_append(&path)?;
        let cut = match torn {
            Some(damage) => {
                file.set_len(valid_len as u64)?;
                file.sync_all()?;
                Some(Cut {
                    offset: damage.offset as u64,
                    bytes: (bytes.len() - valid_len) as u64,
                    problem: damage.problem,
                })
            }
            None => None,
        };
        Ok(Opened {
            wal: Wal {
                fs,
                file,
                _lock: lock,
                dir: dir.to_path_buf(),
                len: valid_len as u64,
                broken: None,
            },
            mvcc,
            cut,
        })
    }

    /// A new store's log, holding the empty snapshot. Its directory's own entry is made
    /// durable first (the directory may be left from a start that crashed before doing so),
    /// then the log is made whole under its temp name and renamed into place: `wal.log` never
    /// exists partly written, so a log that is not whole is damage, never a new store.
    fn create(fs: Arc<dyn Fs>, lock: DirLock, dir: &Path) -> Result<Opened, StorageError> {
        fs.sync_dir(parent(dir))?;
        let mvcc = Mvcc::new();
        let snapshot = encode_snapshot(&mvcc)?;
        put_in_place(&*fs, dir, &snapshot)?;
        fs.sync_dir(dir)?;
        let wal = Wal {
            file: fs.open_append(&dir.join(LOG_FILE))?,
            fs,
            _lock: lock,
            dir: dir.to_path_buf(),
            len: snapshot.len() as u64,
            broken: None,
        };
        Ok(Opened {
            wal,
            mvcc,
            cut: None,
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
        put_in_place(&*self.fs, &self.dir, snapshot)?;
        // From here the new log is in place: failing to use it means no more safe writes.
        let reopened = self
            .fs
            .sync_dir(&self.dir)
            .and_then(|()| self.fs.open_append(&self.dir.join(LOG_FILE)));
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

/// Puts `log` in place as the log of `dir`, whole or not at all: written to the temp file,
/// fsynced, and renamed over `wal.log`. On a failure the old log stays and the temp file is
/// removed. The caller fsyncs the directory next, so the rename survives a power loss.
fn put_in_place(fs: &dyn Fs, dir: &Path, log: &[u8]) -> io::Result<()> {
    let temp = dir.join(TEMP_FILE);
    let written = fs.create(&temp).and_then(|mut file| {
        file.write_all(log)?;
        file.sync_all()
    });
    if let Err(error) = written.and_then(|()| fs.rename(&temp, &dir.join(LOG_FILE))) {
        let _ = fs.remove_file(&temp);
        return Err(error);
    }
    Ok(())
}

/// Creates `dir` and its missing parents, each made durable: the directory it is created in is
/// fsynced, so a power loss cannot take it (and the store in it) away.
fn create_dirs(fs: &dyn Fs, dir: &Path) -> io::Result<()> {
    let created = match fs.create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound && dir.parent().is_some() => {
            create_dirs(fs, parent(dir))?;
            fs.create_dir(dir)
        }
        other => other,
    };
    match created {
        Ok(()) => fs.sync_dir(parent(dir)),
        // Made before (its parent was fsynced then, or the directory is the operator's).
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// The directory `path` is in (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
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
    verify_on(&Disk, dir)
}

fn verify_on(fs: &dyn Fs, dir: &Path) -> Result<Verification, StorageError> {
    let path = dir.join(LOG_FILE);
    let bytes = fs.read(&path)?;
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
    recover_on(&Disk, dir)
}

pub(super) fn recover_on(fs: &dyn Fs, dir: &Path) -> Result<Recovery, StorageError> {
    let _lock = lock_dir(fs, dir)?;
    remove_leftover_temp(fs, dir)?;
    let path = dir.join(LOG_FILE);
    let bytes = fs.read(&path)?;
    let verification = verify_on(fs, dir)?;
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
        let mut file = fs.open_append(&path)?;
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
            let (mvcc, records, report) = rebuild_from_records(&bytes, &damage, &path)?;
            (mvcc, records, report, true)
        }
    };
    let snapshot = encode_snapshot(&mvcc)?;
    let copy = keep_damaged_copy(fs, dir, &path)?;
    fs.sync_dir(dir)?;
    put_in_place(fs, dir, &snapshot)?;
    fs.sync_dir(dir)?;
    Ok(Recovery {
        damage: report,
        kept_records,
        revision: mvcc.current(),
        damaged_copy: Some(copy),
        header_rebuilt,
    })
}

/// The store a log with a damaged header holds, read from the records after the header; the
/// report names what is lost now: what follows the first damage after the rebuilt part.
fn rebuild_from_records(
    bytes: &[u8],
    damage: &Damage,
    path: &Path,
) -> Result<(Mvcc, usize, Option<DamageReport>), StorageError> {
    let rebuilt = rebuild_without_header(bytes).map_err(|problem| {
        StorageError::Corrupt(format!(
            "write-ahead log {} cannot be recovered: its header is damaged and {problem}",
            path.display()
        ))
    })?;
    let report = match rebuilt.damage {
        Some(d) => {
            let (intact_after, revisions_after) = intact_after(bytes, d.offset);
            DamageReport {
                offset: 0,
                problem: format!(
                    "{}; then at byte {}: {}",
                    damage.problem, d.offset, d.problem
                ),
                torn: false,
                intact_after,
                revisions_after,
            }
        }
        None => DamageReport {
            offset: 0,
            problem: damage.problem.clone(),
            torn: false,
            intact_after: 0,
            revisions_after: None,
        },
    };
    Ok((rebuilt.mvcc, rebuilt.records, Some(report)))
}

/// Gives the damaged log a second name, so that at every instant `wal.log` is either the
/// damaged log or the recovered one — never missing (which would open as a new store). A
/// second recovery within the same second gets `.1`, `.2`, … after the seconds.
fn keep_damaged_copy(fs: &dyn Fs, dir: &Path, path: &Path) -> Result<PathBuf, StorageError> {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut copy = dir.join(format!("{LOG_FILE}.damaged-{seconds}"));
    let mut taken = 0;
    loop {
        match fs.hard_link(path, &copy) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && taken < 1000 => {
                taken += 1;
                copy = dir.join(format!("{LOG_FILE}.damaged-{seconds}.{taken}"));
            }
            linked => break linked?,
        }
    }
    Ok(copy)
}

/// A log whose header is damaged, read from the records after it.
struct Rebuilt {
    mvcc: Mvcc,
    records: usize,
    /// The next damage after the rebuilt part, if any.
    damage: Option<Damage>,
}

fn rebuild_without_header(bytes: &[u8]) -> Result<Rebuilt, String> {
    let offset = next_intact(bytes, 1).ok_or("no intact record follows it: nothing to keep")?;
    let read = read_after_header(bytes, offset);
    let newest_key = read
        .keys
        .iter()
        .flat_map(|(_, versions)| versions.iter().map(|v| v.revision))
        .max()
        .unwrap_or(1);
    // The state before the first transaction read: its revision's predecessor, or the
    // snapshot's newest when there is none.
    let current = read
        .txns
        .first()
        .map_or(newest_key, |(_, revision, _)| revision - 1);
    let mut mvcc = Mvcc::restored(current, current).map_err(reason)?;
    let mut records = 1;
    for (key, versions) in read.keys {
        mvcc.restore_key(key, versions).map_err(reason)?;
        records += 1;
    }
    let mut damage = read.damage;
    for (at, revision, changes) in read.txns {
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

/// The records after a damaged header, decoded but not yet applied.
struct AfterHeader {
    /// The snapshot's key records still there: each key with its history.
    keys: Vec<(String, Vec<Version>)>,
    /// The transactions after them, each with the offset of its record.
    txns: Vec<(usize, Revision, Vec<Change>)>,
    /// The damage that ended the reading, if any.
    damage: Option<Damage>,
}

/// Decode the records from `offset` (the first intact one after the header) to the end or
/// the next damage: key records until the first transaction, then transactions.
fn read_after_header(bytes: &[u8], mut offset: usize) -> AfterHeader {
    let mut read = AfterHeader {
        keys: Vec::new(),
        txns: Vec::new(),
        damage: None,
    };
    while offset < bytes.len() {
        let payload = match read_frame(&bytes[offset..]) {
            Ok(payload) => payload,
            Err(bad) => {
                read.damage = Some(Damage {
                    offset,
                    problem: bad.problem().into(),
                    torn: false,
                });
                break;
            }
        };
        let mut decoder = Decoder::new(payload);
        let decoded = match decoder.u8() {
            Ok(TAG_KEY) if read.txns.is_empty() => {
                decode_key_history(&mut decoder).map(|key| read.keys.push(key))
            }
            Ok(TAG_TXN) => decoder.i64().and_then(|revision| {
                decode_changes(&mut decoder)
                    .map(|changes| read.txns.push((offset, revision, changes)))
            }),
            Ok(tag) => Err(format!("unexpected record type {tag}")),
            Err(e) => Err(e),
        };
        if let Err(problem) = decoded {
            read.damage = Some(Damage {
                offset,
                problem,
                torn: false,
            });
            break;
        }
        offset += FRAME_HEADER + payload.len();
    }
    read
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
fn remove_leftover_temp(fs: &dyn Fs, dir: &Path) -> io::Result<()> {
    match fs.remove_file(&dir.join(TEMP_FILE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The state a replayed log opens with, and its torn last record to cut off, if any; any
/// other damage (or no intact header) refuses the open, saying what `recover` would keep.
fn usable(
    dir: &Path,
    path: &Path,
    bytes: &[u8],
    replayed: Replayed,
) -> Result<(Mvcc, Option<Damage>), StorageError> {
    match (replayed.mvcc, replayed.damage) {
        (Some(mvcc), None) => Ok((mvcc, None)),
        (Some(mvcc), Some(damage)) if damage.torn => Ok((mvcc, Some(damage))),
        (mvcc, damage) => {
            let damage = damage.unwrap_or(Damage {
                offset: 0,
                problem: "the file is empty".into(),
                torn: false,
            });
            let kept = mvcc.as_ref().map(|m| (replayed.records, m.current()));
            Err(StorageError::Corrupt(refusal(
                dir, path, bytes, &damage, kept,
            )))
        }
    }
}

/// Why a damaged log is not opened, and what the operator can do: `kept` is what `recover`
/// would keep (records, revision), `None` when the header itself is damaged.
fn refusal(
    dir: &Path,
    path: &Path,
    bytes: &[u8],
    damage: &Damage,
    kept: Option<(usize, Revision)>,
) -> String {
    let recover = match kept {
        Some((records, revision)) => {
            let (intact, revisions) = intact_after(bytes, damage.offset);
            let mut lost = format!(
                "would keep the {records} records before it (revision {revision}) and lose the \
                 damaged record and the {intact} intact records after it"
            );
            if let Some((low, high)) = revisions {
                lost.push_str(&format!(" (transactions of revisions {low}..={high})"));
            }
            lost
        }
        None => "would rebuild the header from the intact records after it (and fails, \
                 changing nothing, if there are none)"
            .to_string(),
    };
    format!(
        "write-ahead log {} is damaged at byte {} ({}), and that is not what a crash leaves (a \
         last record cut short, or with sectors never written): refusing to start rather than \
         drop acknowledged writes. `svm-apiserver store verify --data-dir {}` reports the \
         damage; with the server stopped, `svm-apiserver store recover --data-dir {}` {recover}, \
         keeping the damaged log beside it as {LOG_FILE}.damaged-<unix seconds>",
        path.display(),
        damage.offset,
        damage.problem,
        dir.display(),
        dir.display()
    )
}

/// Takes the data directory's lock, and fsyncs the directory: the lock file may have just
/// been created in it.
fn lock_dir(fs: &dyn Fs, dir: &Path) -> Result<DirLock, StorageError> {
    match fs.lock(&dir.join(LOCK_FILE))? {
        Some(lock) => {
            fs.sync_dir(dir)?;
            Ok(lock)
        }
        None => Err(StorageError::unavailable(format!(
            "data directory {} is in use by another store",
            dir.display()
        ))),
    }
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
            Err(bad) => {
                let torn = match reader.in_snapshot() {
                    // A snapshot is renamed into place whole: never torn.
                    true => None,
                    false => torn_by_crash(bytes, offset, bad),
                };
                break Some(match torn {
                    Some(how) => Damage {
                        offset,
                        problem: how,
                        torn: true,
                    },
                    None => Damage {
                        offset,
                        problem: bad.problem().into(),
                        torn: false,
                    },
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

/// Why the frame at some offset is not a whole, intact record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BadFrame {
    /// The file ends inside its 8-byte header.
    ShortHeader,
    /// Its length field is zero: no record is empty.
    Empty,
    /// Its length field points past the end of the file.
    PastEnd,
    /// Whole by its length, but its checksum does not match.
    Checksum,
}

impl BadFrame {
    fn problem(self) -> &'static str {
        match self {
            BadFrame::ShortHeader => "truncated frame header",
            BadFrame::Empty => "empty record",
            BadFrame::PastEnd => "the length field points past the end of the file",
            BadFrame::Checksum => "checksum mismatch",
        }
    }
}

/// The length and checksum fields of the frame at the start of `bytes`, if they are there.
fn frame_header(bytes: &[u8]) -> Option<(usize, u32)> {
    let header: &[u8; FRAME_HEADER] = bytes.get(..FRAME_HEADER)?.try_into().ok()?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    Some((len, crc))
}

/// The payload of the frame at the start of `bytes`, if it is whole and intact.
fn read_frame(bytes: &[u8]) -> Result<&[u8], BadFrame> {
    let (len, crc) = frame_header(bytes).ok_or(BadFrame::ShortHeader)?;
    if len == 0 {
        return Err(BadFrame::Empty);
    }
    let payload = FRAME_HEADER
        .checked_add(len)
        .and_then(|end| bytes.get(FRAME_HEADER..end))
        .ok_or(BadFrame::PastEnd)?;
    if crc32fast::hash(payload) != crc {
        return Err(BadFrame::Checksum);
    }
    Ok(payload)
}

/// Whether the bad frame at `offset` is what a power loss while appending it leaves, and if so
/// how it was torn, in words (the rules are in the module docs): cut short, or with a sector
/// piece of zeros, and no intact frame after it.
fn torn_by_crash(bytes: &[u8], offset: usize, bad: BadFrame) -> Option<String> {
    let rest = &bytes[offset..];
    let how = match (bad, frame_header(rest)) {
        (BadFrame::ShortHeader, _) | (_, None) => {
            // Fewer than 8 bytes: nothing can follow.
            return Some(format!(
                "the file ends {} bytes into the record's header",
                rest.len()
            ));
        }
        (BadFrame::Empty, Some(_)) => {
            let first = &rest[..sector_piece(offset).min(rest.len())];
            if first.iter().any(|&b| b != 0) {
                return None;
            }
            format!("the record's first {} bytes are zeros", first.len())
        }
        (BadFrame::PastEnd, Some((len, crc))) => {
            let body = &rest[FRAME_HEADER..];
            if !body.is_empty() && crc32fast::hash(body) == crc {
                // Whole, with its checksum: the length field is what is damaged.
                return None;
            }
            format!(
                "the file ends {} bytes into the record's {len}-byte body",
                body.len()
            )
        }
        (BadFrame::Checksum, Some((len, _))) => {
            let (from, to) = zero_piece(bytes, offset, offset + FRAME_HEADER + len)?;
            format!("checksum mismatch, and bytes {from}..{to} are zeros")
        }
    };
    // What follows is at most the rest of the same record.
    next_intact(bytes, offset + 1).is_none().then_some(how)
}

/// Bytes from `offset` to the next sector boundary.
fn sector_piece(offset: usize) -> usize {
    SECTOR - offset % SECTOR
}

/// The first piece of `bytes[from..to]` between sector boundaries that is all zeros.
fn zero_piece(bytes: &[u8], from: usize, to: usize) -> Option<(usize, usize)> {
    let mut at = from;
    while at < to {
        let end = (at + sector_piece(at)).min(to);
        if bytes.get(at..end)?.iter().all(|&b| b == 0) {
            return Some((at, end));
        }
        at = end;
    }
    None
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
