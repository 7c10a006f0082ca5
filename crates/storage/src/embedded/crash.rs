//! A filesystem in memory that records every call the write-ahead log makes, and builds, for
//! any point in that record, the files a power loss there could leave (test builds only).
//!
//! The model of a power loss, for each file and directory on its own:
//! - a file keeps everything up to its last fsync (`sync_data` or `sync_all`); of what was
//!   written after it, any byte prefix survives (the file ends anywhere in it), or all of it
//!   with any set of its 512-byte sectors (at file offsets that are multiples of 512) reading
//!   as zeros, never written. A change that is not an append (a file cut shorter) may also be
//!   lost whole. Sectors are written whole or not at all, so the fsynced bytes that share a
//!   sector with new ones stay as they were;
//! - a directory keeps every entry as of its last fsync; of the names created, renamed,
//!   linked and removed in it after that, any prefix survives, in order;
//! - a file's data and its name are independent: a name that survives points at whatever
//!   survives of the file's data.
//!
//! Where the combinations are few they are all built; where they are many (a long unsynced
//! tail: a snapshot being written, several directories pending at once), a sample of them is,
//! drawn from the caller's seeded generator, always with "nothing survives" and "everything
//! survives" among them.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io;
use std::path::{Component, Path};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::Rng;
use rand::rngs::StdRng;

use super::fs::{DirLock, Fs, LogFile};

/// The sector size of the model: the unit a disk writes whole or not at all.
const SECTOR: usize = 512;
/// Every byte prefix of an unsynced tail up to this long is built; of a longer one, a sample.
const EVERY_PREFIX_UP_TO: usize = 1024;
/// Every set of zeroed sectors is built for a tail touching this many sectors or fewer.
const EVERY_SUBSET_UP_TO: usize = 6;

/// An inode number: an index into [`Model::inodes`]; 0 is the root directory.
type Ino = usize;

/// One call that changed something, in the order it was made: a crash point follows each.
#[derive(Clone, Debug)]
pub(super) enum Event {
    /// `create_dir`.
    CreateDir { dir: Ino, name: String },
    /// `create` of a new file (creating an existing one is a [`Event::SetLen`] to 0).
    CreateFile { dir: Ino, name: String },
    /// `write_all`: appended at the end of the file.
    Write { file: Ino, bytes: Vec<u8> },
    /// `set_len`.
    SetLen { file: Ino, len: usize },
    /// `sync_data` or `sync_all` of a file.
    SyncFile { file: Ino },
    /// `rename` within one directory.
    Rename { dir: Ino, from: String, to: String },
    /// `hard_link` within one directory.
    Link { dir: Ino, name: String, file: Ino },
    /// `remove_file`.
    Remove { dir: Ino, name: String },
    /// `sync_dir`.
    SyncDir { dir: Ino },
}

impl Event {
    /// Whether this is a write of file data.
    pub(super) fn is_write(&self) -> bool {
        matches!(self, Event::Write { .. })
    }

    /// Whether this is an fsync, of a file or a directory.
    pub(super) fn is_sync(&self) -> bool {
        matches!(self, Event::SyncFile { .. } | Event::SyncDir { .. })
    }
}

#[derive(Clone, Debug)]
enum DirOp {
    Add(String, Ino),
    Remove(String),
    Rename(String, String),
}

