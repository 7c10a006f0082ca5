//! The embedded store alone: its write-ahead log, recovery and compaction.

use super::*;

async fn open(dir: &std::path::Path) -> EmbeddedStorage {
    EmbeddedStorage::open_with(dir, embedded_options())
        .await
        .unwrap()
}

fn log_file(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join("wal.log")
}

#[tokio::test]
async fn data_and_revisions_survive_a_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    {
        let s = open(&dir).await;
        let a = s.create("/s/a", b"a1".to_vec()).await.unwrap(); // 2
        s.create("/s/b", b"b1".to_vec()).await.unwrap(); // 3
        let a = s.update("/s/a", b"a2".to_vec(), a).await.unwrap(); // 4
        s.compact(3).await.unwrap();
        s.create("/s/c", b"c1".to_vec()).await.unwrap(); // 5
        s.delete("/s/a", a).await.unwrap(); // 6
    }
    let s = open(&dir).await;
    assert_eq!(s.current_revision().await.unwrap(), 6);
    let now = s.list("/s/", ListOptions::default()).await.unwrap();
    assert_eq!(keys(&now.items), vec!["/s/b", "/s/c"]);
    assert_eq!(
        (now.items[0].create_revision, now.items[0].mod_revision),
        (3, 3)
    );
    let at4 = s.list("/s/", at(4)).await.unwrap();
    assert_eq!(keys(&at4.items), vec!["/s/a", "/s/b"]);
    assert_eq!(text(&at4.items[0]), "a2");
    assert!(matches!(
        s.list("/s/", at(2)).await,
        Err(StorageError::Compacted {
            requested: 2,
            compacted: 3
        })
    ));
    assert!(matches!(
        s.compact(3).await,
        Err(StorageError::Compacted { .. })
    ));
    let mut stream = s.watch("/s/", 3).await.unwrap();
    let replayed = next_events(&mut stream, 3).await;
    assert_eq!(
        replayed
            .iter()
            .map(|e| e.kv.mod_revision)
            .collect::<Vec<_>>(),
        vec![4, 5, 6]
    );
    assert_eq!(text(replayed[2].prev.as_ref().unwrap()), "a2");
    assert_eq!(s.create("/s/d", b"d1".to_vec()).await.unwrap(), 7);
    drop(stream);
    drop(s);

    // And once more, after a compaction that rewrote the log and a write on top of it.
    let s = open(&dir).await;
    s.compact(7).await.unwrap();
    s.create("/s/e", b"e1".to_vec()).await.unwrap(); // 8
    drop(s);
    let s = open(&dir).await;
    assert_eq!(s.current_revision().await.unwrap(), 8);
    let now = s.list("/s/", ListOptions::default()).await.unwrap();
    assert_eq!(keys(&now.items), vec!["/s/b", "/s/c", "/s/d", "/s/e"]);
    assert!(matches!(
        s.list("/s/", at(6)).await,
        Err(StorageError::Compacted { compacted: 7, .. })
    ));
}

#[tokio::test]
async fn a_data_directory_is_used_by_one_store_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let first = open(&dir).await;
    first.create("/l/a", b"1".to_vec()).await.unwrap();
    match EmbeddedStorage::open(&dir).await {
        Err(StorageError::Unavailable { message, .. }) => assert!(message.contains("in use")),
        Err(other) => panic!("expected Unavailable, got {other:?}"),
        Ok(_) => panic!("opened a data directory twice"),
    }
    drop(first);
    let second = open(&dir).await;
    assert_eq!(second.current_revision().await.unwrap(), 2);
}

#[tokio::test]
async fn a_torn_last_record_is_cut_off_and_the_store_opens() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    {
        let s = open(&dir).await;
        s.create("/t/a", b"a".to_vec()).await.unwrap(); // 2
        s.create("/t/b", b"b".to_vec()).await.unwrap(); // 3
    }
    // A crash in the middle of appending revision 3: its record is half written.
    let path = log_file(&dir);
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 5)
        .unwrap();
    let s = open(&dir).await;
    assert_eq!(s.current_revision().await.unwrap(), 2);
    assert_eq!(s.get("/t/b").await.unwrap(), None);
    assert_eq!(text(&s.get("/t/a").await.unwrap().unwrap()), "a");
    // Writing goes on after the cut, and the result reads back whole.
    assert_eq!(s.create("/t/c", b"c".to_vec()).await.unwrap(), 3);
    drop(s);

    // A file extended with zeros before its data reached the disk looks the same.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut file, &[0u8; 100]).unwrap();
    drop(file);
    let s = open(&dir).await;
    assert_eq!(s.current_revision().await.unwrap(), 3);
    let all = s.list("/t/", ListOptions::default()).await.unwrap();
    assert_eq!(keys(&all.items), vec!["/t/a", "/t/c"]);
}

