//! etcd alone: connection failures, TLS and what only a real etcd does.

use super::*;

#[tokio::test]
async fn connecting_to_nothing_is_unavailable() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let options = EtcdOptions {
        dial_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(3),
        ..etcd_options()
    };
    match EtcdStorage::connect(&[format!("http://127.0.0.1:{port}")], options).await {
        Err(StorageError::Unavailable { .. }) => {}
        Err(other) => panic!("expected Unavailable, got {other:?}"),
        Ok(_) => panic!("connected to nothing"),
    }
    assert!(matches!(
        EtcdStorage::connect(&[], etcd_options()).await,
        Err(StorageError::Unavailable { .. })
    ));
}

#[tokio::test]
async fn losing_etcd_makes_requests_and_watches_unavailable() {
    let mut server = EtcdServer::start();
    let options = EtcdOptions {
        dial_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(3),
        ..etcd_options()
    };
    let s = EtcdStorage::connect(&[server.endpoint()], options)
        .await
        .unwrap();
    let revision = s.create("/u/a", b"1".to_vec()).await.unwrap();
    let mut stream = s.watch("/u/", revision).await.unwrap();
    s.health().await.unwrap();
    server.kill();

    assert!(matches!(
        s.health().await,
        Err(StorageError::Unavailable { .. })
    ));
    assert!(matches!(
        s.get("/u/a").await,
        Err(StorageError::Unavailable { .. })
    ));
    assert!(matches!(
        s.create("/u/b", b"1".to_vec()).await,
        Err(StorageError::Unavailable { .. })
    ));
    // The watch ends with an error rather than going silent.
    loop {
        match next_item(&mut stream).await {
            Ok(WatchItem::Progress(_)) => {}
            Ok(WatchItem::Event(event)) => panic!("unexpected event {event:?}"),
            Err(StorageError::Unavailable { .. }) => break,
            Err(other) => panic!("expected Unavailable, got {other:?}"),
        }
    }
    assert!(stream.next().await.is_none());
}

#[tokio::test]
async fn a_list_larger_than_grpc_default_limits_is_read_whole() {
    let backend = etcd().await;
    let s = backend.storage.as_ref();
    // etcd takes at most 1.5 MiB per request; six 1 MiB values make a 6 MiB response.
    let value = vec![b'x'; 1 << 20];
    for i in 0..6 {
        s.create(&format!("/big/{i}"), value.clone()).await.unwrap();
    }
    let all = s.list("/big/", ListOptions::default()).await.unwrap();
    assert_eq!(all.items.len(), 6);
    assert!(all.items.iter().all(|kv| kv.value == value));
    // A value over etcd's request limit (1.5 MiB), or even over its gRPC limit (2 MiB), is
    // refused as invalid input, not as "unavailable".
    for size in [(3 << 20) / 2 + 1000, 3 << 20] {
        match s.create("/big/huge", vec![b'x'; size]).await {
            Err(StorageError::Io(e)) => {
                assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{size}: {e}")
            }
            other => panic!("{size} bytes: expected InvalidInput, got {other:?}"),
        }
    }
    assert_eq!(s.get("/big/huge").await.unwrap(), None);
}

#[tokio::test]
async fn values_and_keys_round_trip_unchanged() {
    let backend = etcd().await;
    let s = backend.storage.as_ref();
    let value: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    let key = "/bytes/ключ with spaces/\u{1F980}";
    let revision = s.create(key, value.clone()).await.unwrap();
    let kv = s.get(key).await.unwrap().unwrap();
    assert_eq!(
        (kv.key.as_str(), kv.value, kv.mod_revision),
        (key, value, revision)
    );
}