impl DirOp {
    fn apply(&self, entries: &mut BTreeMap<String, Ino>) {
        match self {
            DirOp::Add(name, ino) => {
                entries.insert(name.clone(), *ino);
            }
            DirOp::Remove(name) => {
                entries.remove(name);
            }
            DirOp::Rename(from, to) => {
                if let Some(ino) = entries.remove(from) {
                    entries.insert(to.clone(), ino);
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Inode {
    File {
        /// What a read sees now.
        data: Vec<u8>,
        /// What survives a power loss for certain (as of the last fsync).
        synced: Vec<u8>,
    },
    Dir {
        /// What a lookup sees now: `synced` with every pending operation applied.
        entries: BTreeMap<String, Ino>,
        synced: BTreeMap<String, Ino>,
        /// Name operations since the last fsync of the directory, in order.
        pending: Vec<DirOp>,
    },
}

/// The state of a filesystem: what is seen now, and what is durable.
#[derive(Clone, Debug)]
pub(super) struct Model {
    inodes: Vec<Inode>,
}

impl Default for Model {
    fn default() -> Self {
        Self {
            inodes: vec![Inode::Dir {
                entries: BTreeMap::new(),
                synced: BTreeMap::new(),
                pending: Vec::new(),
            }],
        }
    }
}

/// One way a power loss can leave one file or directory.
enum Choice {
    File(Ino, Vec<Vec<u8>>),
    Dir(Ino, usize),
}

impl Choice {
    fn count(&self) -> usize {
        match self {
            Choice::File(_, variants) => variants.len(),
            Choice::Dir(_, pending) => pending + 1,
        }
    }
}

impl Model {
    /// Applies one recorded call.
    pub(super) fn apply(&mut self, event: &Event) {
        match event {
            Event::CreateDir { dir, name } => {
                let ino = self.add(Inode::Dir {
                    entries: BTreeMap::new(),
                    synced: BTreeMap::new(),
                    pending: Vec::new(),
                });
                self.dir_op(*dir, DirOp::Add(name.clone(), ino));
            }
            Event::CreateFile { dir, name } => {
                let ino = self.add(Inode::File {
                    data: Vec::new(),
                    synced: Vec::new(),
                });
                self.dir_op(*dir, DirOp::Add(name.clone(), ino));
            }
            Event::Write { file, bytes } => {
                if let Inode::File { data, .. } = &mut self.inodes[*file] {
                    data.extend_from_slice(bytes);
                }
            }
            Event::SetLen { file, len } => {
                if let Inode::File { data, .. } = &mut self.inodes[*file] {
                    data.resize(*len, 0);
                }
            }
            Event::SyncFile { file } => {
                if let Inode::File { data, synced } = &mut self.inodes[*file] {
                    synced.clone_from(data);
                }
            }
            Event::Rename { dir, from, to } => {
                self.dir_op(*dir, DirOp::Rename(from.clone(), to.clone()));
            }
            Event::Link { dir, name, file } => self.dir_op(*dir, DirOp::Add(name.clone(), *file)),
            Event::Remove { dir, name } => self.dir_op(*dir, DirOp::Remove(name.clone())),
            Event::SyncDir { dir } => {
                if let Inode::Dir {
                    entries,
                    synced,
                    pending,
                } = &mut self.inodes[*dir]
                {
                    synced.clone_from(entries);
                    pending.clear();
                }
            }
        }
    }

    fn add(&mut self, inode: Inode) -> Ino {
        self.inodes.push(inode);
        self.inodes.len() - 1
    }

    fn dir_op(&mut self, dir: Ino, op: DirOp) {
        if let Inode::Dir {
            entries, pending, ..
        } = &mut self.inodes[dir]
        {
            op.apply(entries);
            pending.push(op);
        }
    }

    /// The state after a power loss with nothing unsynced surviving.
    pub(super) fn durable(&self) -> Model {
        self.image(&[], &[])
    }

    /// The states a power loss now could leave (see the module docs), at most `budget` of them
    /// (at least 2), sampled with `rng` when there are more.
    pub(super) fn crash_images(&self, budget: usize, rng: &mut StdRng) -> Vec<Model> {
        let mut choices = Vec::new();
        for (ino, inode) in self.inodes.iter().enumerate() {
            match inode {
                Inode::File { data, synced } if data != synced => {
                    choices.push(Choice::File(ino, file_variants(synced, data, rng)));
                }
                Inode::Dir { pending, .. } if !pending.is_empty() => {
                    choices.push(Choice::Dir(ino, pending.len()));
                }
                _ => {}
            }
        }
        let counts: Vec<usize> = choices.iter().map(Choice::count).collect();
        let total = counts
            .iter()
            .try_fold(1usize, |total, &n| total.checked_mul(n))
            .unwrap_or(usize::MAX);
        let picks: Vec<Vec<usize>> = if total <= budget.max(2) {
            (0..total)
                .map(|mut index| {
                    counts
                        .iter()
                        .map(|&n| {
                            let pick = index % n;
                            index /= n;
                            pick
                        })
                        .collect()
                })
                .collect()
        } else {
            // Nothing survives, everything survives, and a sample in between. (A file's
            // variant 0 is what was synced or the shortest prefix; its last, the whole.)
            let mut picks = vec![
                vec![0; counts.len()],
                counts.iter().map(|&n| n - 1).collect(),
            ];
            let mut seen: HashSet<Vec<usize>> = picks.iter().cloned().collect();
            for _ in 0..budget * 4 {
                if picks.len() >= budget {
                    break;
                }
                let pick: Vec<usize> = counts.iter().map(|&n| rng.random_range(0..n)).collect();
                if seen.insert(pick.clone()) {
                    picks.push(pick);
                }
            }
            picks
        };
        picks
            .iter()
            .map(|pick| {
                let mut files = Vec::new();
                let mut dirs = Vec::new();
                for (choice, &index) in choices.iter().zip(pick) {
                    match choice {
                        Choice::File(ino, variants) => files.push((*ino, &variants[index][..])),
                        Choice::Dir(ino, _) => dirs.push((*ino, index)),
                    }
                }
                self.image(&files, &dirs)
            })
            .collect()
    }

    /// The state after a power loss in which these files hold these bytes and these directories
    /// kept this many of their pending operations; everything else as of its last fsync.
    fn image(&self, files: &[(Ino, &[u8])], dirs: &[(Ino, usize)]) -> Model {
        let inodes = self
            .inodes
            .iter()
            .enumerate()
            .map(|(ino, inode)| match inode {
                Inode::File { synced, .. } => {
                    let kept = files
                        .iter()
                        .find(|(f, _)| *f == ino)
                        .map_or(&synced[..], |(_, bytes)| bytes);
                    Inode::File {
                        data: kept.to_vec(),
                        synced: kept.to_vec(),
                    }
                }
                Inode::Dir {
                    synced, pending, ..
                } => {
                    let kept = dirs.iter().find(|(d, _)| *d == ino).map_or(0, |(_, n)| *n);
                    let mut entries = synced.clone();
                    for op in &pending[..kept] {
                        op.apply(&mut entries);
                    }
                    Inode::Dir {
                        synced: entries.clone(),
                        entries,
                        pending: Vec::new(),
                    }
                }
            })
            .collect();
        Model { inodes }.without_unreachable()
    }

    /// Empties the files no name leads to (old logs replaced by a compaction): nothing can
    /// read them, and copying them into every image costs.
    fn without_unreachable(mut self) -> Model {
        let mut reachable = vec![false; self.inodes.len()];
        let mut stack = vec![0];
        while let Some(ino) = stack.pop() {
            if std::mem::replace(&mut reachable[ino], true) {
                continue;
            }
            if let Inode::Dir { entries, .. } = &self.inodes[ino] {
                stack.extend(entries.values().copied());
            }
        }
        for (inode, reachable) in self.inodes.iter_mut().zip(reachable) {
            if let (Inode::File { data, synced }, false) = (inode, reachable) {
                *data = Vec::new();
                *synced = Vec::new();
            }
        }
        self
    }

    /// The inode at `path` (absolute), if there is one.
    fn lookup(&self, path: &Path) -> Option<Ino> {
        let mut at = 0;
        for component in path.components() {
            match component {
                Component::RootDir => at = 0,
                Component::Normal(name) => {
                    let Inode::Dir { entries, .. } = &self.inodes[at] else {
                        return None;
                    };
                    at = *entries.get(name.to_str()?)?;
                }
                _ => return None,
            }
        }
        Some(at)
    }

    /// The directory `path` is in, and its name there.
    fn parent(&self, path: &Path) -> io::Result<(Ino, String)> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
        let dir = path
            .parent()
            .and_then(|p| self.lookup(p))
            .filter(|&d| matches!(self.inodes[d], Inode::Dir { .. }))
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok((dir, name.to_string()))
    }

    fn file(&self, path: &Path) -> io::Result<Ino> {
        match self.lookup(path) {
            Some(ino) if matches!(self.inodes[ino], Inode::File { .. }) => Ok(ino),
            Some(_) => Err(io::Error::other("a directory")),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }

    fn len(&self, file: Ino) -> usize {
        match &self.inodes[file] {
            Inode::File { data, .. } => data.len(),
            Inode::Dir { .. } => 0,
        }
    }
}

/// What a power loss could leave of a file that holds `data` and, as of its last fsync,
/// `synced` (see the module docs); the first is the least, the last is all of `data`.
fn file_variants(synced: &[u8], data: &[u8], rng: &mut StdRng) -> Vec<Vec<u8>> {
    let common = synced.iter().zip(data).take_while(|(a, b)| a == b).count();
    let tail = &data[common..];
    let mut out: Vec<Vec<u8>> = Vec::new();
    if synced.len() > common {
        // A cut (or overwrite) none of which reached the disk.
        out.push(synced.to_vec());
    }
    let with = |len: usize, zeroed: &[(usize, usize)]| {
        let mut image = data[..common + len].to_vec();
        for &(from, to) in zeroed {
            let to = to.min(image.len());
            if from < to {
                image[from..to].fill(0);
            }
        }
        image
    };
    // The file ends anywhere in the tail.
    let cuts: BTreeSet<usize> = if tail.len() <= EVERY_PREFIX_UP_TO {
        (0..=tail.len()).collect()
    } else {
        let mut cuts: BTreeSet<usize> = [0, tail.len()].into();
        cuts.extend((0..tail.len()).filter(|&at| (common + at) % SECTOR == 0));
        cuts.extend((0..64).map(|_| rng.random_range(0..=tail.len())));
        cuts
    };
    out.extend(cuts.iter().map(|&len| with(len, &[])));
    // All of it, with sectors never written.
    let mut pieces = Vec::new();
    let mut at = common;
    while at < data.len() {
        let end = (at - at % SECTOR + SECTOR).min(data.len());
        pieces.push((at, end));
        at = end;
    }
    let subsets: Vec<u64> = if pieces.len() <= EVERY_SUBSET_UP_TO {
        (1..1u64 << pieces.len()).collect()
    } else {
        let mut subsets: Vec<u64> = (0..pieces.len().min(63)).map(|i| 1 << i).collect();
        subsets.push(u64::MAX);
        subsets.extend((0..32).map(|_| rng.random::<u64>()));
        subsets
    };
    let chosen = |subset: u64| -> Vec<(usize, usize)> {
        pieces
            .iter()
            .enumerate()
            .filter(|(i, _)| *i < 64 && subset & (1 << i) != 0)
            .map(|(_, piece)| *piece)
            .collect()
    };
    out.extend(subsets.iter().map(|&s| with(tail.len(), &chosen(s))));
    // And both at once, sampled.
    for _ in 0..16 {
        let len = rng.random_range(0..=tail.len());
        out.push(with(len, &chosen(rng.random::<u64>())));
    }
    // Distinct, with the whole tail last.
    let whole = data.to_vec();
    let mut seen = HashSet::new();
    let mut distinct: Vec<Vec<u8>> = out
        .into_iter()
        .filter(|v| *v != whole && seen.insert(v.clone()))
        .collect();
    distinct.push(whole);
    distinct
}

/// A filesystem in memory that records every call that changes it (see the module docs).
/// Clones share one filesystem.
#[derive(Clone, Debug, Default)]
pub(super) struct Recorder {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    model: Model,
    events: Vec<Event>,
}

impl Recorder {
    /// A filesystem that starts as `model`, with nothing recorded yet.
    pub(super) fn from_model(model: Model) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                model,
                events: Vec::new(),
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere in a test already failed it; the state is still readable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many calls have been recorded.
    pub(super) fn recorded(&self) -> usize {
        self.state().events.len()
    }

    /// The calls recorded, in order.
    pub(super) fn events(&self) -> Vec<Event> {
        self.state().events.clone()
    }

    /// The state now.
    pub(super) fn model(&self) -> Model {
        self.state().model.clone()
    }

    /// Applies and records one call; the newest inode after it.
    fn record(&self, event: Event) -> Ino {
        let mut state = self.state();
        state.model.apply(&event);
        state.events.push(event);
        state.model.inodes.len() - 1
    }
}

/// An open file of a [`Recorder`].
#[derive(Debug)]
struct RecordedFile {
    fs: Recorder,
    ino: Ino,
    /// The write position of a file opened by `create` (`None`: appending).
    position: Option<usize>,
}

impl Fs for Recorder {
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let state = self.state();
        let ino = state.model.file(path)?;
        match &state.model.inodes[ino] {
            Inode::File { data, .. } => Ok(data.clone()),
            Inode::Dir { .. } => Err(io::Error::other("a directory")),
        }
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        if self.state().model.lookup(path).is_some() {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        let (dir, name) = self.state().model.parent(path)?;
        self.record(Event::CreateDir { dir, name });
        Ok(())
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let ino = self.state().model.file(path)?;
        Ok(Box::new(RecordedFile {
            fs: self.clone(),
            ino,
            position: None,
        }))
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let existing = self.state().model.file(path);
        let ino = match existing {
            Ok(file) => {
                self.record(Event::SetLen { file, len: 0 });
                file
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let (dir, name) = self.state().model.parent(path)?;
                self.record(Event::CreateFile { dir, name })
            }
            Err(e) => return Err(e),
        };
        Ok(Box::new(RecordedFile {
            fs: self.clone(),
            ino,
            position: Some(0),
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.state().model.file(from)?;
        let (dir, from) = self.state().model.parent(from)?;
        let (to_dir, to) = self.state().model.parent(to)?;
        assert_eq!(dir, to_dir, "the model renames within one directory only");
        self.record(Event::Rename { dir, from, to });
        Ok(())
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        let file = self.state().model.file(from)?;
        let (dir, name) = self.state().model.parent(to)?;
        if self.state().model.lookup(to).is_some() {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        self.record(Event::Link { dir, name, file });
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.state().model.file(path)?;
        let (dir, name) = self.state().model.parent(path)?;
        self.record(Event::Remove { dir, name });
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let dir = self
            .state()
            .model
            .lookup(path)
            .ok_or(io::ErrorKind::NotFound)?;
        self.record(Event::SyncDir { dir });
        Ok(())
    }

    fn lock(&self, path: &Path) -> io::Result<Option<DirLock>> {
        if self.state().model.lookup(path).is_none() {
            let (dir, name) = self.state().model.parent(path)?;
            self.record(Event::CreateFile { dir, name });
        }
        Ok(Some(DirLock::unshared()))
    }
}

impl LogFile for RecordedFile {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        if let Some(position) = &mut self.position {
            assert_eq!(
                *position,
                self.fs.state().model.len(self.ino),
                "the model writes at the end of a file only"
            );
            *position += bytes.len();
        }
        self.fs.record(Event::Write {
            file: self.ino,
            bytes: bytes.to_vec(),
        });
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.fs.record(Event::SyncFile { file: self.ino });
        Ok(())
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.fs.record(Event::SyncFile { file: self.ino });
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(io::Error::other)?;
        self.fs.record(Event::SetLen {
            file: self.ino,
            len,
        });
        Ok(())
    }
}