/// A store holding `/t/k0`..`/t/k9` (`/t/k<i>` at revision i + 2), closed; its log's bytes and the
/// byte offset where each frame starts (the header's first).
async fn ten_records(dir: &std::path::Path) -> (Vec<u8>, Vec<usize>) {
    {
        let s = open(dir).await;
        for i in 0..10 {
            s.create(&format!("/t/k{i}"), format!("value-{i}").into_bytes())
                .await
                .unwrap();
        }
    }
    let bytes = std::fs::read(log_file(dir)).unwrap();
    let mut starts = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        starts.push(at);
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += 8 + len;
    }
    assert_eq!(starts.len(), 11, "a header and ten transactions");
    (bytes, starts)
}

/// Opening fails with Corrupt naming the log file and the byte offset; nothing is changed.
async fn assert_refused_at(dir: &std::path::Path, offset: usize) {
    let before = std::fs::read(log_file(dir)).unwrap();
    match EmbeddedStorage::open(dir).await {
        Err(StorageError::Corrupt(message)) => {
            assert!(
                message.contains(&format!(
                    "{} is damaged at byte {offset} ",
                    log_file(dir).display()
                )),
                "{message}"
            );
            assert!(message.contains("store recover --data-dir"), "{message}");
        }
        Err(other) => panic!("expected Corrupt, got {other:?}"),
        Ok(_) => panic!("a damaged log opened"),
    }
    assert_eq!(
        std::fs::read(log_file(dir)).unwrap(),
        before,
        "the open changed the log"
    );
}

/// Keys under `/t/` and the store revision.
async fn contents(dir: &std::path::Path) -> (Vec<String>, Revision) {
    let s = open(dir).await;
    let all = s.list("/t/", ListOptions::default()).await.unwrap();
    (
        all.items.iter().map(|kv| kv.key.clone()).collect(),
        s.current_revision().await.unwrap(),
    )
}

fn names(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("/t/k{i}")).collect()
}

#[tokio::test]
async fn a_bad_length_field_mid_log_refuses_with_its_offset_and_recover_keeps_the_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let (mut bytes, starts) = ten_records(&dir).await;
    // The 5th transaction's length points past the end of the file: once taken for a
    // torn tail, which silently dropped it and the five committed records after it.
    bytes[starts[5]..starts[5] + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(log_file(&dir), &bytes).unwrap();
    assert_refused_at(&dir, starts[5]).await;

    let verification = embedded::verify(&dir).unwrap();
    let damage = verification.damage.clone().expect("damage");
    assert_eq!((damage.offset, damage.torn), (starts[5] as u64, false));
    assert_eq!(damage.intact_after, 5);
    assert_eq!(damage.revisions_after, Some((7, 11)));
    assert_eq!(verification.revision, Some(5));

    let recovery = embedded::recover(&dir).unwrap();
    assert_eq!(recovery.revision, 5);
    assert_eq!(recovery.kept_records, 5);
    let copy = recovery
        .damaged_copy
        .clone()
        .expect("the damaged log is kept");
    assert_eq!(std::fs::read(&copy).unwrap(), bytes);
    let text = recovery.to_string();
    assert!(
        text.contains("LOST: the damaged record and the 5 intact records after it"),
        "{text}"
    );
    assert_eq!(contents(&dir).await, (names(0..4), 5));
}

