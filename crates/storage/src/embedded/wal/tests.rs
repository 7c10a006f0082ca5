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

/// The damage `replay` reports (panics on a clean log).
fn damage(bytes: &[u8]) -> Damage {
    replay(bytes).damage.expect("damage")
}

#[test]
fn replays_a_clean_log() {
    let (bytes, _) = log_with(3);
    let replayed = replay(&bytes);
    assert!(replayed.damage.is_none());
    assert_eq!(replayed.valid_len, bytes.len());
    assert_eq!(replayed.records, 4);
    assert_eq!(replayed.mvcc.unwrap().current(), 4);
}

#[test]
fn a_torn_last_record_is_cut_at_every_byte() {
    let (bytes, ends) = log_with(2);
    for cut in ends[1] + 1..ends[2] {
        let replayed = replay(&bytes[..cut]);
        assert!(replayed.damage.unwrap().torn, "cut at {cut}");
        assert_eq!(replayed.valid_len, ends[1], "cut at {cut}");
        assert_eq!(replayed.mvcc.unwrap().current(), 2);
    }
}

#[test]
fn a_zero_filled_tail_is_torn_not_corrupt() {
    let (mut bytes, ends) = log_with(1);
    bytes.extend(std::iter::repeat_n(0u8, 64));
    let replayed = replay(&bytes);
    assert!(replayed.damage.unwrap().torn);
    assert_eq!(replayed.valid_len, ends[1]);
}

#[test]
fn damage_before_the_last_record_is_corruption() {
    let (mut bytes, ends) = log_with(3);
    // Flip a byte inside the first transaction's payload.
    bytes[ends[0] + FRAME_HEADER + 2] ^= 0xff;
    let found = damage(&bytes);
    assert!(!found.torn);
    assert_eq!(found.offset, ends[0]);
    assert_eq!(found.problem, "checksum mismatch");
}

#[test]
fn a_bad_length_field_mid_log_is_corruption_whatever_it_points_at() {
    let (bytes, ends) = log_with(4);
    // Past the end of the file (the case once taken for a torn tail), a little too long,
    // and too short.
    for len in [u32::MAX, 1 << 20, 5, 1] {
        let mut bytes = bytes.clone();
        bytes[ends[1]..ends[1] + 4].copy_from_slice(&len.to_le_bytes());
        let found = damage(&bytes);
        assert!(!found.torn, "length {len}");
        assert_eq!(found.offset, ends[1], "length {len}");
    }
}

#[test]
fn a_bad_checksum_is_corruption_mid_log_and_on_the_last_record_too() {
    let (bytes, ends) = log_with(3);
    let mut middle = bytes.clone();
    middle[ends[1] + 4] ^= 0x01;
    let found = damage(&middle);
    assert_eq!((found.offset, found.torn), (ends[1], false));
    // The last record was fsynced, so acknowledged: a flipped bit in it is no torn write.
    let mut last = bytes.clone();
    last[ends[2] + 4] ^= 0x01;
    let found = damage(&last);
    assert_eq!((found.offset, found.torn), (ends[2], false));
    assert_eq!(found.problem, "checksum mismatch");
}

#[test]
fn a_flipped_bit_in_the_last_record_is_corruption() {
    let (bytes, ends) = log_with(2);
    for at in [
        ends[1] + FRAME_HEADER,
        ends[1] + FRAME_HEADER + 2,
        ends[2] - 1,
    ] {
        for bit in [0x01, 0x80] {
            let mut bytes = bytes.clone();
            bytes[at] ^= bit;
            let found = damage(&bytes);
            assert_eq!(
                (found.offset, found.torn),
                (ends[1], false),
                "byte {at} bit {bit}"
            );
        }
    }
}

#[test]
fn a_damaged_length_field_of_the_last_record_is_corruption() {
    let (bytes, ends) = log_with(2);
    let len = u32::from_le_bytes(bytes[ends[1]..ends[1] + 4].try_into().unwrap());
    // Longer than the file (the record after its header is whole, with its checksum), and
    // shorter (a whole record by its length, with a wrong checksum and no zeros).
    for wrong in [len + 1, len | 0x100, u32::MAX, len - 1, 1] {
        let mut bytes = bytes.clone();
        bytes[ends[1]..ends[1] + 4].copy_from_slice(&wrong.to_le_bytes());
        let found = damage(&bytes);
        assert_eq!(
            (found.offset, found.torn),
            (ends[1], false),
            "length {wrong}: {found:?}"
        );
    }
}

