//! The file operations of the embedded store, behind a trait: the server uses the real
//! filesystem ([`Disk`]); the power-loss test (`crash.rs`, test builds only) records every call
//! and builds the files a power loss at any of them would leave.
//!
//! The write-ahead log makes every change through these calls and nothing else, so what the
//! test replays is exactly what the server does.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// A filesystem, as far as the write-ahead log uses one.
pub(super) trait Fs: std::fmt::Debug + Send + Sync {
    /// The whole content of a file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Creates one directory: `AlreadyExists` if it exists, `NotFound` if its parent is missing.
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// Opens an existing file to append to it (or cut it shorter).
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn LogFile>>;
    /// Creates a file, or empties an existing one, to write it.
    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>>;
    /// Renames a file within its directory, replacing `to` atomically.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Gives the file `from` a second name, `to`.
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file's name.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes a directory's entries durable (fsync of the directory): until then a created,
    /// renamed or removed name may be undone by a power loss.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Takes the exclusive lock held in the file `path` (created if missing); `Ok(None)` when
    /// another process holds it.
    fn lock(&self, path: &Path) -> io::Result<Option<DirLock>>;
}

/// An open file of the log.
pub(super) trait LogFile: std::fmt::Debug + Send + Sync {
    /// Writes all of `bytes` at the end (append) or the position (a new file).
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// fdatasync: the data and size written so far survive a power loss.
    fn sync_data(&mut self) -> io::Result<()>;
    /// fsync: as `sync_data`, with the rest of the file's metadata.
    fn sync_all(&mut self) -> io::Result<()>;
    /// Cuts (or extends) the file to `len` bytes.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

/// A held lock on a data directory, released when dropped.
#[derive(Debug)]
pub(super) struct DirLock {
    /// The locked file (`None` for a filesystem with no other process to keep out).
    _file: Option<File>,
}

impl DirLock {
    /// A lock that keeps nothing out: for a filesystem only one store uses.
    #[cfg(test)]
    pub(super) fn unshared() -> Self {
        Self { _file: None }
    }
}

/// The real filesystem.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Disk;

#[derive(Debug)]
struct DiskFile(File);

impl Fs for Disk {
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        fs::create_dir(path)
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(Box::new(DiskFile(file)))
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        Ok(Box::new(DiskFile(File::create(path)?)))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::hard_link(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn lock(&self, path: &Path) -> io::Result<Option<DirLock>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(DirLock { _file: Some(file) })),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

impl LogFile for DiskFile {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.0.sync_all()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}
