//! etcd as production runs it: three members, the client given every member's URL. One
//! member is killed at a time — a follower the client holds a connection to, then the raft
//! leader — with writes, reads and a watch going on; a killed member is restarted before the
//! next kill (two down would be no quorum).

use std::collections::BTreeMap;
use std::time::Instant;

use support::etcd::EtcdCluster;

use super::*;

/// Writes (and reads) made with each member down.
const REQUESTS: usize = 50;

#[tokio::test]
async fn a_member_down_costs_no_request_and_a_watch_resumed_loses_no_event() {
    let mut cluster = EtcdCluster::start();
    eprintln!("{}: members {:?}", cluster.version(), cluster.endpoints());
    let options = EtcdOptions {
        dial_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(10),
        ..etcd_options()
    };
    let s = Arc::new(
        EtcdStorage::connect(&cluster.endpoints(), options)
            .await
            .unwrap(),
    );
    let start = s.current_revision().await.unwrap();
    for i in 0..REQUESTS {
        s.create(&format!("/m/before/{i:03}"), b"1".to_vec())
            .await
            .unwrap();
    }
    // A watch from the start, resumed after the last revision it saw whenever it ends (as the
    // registry's watchers resume), keeps every event it sees by revision.
    let seen: Arc<std::sync::Mutex<BTreeMap<Revision, String>>> = Arc::default();
    let resumes = Arc::new(AtomicCounter::default());
    let watcher = tokio::spawn(follow(s.clone(), start, seen.clone(), resumes.clone()));

    let me = std::process::id();
    let mut figures = Vec::new();
    for role in [Role::Follower, Role::Leader] {
        let leader = cluster.wait_leader();
        let connected = cluster.connected(me);
        let victim = match role {
            Role::Leader => leader,
            Role::Follower => *connected
                .iter()
                .find(|m| **m != leader)
                .expect("a connection to a follower"),
        };
        assert!(connected.contains(&victim), "{connected:?}");
        let name = cluster.members()[victim].name().to_string();
        cluster.kill(victim);
        let killed = Instant::now();
        // The cluster answers again (a leader kill costs an election); what failed meanwhile
        // failed as unavailable, never as anything that could be mistaken for an answer.
        let mut failed = Vec::new();
        let recovered = loop {
            let key = format!("/m/{name}-down/first-{}", failed.len());
            match s.create(&key, b"1".to_vec()).await {
                Ok(_) => break killed.elapsed(),
                Err(StorageError::Unavailable { .. }) if failed.len() < 20 => failed.push(key),
                Err(other) => panic!("with {name} ({role:?}) down: {other:?}"),
            }
        };
        // Then every request succeeds, though the client still sends some to the dead member.
        for i in 0..REQUESTS {
            let key = format!("/m/{name}-down/{i:03}");
            s.create(&key, b"1".to_vec())
                .await
                .unwrap_or_else(|e| panic!("write {i} with {name} ({role:?}) down: {e:?}"));
            let read = s
                .get(&key)
                .await
                .unwrap_or_else(|e| panic!("read {i} with {name} ({role:?}) down: {e:?}"));
            assert!(read.is_some());
        }
        let listed = s
            .list(&format!("/m/{name}-down/"), ListOptions::default())
            .await
            .unwrap();
        assert!(listed.items.len() > REQUESTS);
        figures.push(format!(
            "{name} ({role:?}) killed: {} request(s) failed unavailable before the first success \
             {recovered:?} after the kill, then {REQUESTS} writes and {REQUESTS} reads all \
             answered",
            failed.len()
        ));
        cluster.restart(victim);
    }

    // Every committed change reached the watch once, in order, across its resumes.
    let end = s.current_revision().await.unwrap();
    let all = s.list("/m/", ListOptions::default()).await.unwrap().items;
    crate::support::wait::eventually_async(HANG_GUARD, "the watch at the end", async || {
        let last = seen.lock().unwrap().keys().last().copied().unwrap_or(0);
        if last >= end {
            Ok(())
        } else {
            Err(format!("at {last} of {end}"))
        }
    })
    .await;
    watcher.abort();
    let seen = seen.lock().unwrap().clone();
    let twice: Vec<&String> = seen.range(..0).map(|(_, key)| key).collect();
    assert!(twice.is_empty(), "seen twice: {twice:?}");
    let by_key: BTreeMap<&str, Revision> = all
        .iter()
        .map(|kv| (kv.key.as_str(), kv.mod_revision))
        .collect();
    let watched: BTreeMap<&str, Revision> = seen
        .iter()
        .map(|(revision, key)| (key.as_str(), *revision))
        .collect();
    assert_eq!(watched, by_key, "the watch saw exactly what etcd holds");
    for figure in &figures {
        eprintln!("{figure}");
    }
    eprintln!(
        "{} keys written, every one seen by a watch resumed {} time(s)",
        all.len(),
        resumes.get()
    );
}

#[derive(Clone, Copy, Debug)]
enum Role {
    Follower,
    Leader,
}

#[derive(Default)]
struct AtomicCounter(std::sync::atomic::AtomicUsize);

impl AtomicCounter {
    fn bump(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn get(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Watches `/m/` after `after`, resuming after the last revision seen whenever the stream
/// ends; a revision seen twice is kept at its negative.
async fn follow(
    s: Arc<EtcdStorage>,
    after: Revision,
    seen: Arc<std::sync::Mutex<BTreeMap<Revision, String>>>,
    resumes: Arc<AtomicCounter>,
) {
    let mut last = after;
    loop {
        let mut stream = match s.watch("/m/", last).await {
            Ok(stream) => stream,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        while let Some(item) = stream.next().await {
            match item {
                Ok(WatchItem::Event(event)) => {
                    let revision = event.kv.mod_revision;
                    let mut seen = seen.lock().unwrap();
                    if seen.contains_key(&revision) {
                        // Kept under a key no change has, for the test to name.
                        seen.insert(-revision, format!("{} again", event.kv.key));
                    } else {
                        seen.insert(revision, event.kv.key);
                    }
                    last = revision;
                }
                Ok(WatchItem::Progress(_)) => {}
                Err(_) => break,
            }
        }
        resumes.bump();
    }
}