/// A log whose last record (a put of `value_len` bytes) starts at `start` bytes modulo the
/// sector size; the offsets where each record ends.
fn log_ending_at(start: usize, value_len: usize) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = encode_snapshot(&Mvcc::new()).unwrap();
    let mut ends = vec![bytes.len()];
    // A first record padded so that the second starts where asked.
    let bare = frame(&encode_txn(2, &[put("/a", b"")]).unwrap())
        .unwrap()
        .len();
    let pad = (start + 2 * SECTOR - bytes.len() - bare) % SECTOR;
    let first = vec![b'p'; pad];
    bytes.extend(frame(&encode_txn(2, &[put("/a", &first)]).unwrap()).unwrap());
    ends.push(bytes.len());
    assert_eq!(bytes.len() % SECTOR, start % SECTOR);
    let value: Vec<u8> = (0..value_len).map(|i| b'a' + (i % 26) as u8).collect();
    bytes.extend(frame(&encode_txn(3, &[put("/b", &value)]).unwrap()).unwrap());
    ends.push(bytes.len());
    (bytes, ends)
}

/// The sector pieces of `from..to`: split where file offsets are multiples of the sector size.
fn pieces(from: usize, to: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = from;
    while at < to {
        let end = (at + sector_piece(at)).min(to);
        out.push((at, end));
        at = end;
    }
    out
}

#[test]
fn every_power_loss_image_of_the_last_record_is_cut_and_nothing_before_it() {
    // Starting anywhere in a sector, the header inside one or across two (505..=511).
    for start in [0, 100, 505, 508, 511] {
        let (bytes, ends) = log_ending_at(start, 900);
        let (from, to) = (ends[1], ends[2]);
        let all = pieces(from, to);
        let mut images = 0;
        // The file ends anywhere in the record; every piece that reached the file may read as
        // zeros (its sector never written).
        for cut in from..=to {
            let touched: Vec<_> = all.iter().filter(|(at, _)| *at < cut).collect();
            for zeroed in 0u32..1 << touched.len() {
                let mut image = bytes[..cut].to_vec();
                for (i, (at, end)) in touched.iter().enumerate() {
                    if zeroed & (1 << i) != 0 {
                        image[*at..(*end).min(cut)].fill(0);
                    }
                }
                images += 1;
                let replayed = replay(&image);
                if cut == from || image == bytes {
                    // Nothing of the record, or all of it.
                    assert!(replayed.damage.is_none());
                    continue;
                }
                let found = replayed.damage.expect("damage");
                assert!(
                    found.torn && found.offset == from && replayed.valid_len == from,
                    "start {start}, cut at {cut}, zeroed {zeroed:b}: {found:?}"
                );
                assert_eq!(replayed.mvcc.unwrap().current(), 2);
            }
        }
        assert!(images > 2 * (to - from), "{images}");
    }
}

#[test]
fn a_zeroed_sector_is_torn_only_in_the_last_record() {
    let (bytes, ends) = log_ending_at(100, 1200);
    let (from, to) = (ends[1], ends[2]);
    for (at, end) in pieces(from, to) {
        let mut last = bytes.clone();
        last[at..end].fill(0);
        let found = damage(&last);
        assert_eq!((found.offset, found.torn), (from, true), "{at}..{end}");
        assert!(found.problem.contains("zeros"), "{found:?}");
        // The same record followed by another: a sector lost in the middle of the log.
        let mut middle = last.clone();
        middle.extend(frame(&encode_txn(4, &[put("/c", b"3")]).unwrap()).unwrap());
        let found = damage(&middle);
        assert_eq!((found.offset, found.torn), (from, false), "{at}..{end}");
    }
}

