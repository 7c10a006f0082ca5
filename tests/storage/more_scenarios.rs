//! More shared scenarios (watches ahead of the store).

use super::*;

pub(crate) async fn a_watch_ahead_of_the_store_waits_for_its_revision(s: &dyn Storage) {
    let current = s.current_revision().await.unwrap();
    let mut stream = s.watch("/a/", current + 2).await.unwrap();
    for key in ["/a/1", "/a/2", "/a/3"] {
        s.create(key, b"1".to_vec()).await.unwrap();
    }
    let event = next_events(&mut stream, 1).await.remove(0);
    assert_eq!(
        (event.kv.key.as_str(), event.kv.mod_revision),
        ("/a/3", current + 3)
    );
}
