//! PyTorch DDP's Reducer (`../shared/reference/ddp.md` §1): how gradients are bucketed.
//!
//! So far the bucket assignment: `compute_bucket_assignment_by_size` (§1.2) and which tensor
//! order and size limits DDP hands it at construction and at the rebuild after the first
//! iteration (§1.3, §1.4).

use super::models::Model;

/// `torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`.
pub const FIRST_BUCKET_BYTES: u64 = 1 << 20;
/// The default `bucket_cap_mb` (25 MiB).
pub const DEFAULT_CAP_BYTES: u64 = 25 << 20;

/// One bucket: the indices of its tensors in `model.parameters()` order, in the order they
/// were added, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// Tensor indices.
    pub tensors: Vec<usize>,
    /// Bytes of gradient.
    pub bytes: u64,
}

/// `compute_bucket_assignment_by_size` for one dtype/device key: `sizes` are (tensor index,
/// bytes) in the order given; a bucket closes on the tensor that makes it reach its limit (so it
/// may pass it by less than one tensor); the first limit serves the first bucket only, the last
/// one every bucket after. Buckets in the order they were closed.
pub fn assign(sizes: &[(usize, u64)], limits: &[u64]) -> Vec<Bucket> {
    let mut out = Vec::new();
    let mut cur = Bucket { tensors: Vec::new(), bytes: 0 };
    let mut it = 0;
    for &(i, b) in sizes {
        cur.tensors.push(i);
        cur.bytes += b;
        if cur.bytes >= limits[it] {
            out.push(std::mem::replace(&mut cur, Bucket { tensors: Vec::new(), bytes: 0 }));
            if it + 1 < limits.len() {
                it += 1;
            }
        }
    }
    if !cur.tensors.is_empty() {
        out.push(cur);
    }
    out
}

/// Which bucketing DDP uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Construction time in PyTorch before ~1.12, or with `find_unused_parameters=True` (not
    /// static): forward order, limits [1 MiB, cap] (just [cap] if the cap was set explicitly in
    /// current versions), buckets reversed so the last layers reduce first.
    Construction,
    /// Iteration 0 in current PyTorch with `find_unused_parameters=False` or `static_graph`:
    /// one bucket of everything.
    FirstIteration,
    /// After the rebuild: gradient-ready order (taken as the reverse of `parameters()`),
    /// limits [first cap, cap], kept in that order — the small bucket first.
    Rebuilt,
}

/// DDP's buckets for `model` in reduction order (bucket 0 is all-reduced first). `cap` is
/// `bucket_cap_mb` in bytes; `None` is the default (25 MiB with a 1 MiB first bucket; set
/// explicitly, there is no small first bucket).
pub fn buckets(model: &Model, cap: Option<u64>, phase: Phase) -> Vec<Bucket> {
    let elt = model.grad_dtype.size();
    let sizes: Vec<(usize, u64)> = model.tensors().map(|t| t.numel * elt).enumerate().collect();
    let first = if cap.is_none() { FIRST_BUCKET_BYTES } else { cap.unwrap_or(DEFAULT_CAP_BYTES) };
    let cap = cap.unwrap_or(DEFAULT_CAP_BYTES);
    match phase {
        Phase::FirstIteration => assign(&sizes, &[u64::MAX]),
        Phase::Construction => {
            // Built in forward order (already sorted by lowest index), then reversed.
            let mut b = assign(&sizes, &[first, cap]);
            b.reverse();
            b
        }
        Phase::Rebuilt => {
            let ready: Vec<(usize, u64)> = sizes.into_iter().rev().collect();
            assign(&ready, &[first, cap])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::DataType;
    use crate::workload::models::preset;

    fn mib(b: &[Bucket]) -> Vec<f64> {
        b.iter().map(|b| (b.bytes as f64 / 1048576.0 * 100.0).round() / 100.0).collect()
    }

    #[test]
    fn resnet50_buckets_match_the_reference_layouts() {
        // ddp.md §3.6, cases A (construction), B (rebuilt, default caps), C (bucket_cap_mb=25).
        let m = preset("resnet50", None, DataType::Float).unwrap();
        assert_eq!(
            mib(&buckets(&m, None, Phase::Construction)),
            [11.84, 30.04, 28.29, 25.77, 1.55]
        );
        assert_eq!(mib(&buckets(&m, None, Phase::Rebuilt)), [7.82, 30.04, 25.04, 25.32, 9.27]);
        assert_eq!(mib(&buckets(&m, Some(25 << 20), Phase::Rebuilt)), [28.86, 25.04, 27.05, 16.55]);
        // B's first bucket is fc alone, bias first (gradient-ready order).
        let names: Vec<&str> = m.tensors().map(|t| t.name.as_str()).collect();
        let b0 = &buckets(&m, None, Phase::Rebuilt)[0];
        assert_eq!(
            b0.tensors.iter().map(|&i| names[i]).collect::<Vec<_>>(),
            ["fc.bias", "fc.weight"]
        );
        // Iteration 0 of current PyTorch: one bucket of everything.
        let one = buckets(&m, None, Phase::FirstIteration);
        assert_eq!((one.len(), one[0].bytes), (1, 4 * 25_557_032));
    }

    #[test]
    fn transformer_buckets_match_the_reference_layouts() {
        let bert = preset("bert-large", None, DataType::Float).unwrap();
        let a = mib(&buckets(&bert, None, Phase::Construction));
        assert_eq!(
            (a.len(), &a[..4], a[a.len() - 1]),
            (38, &[8.15, 36.03, 28.04, 32.04][..], 119.23)
        );
        let b = mib(&buckets(&bert, None, Phase::Rebuilt));
        assert_eq!(
            (b.len(), &b[..4], b[b.len() - 1]),
            (38, &[4.02, 36.15, 32.04, 28.04][..], 125.25)
        );
        let c = mib(&buckets(&bert, Some(25 << 20), Phase::Rebuilt));
        assert_eq!((c.len(), &c[..3], c[c.len() - 1]), (37, &[40.17, 32.04, 28.04][..], 125.25));

        let gpt = preset("gpt2-xl", None, DataType::Float).unwrap();
        let a = mib(&buckets(&gpt, None, Phase::Construction));
        assert_eq!(
            (a.len(), &a[..4], a[a.len() - 1]),
            (146, &[0.02, 39.09, 48.86, 29.32][..], 306.74)
        );
        let b = mib(&buckets(&gpt, None, Phase::Rebuilt));
        assert_eq!((b.len(), b[b.len() - 1]), (145, 313.01));
        assert_eq!(b, mib(&buckets(&gpt, Some(25 << 20), Phase::Rebuilt)), "C is B for GPT-2 XL");

        for (dtype, big) in [(DataType::Float, 500.0), (DataType::Bfloat16, 250.0)] {
            let llama = preset("llama-7b", None, dtype).unwrap();
            for phase in [Phase::Construction, Phase::Rebuilt] {
                let v = mib(&buckets(&llama, None, phase));
                assert_eq!(v.len(), 226, "{dtype:?} {phase:?}");
                assert_eq!(v[v.len() - 1].round(), big, "{dtype:?} {phase:?}");
            }
        }
    }
}