#[test]
fn a_damaged_header_is_corruption_even_with_nothing_after_it() {
    // A snapshot is renamed into place whole: it is never torn.
    let (bytes, ends) = log_with(0);
    for at in [0, 4, FRAME_HEADER + 3] {
        let mut bytes = bytes.clone();
        bytes[at] ^= 0x40;
        let found = damage(&bytes);
        assert_eq!((found.offset, found.torn), (0, false), "byte {at}");
    }
    let (mut bytes, _) = log_with(3);
    bytes[FRAME_HEADER + 3] ^= 0x40;
    assert_eq!(damage(&bytes).offset, 0);
    assert!(damage(&bytes[..ends[0] - 1]).offset == 0);
    assert!(!damage(&bytes[..ends[0] - 1]).torn);
}

#[test]
fn a_damaged_snapshot_record_is_corruption_even_when_last() {
    let mut mvcc = Mvcc::new();
    mvcc.apply(2, vec![put("/a", b"1"), put("/b", b"2")])
        .unwrap();
    let mut bytes = encode_snapshot(&mvcc).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0xff;
    let found = damage(&bytes);
    assert!(!found.torn, "{found:?}");
    // Cut short, the snapshot is incomplete: corruption too.
    let whole = encode_snapshot(&mvcc).unwrap();
    let header_len = FRAME_HEADER + read_frame(&whole).unwrap().len();
    let cut = damage(&whole[..header_len]);
    assert!(!cut.torn);
    assert!(cut.problem.contains("2 key records early"), "{cut:?}");
}

#[test]
fn a_format_1_log_still_replays() {
    let mut header = Encoder::new(TAG_HEADER);
    header.bytes_raw(MAGIC);
    header.u32(FORMAT_VERSION_1);
    header.i64(1);
    header.i64(0);
    let mut bytes = frame(&header.0).unwrap();
    bytes.extend(frame(&encode_txn(2, &[put("/a", b"1")]).unwrap()).unwrap());
    let replayed = replay(&bytes);
    assert!(replayed.damage.is_none());
    assert_eq!(replayed.mvcc.unwrap().current(), 2);
}

#[test]
fn the_intact_records_after_damage_are_counted() {
    let (mut bytes, ends) = log_with(5);
    bytes[ends[2] + FRAME_HEADER + 1] ^= 0xff;
    let found = damage(&bytes);
    assert_eq!(found.offset, ends[2]);
    // Revisions 2 and 3 before it; 4 damaged; 5, 6 after it.
    assert_eq!(intact_after(&bytes, found.offset), (2, Some((5, 6))));
}

#[test]
fn a_header_is_rebuilt_from_the_records_after_it() {
    let mut mvcc = Mvcc::new();
    mvcc.apply(2, vec![put("/a", b"1")]).unwrap();
    mvcc.apply(3, vec![put("/b", b"2")]).unwrap();
    let mut bytes = encode_snapshot(&mvcc).unwrap();
    bytes.extend(frame(&encode_txn(4, &[put("/c", b"3")]).unwrap()).unwrap());
    bytes[FRAME_HEADER + 2] ^= 0xff;
    let rebuilt = rebuild_without_header(&bytes).unwrap();
    assert!(rebuilt.damage.is_none());
    assert_eq!(rebuilt.records, 4);
    assert_eq!(rebuilt.mvcc.current(), 4);
    let keys: Vec<&String> = rebuilt.mvcc.histories().map(|(k, _)| k).collect();
    assert_eq!(keys, ["/a", "/b", "/c"]);
}

#[test]
fn a_revision_gap_is_corruption() {
    let mut bytes = encode_snapshot(&Mvcc::new()).unwrap();
    bytes.extend(frame(&encode_txn(3, &[put("/a", b"1")]).unwrap()).unwrap());
    bytes.extend(frame(&encode_txn(4, &[put("/b", b"1")]).unwrap()).unwrap());
    let found = damage(&bytes);
    assert!(!found.torn);
    assert!(found.problem.contains("does not follow"), "{found:?}");
}

#[test]
fn a_file_that_is_not_a_log_is_rejected() {
    let mut bytes = frame(b"\x01not-a-log-header-at-all").unwrap();
    bytes.extend(frame(b"more").unwrap());
    assert!(!damage(&bytes).torn);
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
    let restored = replay(&bytes).mvcc.unwrap();
    assert_eq!(restored.current(), 4);
    assert_eq!(restored.compacted(), 3);
    let original: Vec<_> = mvcc.histories().collect();
    let back: Vec<_> = restored.histories().collect();
    assert_eq!(original, back);
}