#[tokio::test]
async fn a_damaged_header_refuses_at_byte_zero_and_recover_rebuilds_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let (mut bytes, starts) = ten_records(&dir).await;
    // Inside the header's payload (its revisions).
    bytes[starts[0] + 8 + 14] ^= 0x55;
    std::fs::write(log_file(&dir), &bytes).unwrap();
    assert_refused_at(&dir, 0).await;
    let recovery = embedded::recover(&dir).unwrap();
    assert!(recovery.header_rebuilt);
    assert_eq!(recovery.revision, 11);
    assert_eq!(contents(&dir).await, (names(0..10), 11));
    // The rebuilt header says revision 1 (the one before the first transaction), so the
    // history of every transaction is still there.
    let s = open(&dir).await;
    let at5 = s.list("/t/", at(5)).await.unwrap();
    assert_eq!(keys(&at5.items), names(0..4));
}

#[tokio::test]
async fn a_bad_checksum_refuses_mid_log_and_on_the_last_record_too() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let (bytes, starts) = ten_records(&dir).await;
    let mut middle = bytes.clone();
    middle[starts[3] + 4] ^= 0x01;
    std::fs::write(log_file(&dir), &middle).unwrap();
    assert_refused_at(&dir, starts[3]).await;
    let recovery = embedded::recover(&dir).unwrap();
    assert_eq!(recovery.damage.as_ref().map(|d| d.intact_after), Some(7));
    assert_eq!(contents(&dir).await, (names(0..2), 3));

    // The same damage on the last record: it was fsynced before its write was acknowledged,
    // so a flipped bit in it is no torn write — once cut off silently, now refused.
    let mut last = bytes.clone();
    last[starts[10] + 4] ^= 0x01;
    std::fs::write(log_file(&dir), &last).unwrap();
    assert_refused_at(&dir, starts[10]).await;
    let Err(StorageError::Corrupt(message)) = EmbeddedStorage::open(&dir).await else {
        panic!("a damaged last record opened");
    };
    assert!(
        message.contains(
            "would keep the 10 records before it (revision 10) and lose the damaged record and \
             the 0 intact records after it"
        ),
        "{message}"
    );
    let verification = embedded::verify(&dir).unwrap();
    let damage = verification.damage.clone().expect("damage");
    assert_eq!((damage.offset, damage.torn), (starts[10] as u64, false));
    assert_eq!(damage.problem, "checksum mismatch");
    // `store recover` is the explicit way past it: the record is lost, and said so.
    let recovery = embedded::recover(&dir).unwrap();
    let text = recovery.to_string();
    assert!(
        text.contains("kept 10 records before the damage")
            && text.contains("LOST: the damaged record and the 0 intact records after it"),
        "{text}"
    );
    assert_eq!(
        std::fs::read(recovery.damaged_copy.as_ref().expect("a copy")).unwrap(),
        last
    );
    assert_eq!(contents(&dir).await, (names(0..9), 10));
}

#[tokio::test]
async fn a_last_record_with_a_sector_never_written_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    {
        let s = open(&dir).await;
        s.create("/t/a", b"a".to_vec()).await.unwrap(); // 2
        // Long enough to span sectors whatever its offset.
        s.create("/t/b", vec![b'b'; 1500]).await.unwrap(); // 3
    }
    // A crash while appending revision 3: the file reached its full length, but one of the
    // record's sectors never reached the disk and reads as zeros.
    let path = log_file(&dir);
    let mut bytes = std::fs::read(&path).unwrap();
    let sector = bytes.len() / 512 * 512 - 512;
    bytes[sector..sector + 512].fill(0);
    std::fs::write(&path, &bytes).unwrap();
    let verification = embedded::verify(&dir).unwrap();
    let damage = verification.damage.clone().expect("damage");
    assert!(
        damage.torn && damage.problem.contains("zeros"),
        "{damage:?}"
    );
    let s = open(&dir).await;
    assert_eq!(s.current_revision().await.unwrap(), 2);
    assert_eq!(s.get("/t/b").await.unwrap(), None);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        damage.offset,
        "cut where the record started"
    );
}

#[tokio::test]
async fn an_empty_log_is_refused_never_taken_for_a_new_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    ten_records(&dir).await;
    std::fs::write(log_file(&dir), b"").unwrap();
    assert_refused_at(&dir, 0).await;
    assert!(matches!(
        embedded::recover(&dir),
        Err(StorageError::Corrupt(message)) if message.contains("nothing to keep")
    ));
    assert_eq!(std::fs::metadata(log_file(&dir)).unwrap().len(), 0);
}

