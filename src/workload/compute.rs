//! The default compute model: what a step's kernels run at when a scenario gives only
//! `precision` (no `efficiency`, `mfu` or `tflops`).
//!
//! Three numbers describe it, each a knob a scenario can also set itself: the GEMMs' fraction
//! of the GPU's dense peak for the precision (`efficiency`), the host time to issue one kernel
//! (`launch_us`: eager PyTorch's per-op dispatch, which bounds a step whose kernels are small)
//! and the GPU time each FLOP-bound kernel takes beyond its FLOPs (`gemm_fixed_us`). They are
//! fitted per GPU generation on measured training steps, because what a GPU reaches of its
//! datasheet is a property of its generation: Hopper doubles Ampere's peak per SM-clock and
//! more than its memory bandwidth, so the same eager step reaches a smaller fraction of it.
//! What differs between frameworks (Megatron's fused kernels, Hugging Face's eager ones) is
//! the kernel inventory of `[workload.model] implementation`, not these numbers.
//!
//! `docs/compute-model.md` gives each figure's source and its error on steps it was not
//! fitted on; `tests/it/compute.rs` holds those errors.

/// One generation's default compute model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ComputeDefault {
    /// The generation whose steps it was fitted on ("Ampere", "Hopper").
    pub generation: &'static str,
    /// The GEMMs' fraction of the dense peak for the step's precision.
    pub efficiency: f64,
    /// Host time to issue one kernel, µs (as `launch_us`).
    pub launch_us: f64,
    /// GPU time each FLOP-bound kernel takes beyond its FLOPs, µs (as `gemm_fixed_us`).
    pub gemm_fixed_us: f64,
    /// Where the GPU's generation has no measured steps: the generation it is carried from
    /// to this one (the GPU's), said in the report.
    pub carried_to: Option<&'static str>,
}

/// Ampere (sm 80): least squares over 160 Megatron-DeepSpeed GPT steps of 12 and 16 layers on
/// one 8 x A100 node (`calibration/data/training/`, vTrain's measurements); the 720 steps of
/// 20 and 24 layers come out with a median error of 5.1 %, a 95th percentile of 18.7 %
/// (`tests/it/megatron.rs`). Since the steps wait for the slowest of their ranks
/// ([`super::skew::DEFAULT_CV`]), the same fit lands one grid step higher, on 0.85 (4.8 % and
/// 17.2 %); 0.8 stays, as the other sources it meets (torchtitan's FSDP steps on 64 A100s, the
/// H200 steps it is carried to) come out further off at 0.85 (`docs/compute-model.md`).
pub const AMPERE: ComputeDefault = ComputeDefault {
    generation: "Ampere",
    efficiency: 0.8,
    launch_us: 52.5,
    gemm_fixed_us: 60.0,
    carried_to: None,
};

/// Hopper (sm 90): Ampere's host and per-GEMM times, with the efficiency fitted on 16 DDP steps
/// of 24-layer GPTs in eager PyTorch 2.11 on one H200
/// (`calibration/data/2026-11-26-h200-kineto/run1-steps.csv`): 0.65, median error 4.4 %,
/// largest 17.5 % (at 0.8, Ampere's, the same steps come out 8.6 % and 20.9 % fast).
pub const HOPPER: ComputeDefault = ComputeDefault {
    generation: "Hopper",
    efficiency: 0.65,
    launch_us: 52.5,
    gemm_fixed_us: 60.0,
    carried_to: None,
};

/// The default compute model of a GPU of compute capability `sm` (80 for sm_80): Ampere's for
/// sm 80, Hopper's for sm 90; for a GPU without measured steps, the nearest measured generation
/// (the other Ampere parts, sm 86 and 87, and Ada, sm 89: Ampere's; Blackwell, sm 100 and up:
/// Hopper's; before Ampere: Ampere's), marked as carried.
pub fn default_for(sm: u32) -> ComputeDefault {
    let (measured, name) = match sm {
        80 => return AMPERE,
        90 => return HOPPER,
        s if s < 80 => (AMPERE, "a pre-Ampere GPU"),
        89 => (AMPERE, "Ada"),
        s if s < 90 => (AMPERE, "another Ampere GPU"),
        _ => (HOPPER, "Blackwell"),
    };
    ComputeDefault { carried_to: Some(name), ..measured }
}

impl ComputeDefault {
    /// The host time to issue one kernel, s, as a scenario's `launch_us` is read.
    pub fn launch(&self) -> f64 {
        self.launch_us * 1e-6
    }

    /// The GPU time each FLOP-bound kernel takes beyond its FLOPs, s, as a scenario's
    /// `gemm_fixed_us` is read.
    pub fn gemm_fixed(&self) -> f64 {
        self.gemm_fixed_us * 1e-6
    }

    /// How the report names it: "collsim's Hopper default" or "Hopper's default, carried to
    /// Blackwell unmeasured".
    pub fn describe(&self) -> String {
        match self.carried_to {
            None => format!("collsim's default for {}, fitted on measured steps", self.generation),
            Some(to) => format!(
                "{}'s default carried to {to}, where no steps have been measured",
                self.generation
            ),
        }
    }
}

/// `spec`'s compute on a GPU of compute capability `sm` where it runs a default compute model
/// (a scenario's GPU swapped by `--topology` or a topology sweep): that GPU's generation's
/// default, its host and per-GEMM times wherever they were the old default's (every
/// generation's are the same today, so a value the user gave that equals them is kept
/// either way).
pub fn rederive(spec: &mut super::ddp::DdpSpec, sm: u32) {
    let Some(old) = spec.compute_default else { return };
    let new = default_for(sm);
    if let super::ddp::ComputeRate::Peak { efficiency, .. } = &mut spec.rate {
        *efficiency = new.efficiency;
    }
    if spec.launch == Some(old.launch()) {
        spec.launch = Some(new.launch());
    }
    if spec.gemm_fixed == Some(old.gemm_fixed()) {
        spec.gemm_fixed = Some(new.gemm_fixed());
    }
    spec.compute_default = Some(new);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_generation_takes_its_own_or_the_nearest_measured_one() {
        assert_eq!(default_for(80), AMPERE);
        assert_eq!(default_for(90), HOPPER);
        assert_eq!(default_for(100).efficiency, HOPPER.efficiency);
        assert_eq!(default_for(100).carried_to, Some("Blackwell"));
        assert_eq!(default_for(89).efficiency, AMPERE.efficiency);
        assert_eq!(default_for(70).carried_to, Some("a pre-Ampere GPU"));
    }
}
