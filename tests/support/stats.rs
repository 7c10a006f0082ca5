//! The one percentile of the tests and benchmarks.

/// The `p` quantile (0.0–1.0) of `samples`, nearest rank on the sorted samples: `None` when
/// there are none. `samples` need not be sorted (a sorted copy is taken).
pub fn percentile<T: Copy + PartialOrd>(samples: &[T], p: f64) -> Option<T> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let index = ((sorted.len() as f64 - 1.0) * p.clamp(0.0, 1.0)).round() as usize;
    sorted.get(index).copied()
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank_on_the_sorted_samples() {
        let samples = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&samples, 0.0), Some(1.0));
        assert_eq!(percentile(&samples, 0.5), Some(3.0));
        assert_eq!(percentile(&samples, 0.99), Some(5.0));
        assert_eq!(percentile(&samples, 1.0), Some(5.0));
        assert_eq!(percentile::<f64>(&[], 0.5), None);
        assert_eq!(percentile(&[7u32], 0.99), Some(7));
    }
}