#[tokio::test]
async fn store_verify_and_recover_on_the_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let (mut bytes, starts) = ten_records(&dir).await;
    let run = |command: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_svm-apiserver"))
            .args(["store", command, "--data-dir"])
            .arg(&dir)
            .output()
            .expect("run svm-apiserver store");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (code, text) = run("verify");
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("11 readable records") && text.contains("intact"),
        "{text}"
    );
    bytes[starts[8] + 10] ^= 0xff;
    std::fs::write(log_file(&dir), &bytes).unwrap();
    let (code, text) = run("verify");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!("DAMAGED at byte {}", starts[8]))
            && text.contains("the damaged record and the 2 intact records after it"),
        "{text}"
    );
    let (code, text) = run("recover");
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("kept 8 records")
            && text.contains("LOST: the damaged record and the 2 intact"),
        "{text}"
    );
    let (code, text) = run("verify");
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(contents(&dir).await, (names(0..7), 8));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_get_distinct_increasing_revisions() {
    const WRITERS: usize = 8;
    const EACH: usize = 40;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let s = Arc::new(open(&dir).await);
    let mut watch = s.watch("/cw/", 1).await.unwrap();
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let s = s.clone();
            tokio::spawn(async move {
                let mut revisions = Vec::new();
                for i in 0..EACH {
                    let key = format!("/cw/{w}/{i:03}");
                    revisions.push((key.clone(), s.create(&key, vec![w as u8]).await.unwrap()));
                }
                revisions
            })
        })
        .collect();
    let mut written = Vec::new();
    for task in tasks {
        let revisions = task.await.unwrap();
        // Each writer's own writes are strictly increasing.
        assert!(revisions.windows(2).all(|p| p[0].1 < p[1].1));
        written.extend(revisions);
    }
    let mut revisions: Vec<Revision> = written.iter().map(|(_, r)| *r).collect();
    revisions.sort_unstable();
    let expected: Vec<Revision> = (2..2 + (WRITERS * EACH) as Revision).collect();
    assert_eq!(revisions, expected, "distinct and gap-free");

    let all = s.list("/cw/", ListOptions::default()).await.unwrap();
    assert_eq!(all.items.len(), WRITERS * EACH);
    for (key, revision) in &written {
        let kv = all.items.iter().find(|kv| &kv.key == key).unwrap();
        assert_eq!(kv.mod_revision, *revision);
    }
    // The watch saw every write once, in revision order.
    let events = next_events(&mut watch, WRITERS * EACH).await;
    let watched: Vec<Revision> = events.iter().map(|e| e.kv.mod_revision).collect();
    assert_eq!(watched, expected);
    drop(watch);
    drop(all);

    drop(s);
    let reopened = open(&dir).await;
    assert_eq!(
        reopened.current_revision().await.unwrap(),
        1 + (WRITERS * EACH) as Revision
    );
    let all = reopened.list("/cw/", ListOptions::default()).await.unwrap();
    assert_eq!(all.items.len(), WRITERS * EACH);
}

#[tokio::test]
async fn a_watcher_too_far_behind_is_ended_with_an_error() {
    let s = EmbeddedStorage::in_memory_with(EmbeddedOptions {
        watch_buffer: 4,
        ..embedded_options()
    });
    let mut stream = s.watch("/lag/", 1).await.unwrap();
    for i in 0..10 {
        s.create(&format!("/lag/{i}"), vec![]).await.unwrap();
    }
    // The writers never waited; the watcher that did not read is told it lost its place.
    match next_item(&mut stream).await {
        Err(StorageError::Unavailable { message, .. }) => assert!(message.contains("fell behind")),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(stream.next().await.is_none());
    // Watching again from history catches up.
    let events = next_events(&mut s.watch("/lag/", 1).await.unwrap(), 10).await;
    assert_eq!(events.last().unwrap().kv.mod_revision, 11);
}

#[tokio::test]
async fn dropping_the_store_ends_its_watches() {
    // Dropping the store ends its watches instead of leaving them hanging.
    let s = EmbeddedStorage::in_memory_with(embedded_options());
    let mut stream = s.watch("/", 1).await.unwrap();
    drop(s);
    loop {
        match tokio::time::timeout(HANG_GUARD, stream.next())
            .await
            .expect("hung")
        {
            None => break,
            Some(Ok(WatchItem::Progress(_))) => {}
            Some(other) => panic!("unexpected {other:?}"),
        }
    }
}
