//! A transformer written down as a specification (`[workload.model]`): its family, shapes and
//! the implementation that runs it, from which collsim builds its parameter tensors, FLOPs,
//! memory-bound work and kept activations, with the layout Megatron-LM splits it by (so that
//! tensor, pipeline and expert parallelism apply to any such model, not only to named presets).
//!
//! Each block is put together from its parts, each part counted as the framework's source runs
//! it (one kernel per PyTorch op unless a library fuses it): two norms, the attention's
//! projections and flash attention, the heads merged back, rotary embeddings, dropouts,
//! residual adds, the MLP's activation, the biases' gradients. What an implementation runs:
//!
//! | part | `hf` (transformers, eager) | `megatron` (Megatron-LM, fused) | `torchtitan` |
//! |---|---|---|---|
//! | GPT MLP activation | `gelu_new`: eight elementwise kernels | bias-GELU, one kernel | — |
//! | Llama MLP | `silu(gate) * up`: two kernels | `bias_swiglu`: one kernel | as HF |
//! | RMSNorm | op by op in fp32: eight kernels | fused (Apex / TE): one | as HF |
//! | rotary embedding | `rotate_half`: five kernels a tensor | fused: one a tensor | complex multiply: three a tensor |
//! | QKV and MLP GEMMs (Llama) | q, k, v, o, gate, up, down | fused QKV, fused gate-up | as HF |
//! | loss | logits cast to fp32, `F.cross_entropy` | `vocab_parallel_cross_entropy` | as HF |
//! | vocabulary | as configured | padded to a multiple of 128 x tp | as configured |
//!
//! Sources: transformers' `modeling_gpt2.py`, `modeling_llama.py`, `activations.py`
//! (`NewGELUActivation`) and `loss_utils.py` (`ForCausalLMLoss` upcasts the logits); Megatron-LM
//! (NVIDIA/Megatron-LM d98e8a64) `megatron/core/fusions/` (`fused_bias_gelu.py`,
//! `fused_bias_swiglu.py`), `megatron/core/tensor_parallel/cross_entropy.py`,
//! `megatron/training/tokenizer` (`_vocab_size_with_padding`, `make_vocab_size_divisible_by`
//! 128); torchtitan `torchtitan/models/llama3/model.py` (`apply_rotary_emb` through
//! `torch.view_as_complex`, RMSNorm, `F.silu(w1(x)) * w3(x)`) and its cross-entropy on
//! `pred.float()`. Byte counts are per token, 16-bit activations (fp32 runs double them).

use super::DataType;
use super::models::{
    Attention, Layer, MemoryWork, Model, TpRole, TpShape, layer_norm_mem, logits_acts, loss_mem,
    megatron_loss_mem, moe_block_mem, rms_norm_mem, tensor as t, transformer_acts, with_attention,
};

/// The architecture a specification describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// GPT-2's (and Megatron-LM's GPT): learned positions, LayerNorm, a GELU MLP, biases, a
    /// fused QKV projection, tied embeddings.
    Gpt,
    /// Llama's: rotary embeddings, RMSNorm, a SwiGLU MLP, no biases, grouped-query attention.
    Llama,
    /// Mixtral's: a Llama decoder whose MLP is a mixture of experts.
    Mixtral,
}

/// Which framework's code runs the model: it decides the kernels each part launches and the
/// bytes they move (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Implementation {
    /// Hugging Face transformers, eager PyTorch.
    Hf,
    /// Megatron-LM (Megatron-Core with its fusions).
    Megatron,
    /// torchtitan (eager; Llama-family models only).
    Torchtitan,
}

/// The MLP's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// Exact GELU, one kernel (`nn.GELU()`, Megatron's bias-GELU fusion).
    Gelu,
    /// The tanh approximation as one kernel (`gelu(approximate="tanh")`, transformers'
    /// `gelu_pytorch_tanh`).
    GeluTanh,
    /// transformers' `gelu_new` (GPT-2's `activation_function`): the tanh formula as eight
    /// eager elementwise kernels, each keeping what its backward needs.
    GeluNew,
    /// `silu(gate) * up` as two eager kernels (transformers, torchtitan).
    Swiglu,
    /// Megatron's `bias_swiglu`: one kernel forward, one backward.
    SwigluFused,
}

/// The norms' implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// `nn.LayerNorm` (one kernel each way).
    Layernorm,
    /// RMSNorm op by op in fp32 (transformers' `LlamaRMSNorm`, torchtitan's).
    Rmsnorm,
    /// A fused RMSNorm kernel (Apex, Transformer Engine).
    RmsnormFused,
}

/// How positions enter the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Position {
    /// A learned position embedding added to the token embedding (GPT-2).
    Learned,
    /// Rotary embeddings on queries and keys, transformers' `rotate_half`: five kernels a
    /// tensor forward.
    Rope,
    /// torchtitan's rotary embeddings: cast to fp32, a complex multiply, cast back.
    RopeComplex,
    /// A fused rotary kernel (Megatron's `apply_rope_fusion`, Transformer Engine).
    RopeFused,
    /// ALiBi: a per-head bias on the scores, which flash attention adds inside its kernel
    /// (flash-attn's `alibi_slopes`): no parameters, no traffic of its own.
    Alibi,
}

/// How the loss over the vocabulary is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Loss {
    /// The logits upcast to fp32, then `F.cross_entropy` (transformers, torchtitan, nanoGPT):
    /// the fp32 copy is kept for backward.
    Fp32,
    /// Megatron's `vocab_parallel_cross_entropy`, pass for pass.
    Megatron,
    /// A fused cross-entropy (Liger's, Transformer Engine's): one kernel reads the 16-bit
    /// logits and writes their gradient in place; only the 16-bit logits are kept.
    Fused,
}

/// A transformer, as `[workload.model]` writes it down.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelSpec {
    /// Its name in reports.
    pub name: String,
    /// The architecture.
    pub family: Family,
    /// The framework that runs it.
    pub implementation: Implementation,
    /// Transformer blocks.
    pub layers: u64,
    /// Hidden size.
    pub hidden: u64,
    /// Attention heads.
    pub heads: u64,
    /// Key/value heads (grouped-query attention: fewer than `heads`).
    pub kv_heads: u64,
    /// The MLP's width (each expert's, in a mixture of experts).
    pub ffn: u64,
    /// The MLP's activation.
    pub activation: Activation,
    /// The norms.
    pub norm: Norm,
    /// Biases on the linear layers.
    pub bias: bool,
    /// Position embedding.
    pub position: Position,
    /// Rows of a learned position embedding.
    pub max_positions: u64,
    /// Vocabulary as the tokenizer gives it.
    pub vocab: u64,
    /// Pad the vocabulary to a multiple of this times the tensor-parallel degree (Megatron's
    /// `--make-vocab-size-divisible-by`; 1: no padding).
    pub vocab_multiple: u64,
    /// Whether its step runs under 16-bit autocast over fp32 parameters (plain DDP's mixed
    /// precision, and FSDP's whose `param_dtype` is fp32): transformers' GPT-2 then keeps
    /// an fp32 residual stream and runs `gelu_new` in fp32 ([`ModelSpec::autocast_stream`]).
    /// Set from the scenario, not a key of `[workload.model]`.
    #[serde(skip)]
    pub autocast: bool,
    /// The output head is the token embedding.
    pub tied: bool,
    /// Dropout after attention and after the MLP (and on the embeddings).
    pub dropout: bool,
    /// Attention's kernels.
    pub attention: Attention,
    /// The loss's implementation.
    pub loss: Loss,
    /// Experts per layer and experts each token goes to (a mixture of experts).
    pub experts: Option<(u64, u64)>,
    /// Where its shapes come from (a preset's config or paper).
    pub source: String,
}

impl Family {
    /// The scenario key's values.
    pub const NAMES: &'static str = "\"gpt\", \"llama\" or \"mixtral\"";

    /// By name.
    pub fn parse(s: &str) -> Option<Family> {
        Some(match s {
            "gpt" => Family::Gpt,
            "llama" => Family::Llama,
            "mixtral" => Family::Mixtral,
            _ => return None,
        })
    }
}

impl Implementation {
    /// The scenario key's values.
    pub const NAMES: &'static str = "\"hf\", \"megatron\" or \"torchtitan\"";

    /// By name.
    pub fn parse(s: &str) -> Option<Implementation> {
        Some(match s {
            "hf" => Implementation::Hf,
            "megatron" => Implementation::Megatron,
            "torchtitan" => Implementation::Torchtitan,
            _ => return None,
        })
    }
}

impl Activation {
    /// The scenario key's values.
    pub const NAMES: &'static str =
        "\"gelu\", \"gelu_tanh\", \"gelu_new\", \"swiglu\" or \"swiglu_fused\"";

    /// By name.
    pub fn parse(s: &str) -> Option<Activation> {
        Some(match s {
            "gelu" => Activation::Gelu,
            "gelu_tanh" => Activation::GeluTanh,
            "gelu_new" => Activation::GeluNew,
            "swiglu" => Activation::Swiglu,
            "swiglu_fused" => Activation::SwigluFused,
            _ => return None,
        })
    }

    /// Gated (two input projections, gate and up).
    pub fn gated(self) -> bool {
        matches!(self, Activation::Swiglu | Activation::SwigluFused)
    }

    /// Its memory-bound work on `f` elements per token (the MLP's width), 16-bit. One-kernel
    /// GELUs read and write (4 bytes an element), backward read the gradient and the input and
    /// write (6). `gelu_new` runs `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))` as
    /// eager kernels under 16-bit autocast, where `pow` is on autocast's fp32 list
    /// (`aten/src/ATen/autocast_mode.cpp`), so it and every op after it run in fp32: the half
    /// input (4 bytes an element), the upcast for `pow` (6), pow, the scalar multiply (8 each),
    /// the add of the 16-bit input (10), the scalar multiply, tanh, the add of one (8 each), the
    /// product with the 16-bit half input (10), and the cast back to 16 bits for the next GEMM
    /// (6): 76 bytes in 10 kernels. Backward (15 kernels, 118 bytes) is autograd's mirror in
    /// fp32 with the casts' gradients. Counted kernel by kernel from a profiled step of
    /// transformers' GPT-2 XL on an H200 (`calibration/data/2026-11-30-h200-hf/gpt2-xl-b8`).
    /// Without autocast (16-bit parameters: FSDP's `param_dtype`, ZeRO, a Megatron layout) the
    /// same eight ops run in 16 bits: 36 bytes in 8 kernels, 56 in 11 backward. SwiGLU in
    /// eager code: SiLU
    /// (4) and the product (6), backward SiLU's (6) and the product's two gradients (12), 3
    /// kernels; fused, one kernel reads gate and up and writes the product (6), backward reads
    /// the gradient and both inputs and writes two gradients (10).
    fn memory(self, f: f64, autocast: bool) -> MemoryWork {
        match self {
            Activation::Gelu | Activation::GeluTanh => MemoryWork::new(4.0 * f, 6.0 * f, 1, 1),
            Activation::GeluNew if autocast => MemoryWork::new(76.0 * f, 118.0 * f, 10, 15),
            Activation::GeluNew => MemoryWork::new(36.0 * f, 56.0 * f, 8, 11),
            Activation::Swiglu => MemoryWork::new(10.0 * f, 18.0 * f, 2, 3),
            Activation::SwigluFused => MemoryWork::new(6.0 * f, 10.0 * f, 1, 1),
        }
    }

    /// What it keeps for backward per token beyond the one 16-bit input a one-kernel GELU keeps
    /// (which Korthikanti et al.'s 34·s·h counts): `gelu_new` under autocast keeps `pow`'s fp32
    /// input, tanh's fp32 output, the 16-bit half input and the fp32 factor (1 + tanh), 14
    /// bytes an element of `f`, 12 more than counted; in 16 bits, 6 more. (A gated MLP's extra
    /// input is left in the 34·s·h estimate.)
    fn extra_acts(self, f: f64, autocast: bool) -> f64 {
        match self {
            Activation::GeluNew if autocast => 12.0 * f,
            Activation::GeluNew => 6.0 * f,
            _ => 0.0,
        }
    }
}

impl Norm {
    /// The scenario key's values.
    pub const NAMES: &'static str = "\"layernorm\", \"rmsnorm\" or \"rmsnorm_fused\"";

    /// By name.
    pub fn parse(s: &str) -> Option<Norm> {
        Some(match s {
            "layernorm" => Norm::Layernorm,
            "rmsnorm" => Norm::Rmsnorm,
            "rmsnorm_fused" => Norm::RmsnormFused,
            _ => return None,
        })
    }

    /// One norm over `h` elements per token.
    fn memory(self, h: f64) -> MemoryWork {
        match self {
            Norm::Layernorm | Norm::RmsnormFused => layer_norm_mem(h),
            Norm::Rmsnorm => rms_norm_mem(h),
        }
    }

    /// It has a bias.
    fn has_bias(self) -> bool {
        self == Norm::Layernorm
    }
}

impl Position {
    /// The scenario key's values.
    pub const NAMES: &'static str =
        "\"learned\", \"rope\", \"rope_complex\", \"rope_fused\" or \"alibi\"";

    /// By name.
    pub fn parse(s: &str) -> Option<Position> {
        Some(match s {
            "learned" => Position::Learned,
            "rope" => Position::Rope,
            "rope_complex" => Position::RopeComplex,
            "rope_fused" => Position::RopeFused,
            "alibi" => Position::Alibi,
            _ => return None,
        })
    }

    /// Rotary embeddings on the queries (`h` wide) and keys (`kv` wide), per token. transformers'
    /// `q * cos + rotate_half(q) * sin`, `rotate_half` a negation and a concatenation: five
    /// kernels and 20 bytes an element forward, twice the bytes backward (each op's gradient,
    /// the halves' zero-filled gradients and their sums: 17 launches for the pair). torchtitan's
    /// cast to fp32 (6 bytes), complex multiply (16) and cast back (6): three kernels each way.
    /// A fused kernel reads and writes once each way.
    fn memory(self, h: f64, kv: f64) -> MemoryWork {
        let e = h + kv;
        match self {
            Position::Rope => MemoryWork::new(20.0 * e, 40.0 * e, 10, 17),
            Position::RopeComplex => MemoryWork::new(28.0 * e, 28.0 * e, 6, 6),
            Position::RopeFused => MemoryWork::new(4.0 * e, 4.0 * e, 2, 2),
            Position::Learned | Position::Alibi => MemoryWork::default(),
        }
    }
}

impl Loss {
    /// The scenario key's values.
    pub const NAMES: &'static str = "\"fp32\", \"megatron\" or \"fused\"";

    /// By name.
    pub fn parse(s: &str) -> Option<Loss> {
        Some(match s {
            "fp32" => Loss::Fp32,
            "megatron" => Loss::Megatron,
            "fused" => Loss::Fused,
            _ => return None,
        })
    }

    /// Its memory-bound work over a vocabulary of `v` per token.
    fn memory(self, v: u64) -> MemoryWork {
        match self {
            Loss::Fp32 => loss_mem(v),
            Loss::Megatron => megatron_loss_mem(v),
            Loss::Fused => MemoryWork::new(4.0 * v as f64, 4.0 * v as f64, 1, 1),
        }
    }

    /// What its backward allocates beyond the kept logits, per sample of `s` tokens: with the
    /// logits upcast, `F.cross_entropy`'s backward holds the gradient of the fp32 log-softmax
    /// (nll_loss's) and that of the fp32 logits (log_softmax's) at once, 8 bytes a logit
    /// (PyTorch's `log_softmax_backward_data` writes a new tensor); Megatron's
    /// `vocab_parallel_cross_entropy` writes its fp32 gradient into the saved softmax in place
    /// (megatron/core/tensor_parallel/cross_entropy.py), leaving the 16-bit cast of it, 2
    /// bytes; a fused loss writes the 16-bit gradient in place.
    fn transient(self, s: u64, v: u64) -> f64 {
        let logits = (s * v) as f64;
        match self {
            Loss::Fp32 => 8.0 * logits,
            Loss::Megatron => 2.0 * logits,
            Loss::Fused => 0.0,
        }
    }

    /// The logits it keeps for backward per sample of `s` tokens: with the logits upcast, the
    /// 16-bit logits (HF's causal LMs return them, so the caller holds them through backward)
    /// and the fp32 copy; Megatron's `vocab_parallel_cross_entropy` casts inside its autograd
    /// function and saves only the fp32 softmax it computed in place (`save_for_backward(
    /// exp_logits, …)`, megatron/core/tensor_parallel/cross_entropy.py, NVIDIA/Megatron-LM
    /// d98e8a64), and `GPTModel.forward` drops the 16-bit logits when it returns the loss: 4
    /// bytes a logit; a fused loss the 16-bit logits.
    fn acts(self, s: u64, v: u64) -> f64 {
        match self {
            Loss::Fp32 => logits_acts(s, v),
            Loss::Megatron => 4.0 * (s * v) as f64,
            Loss::Fused => 2.0 * (s * v) as f64,
        }
    }
}

/// A dropout over `h` elements a token: read, write and a 1-byte mask forward, read the
/// gradient and mask and write backward.
fn dropout_mem(h: f64) -> MemoryWork {
    MemoryWork::new(5.0 * h, 5.0 * h, 1, 1)
}

impl ModelSpec {
    /// A family's shapes with `implementation`'s defaults for the rest: what
    /// `[workload.model]` starts from before its keys.
    pub fn defaults(family: Family, implementation: Implementation) -> ModelSpec {
        use Implementation::*;
        let megatron = implementation == Megatron;
        let (activation, norm, bias, position, dropout, tied) = match family {
            Family::Gpt => (
                if megatron { Activation::Gelu } else { Activation::GeluNew },
                Norm::Layernorm,
                true,
                Position::Learned,
                true,
                true,
            ),
            Family::Llama | Family::Mixtral => (
                if megatron { Activation::SwigluFused } else { Activation::Swiglu },
                if megatron { Norm::RmsnormFused } else { Norm::Rmsnorm },
                false,
                match implementation {
                    Hf => Position::Rope,
                    Megatron => Position::RopeFused,
                    Torchtitan => Position::RopeComplex,
                },
                false,
                false,
            ),
        };
        ModelSpec {
            name: String::new(),
            family,
            implementation,
            layers: 0,
            hidden: 0,
            heads: 0,
            kv_heads: 0,
            ffn: 0,
            activation,
            norm,
            bias,
            position,
            max_positions: 0,
            vocab: if family == Family::Gpt { 50_257 } else { 32_000 },
            vocab_multiple: if megatron { 128 } else { 1 },
            autocast: false,
            tied,
            dropout,
            attention: Attention::Flash,
            loss: if megatron { Loss::Megatron } else { Loss::Fp32 },
            experts: None,
            source: String::new(),
        }
    }

    /// The transformer presets as specifications (None for other names: `resnet50` and
    /// `bert-large` are built as layer lists, see [`super::models::preset`]).
    pub fn preset(name: &str) -> Option<ModelSpec> {
        let hf = |family| ModelSpec::defaults(family, Implementation::Hf);
        let llama = |layers, hidden, ffn, vocab, kv_heads, heads, tied, source: &str| ModelSpec {
            name: name.to_string(),
            layers,
            hidden,
            heads,
            kv_heads,
            ffn,
            vocab,
            tied,
            source: source.to_string(),
            ..hf(Family::Llama)
        };
        let gpt2 = |layers, hidden, heads, ctx, source: &str| ModelSpec {
            name: name.to_string(),
            layers,
            hidden,
            heads,
            kv_heads: heads,
            ffn: 4 * hidden,
            max_positions: ctx,
            source: source.to_string(),
            ..hf(Family::Gpt)
        };
        Some(match name {
            // transformers' GPT2LMHeadModel as its config.json gives it: activation_function
            // "gelu_new", run as eight eager kernels.
            "gpt2-xl" => gpt2(48, 1600, 25, 1024, "openai-community/gpt2-xl config.json"),
            // GPT-3 is not a transformers model: it is trained with fused kernels (MLPerf's
            // GPT-3 runs on NeMo/Megatron), so its GELU is one kernel.
            "gpt3-175b" => ModelSpec {
                activation: Activation::GeluTanh,
                ..gpt2(
                    96,
                    12_288,
                    96,
                    2048,
                    "Brown et al. 2020, Table 2.1 (sparse attention layers counted dense)",
                )
            },
            "llama-7b" => llama(32, 4096, 11_008, 32_000, 32, 32, false, "LLaMA-1 7B (HF)"),
            "llama-2-13b" | "llama-13b" => llama(
                40,
                5120,
                13_824,
                32_000,
                40,
                40,
                false,
                "meta-llama/Llama-2-13b-hf config.json",
            ),
            "llama-2-70b" => llama(
                80,
                8192,
                28_672,
                32_000,
                8,
                64,
                false,
                "meta-llama/Llama-2-70b-hf config.json",
            ),
            "llama-3-8b" => llama(
                32,
                4096,
                14_336,
                128_256,
                8,
                32,
                false,
                "meta-llama/Meta-Llama-3-8B config.json",
            ),
            "llama-3-70b" => llama(
                80,
                8192,
                28_672,
                128_256,
                8,
                64,
                false,
                "meta-llama/Meta-Llama-3-70B config.json",
            ),
            "llama-3.2-1b" => {
                llama(16, 2048, 8192, 128_256, 8, 32, true, "meta-llama/Llama-3.2-1B config.json")
            }
            "mixtral-8x7b" => ModelSpec {
                family: Family::Mixtral,
                experts: Some((8, 2)),
                ..llama(
                    32,
                    4096,
                    14_336,
                    32_000,
                    8,
                    32,
                    false,
                    "mistralai/Mixtral-8x7B-v0.1 config.json",
                )
            },
            _ => return None,
        })
    }

    /// What cannot be built, as a key and a reason (None if it can).
    pub fn problem(&self) -> Option<(&'static str, String)> {
        let s = self;
        for (key, v) in [("layers", s.layers), ("hidden", s.hidden), ("heads", s.heads)] {
            if v == 0 {
                return Some((key, "must be given, at least 1".into()));
            }
        }
        if !s.hidden.is_multiple_of(s.heads) {
            return Some((
                "heads",
                format!("{} heads do not divide the hidden size {}", s.heads, s.hidden),
            ));
        }
        if s.kv_heads == 0 || s.kv_heads > s.heads || !s.heads.is_multiple_of(s.kv_heads) {
            return Some((
                "kv_heads",
                format!(
                    "{}: key/value heads divide the {} attention heads (grouped-query attention)",
                    s.kv_heads, s.heads
                ),
            ));
        }
        if s.ffn == 0 {
            return Some(("ffn", "must be at least 1".into()));
        }
        if s.vocab == 0 {
            return Some(("vocab", "must be at least 1".into()));
        }
        if s.vocab_multiple == 0 {
            return Some(("vocab_multiple", "must be at least 1 (1: no padding)".into()));
        }
        if s.position == Position::Learned && s.max_positions == 0 {
            return Some(("max_positions", "learned positions need a table of rows".into()));
        }
        if s.position == Position::Alibi && s.attention != Attention::Flash {
            return Some((
                "position",
                "ALiBi is modelled inside flash attention only (flash-attn's alibi_slopes)".into(),
            ));
        }
        match (s.family, s.experts) {
            (Family::Mixtral, None) => {
                return Some(("experts", "a mixtral model needs experts and top_k".into()));
            }
            (Family::Mixtral, Some((e, k))) if e == 0 || k == 0 || k > e => {
                return Some((
                    "top_k",
                    format!("{k} experts a token of {e}: at least 1, at most the experts"),
                ));
            }
            (Family::Gpt | Family::Llama, Some(_)) => {
                return Some(("experts", "experts are for family = \"mixtral\"".into()));
            }
            _ => {}
        }
        if s.family == Family::Mixtral && !s.activation.gated() {
            return Some(("activation", "Mixtral's experts are SwiGLU MLPs".into()));
        }
        if s.implementation == Implementation::Torchtitan && s.family == Family::Gpt {
            return Some((
                "implementation",
                "torchtitan ships Llama-family models only (family = \"llama\" or \"mixtral\")"
                    .into(),
            ));
        }
        None
    }

    /// The vocabulary rows at tensor-parallel degree `tp` (padded as Megatron pads it).
    pub fn padded_vocab(&self, tp: u64) -> u64 {
        let m = self.vocab_multiple.max(1) * if self.vocab_multiple > 1 { tp.max(1) } else { 1 };
        self.vocab.div_ceil(m) * m
    }

    /// The model at `seq` tokens a sample, with gradients of `grad_dtype`, its vocabulary padded
    /// for tensor-parallel degree `tp`. The specification must have no [`problem`].
    ///
    /// [`problem`]: ModelSpec::problem
    pub fn build(&self, seq: u64, grad_dtype: DataType, tp: u64) -> Model {
        let layers = match self.family {
            Family::Gpt => self.gpt_layers(seq, grad_dtype, tp),
            Family::Llama | Family::Mixtral => self.decoder_layers(seq, grad_dtype, tp),
        };
        let name = if self.name.is_empty() {
            format!(
                "{}-{}x{}",
                match self.family {
                    Family::Gpt => "gpt",
                    Family::Llama => "llama",
                    Family::Mixtral => "mixtral",
                },
                self.layers,
                self.hidden
            )
        } else {
            self.name.clone()
        };
        let model = Model { name, layers, grad_dtype, buffer_bytes: 0 };
        match self.attention {
            // Without blocks (no layers: a specification with a problem) nothing to change.
            Attention::Flash => model,
            _ if self.layers == 0 => model,
            a => with_attention(model, a).expect("every layer count above 0 builds blocks"),
        }
    }

    /// Key/value width.
    fn kv(&self) -> u64 {
        self.kv_heads * (self.hidden / self.heads.max(1))
    }

    /// The MLP's first projection's width (gate and up together when gated).
    fn fc1(&self) -> u64 {
        if self.activation.gated() { 2 * self.ffn } else { self.ffn }
    }

    /// One block's memory-bound work per token and what every tensor-parallel rank repeats of
    /// it (norms, dropouts, residual adds), with `gemms` FLOP-bound kernels forward (flash
    /// attention among them) and `bwd_gemms` backward. A mixture of experts' MLP is added
    /// apart ([`moe_block_mem`]): `with_mlp` false leaves it out.
    fn block_mem(&self, with_mlp: bool) -> (MemoryWork, MemoryWork) {
        let h = self.hidden as f64;
        let kv = self.kv() as f64;
        let f = if with_mlp { self.ffn as f64 } else { 0.0 };
        let norms = self.norm.memory(h).plus(self.norm.memory(h));
        let dropouts =
            if self.dropout { dropout_mem(h).plus(dropout_mem(h)) } else { MemoryWork::default() };
        // Two residual adds (read two, write one); backward the branches' gradients meet.
        let residual = MemoryWork::new(12.0 * h, 12.0 * h, 2, 2);
        // The heads merged back (transpose and copy).
        let merge = MemoryWork::new(4.0 * h, 4.0 * h, 1, 1);
        let act =
            if with_mlp { self.activation.memory(f, self.autocast) } else { MemoryWork::default() };
        // GEMMs: QKV fused (GPT-2's c_attn, Megatron's linear_qkv) or three; o; the MLP's
        // two, or three unfused gated ones; and flash attention.
        let fused_qkv =
            self.family == Family::Gpt || self.implementation == Implementation::Megatron;
        let qkv = if fused_qkv { 1 } else { 3 };
        let mlp = match (with_mlp, self.activation.gated(), fused_qkv) {
            (false, ..) => 0,
            (true, true, false) => 3,
            _ => 2,
        };
        let linears = qkv + 1 + mlp;
        // Bias gradients read each biased GEMM's output gradient: one launch a linear.
        let biases = if self.bias {
            let mlp_widths = if with_mlp { self.fc1() + self.hidden } else { 0 };
            let widths = (self.hidden + 2 * self.kv()) + self.hidden + mlp_widths;
            MemoryWork::new(0.0, 2.0 * widths as f64, 0, linears)
        } else {
            MemoryWork::default()
        };
        let gemms = linears;
        let (stream, cache) = self.autocast_stream(h);
        let replicated = norms.plus(dropouts).plus(residual).plus(stream);
        let rope = self.position.memory(h, kv);
        let work = replicated
            .plus(cache)
            .plus(merge)
            .plus(act)
            .plus(biases)
            .plus(rope)
            .plus(MemoryWork::new(0.0, 0.0, gemms + 1, 2 * gemms + 1))
            .with_gemms(gemms + 1, 2 * gemms + 1);
        let replicated = MemoryWork::new(replicated.fwd, replicated.bwd, 0, 0);
        (work, replicated)
    }

    /// What transformers' GPT-2 moves beyond a 16-bit block under 16-bit autocast (fp32
    /// parameters), per token of `h`: (replicated on tensor-parallel ranks, the attention's
    /// share). Its residual stream is fp32 (the embeddings are, and an fp32 + 16-bit add is
    /// fp32), so each LayerNorm reads and writes fp32 (4h more) and its output is cast to 16
    /// bits before the GEMM (6h), each residual add reads fp32 and 16 bits and writes fp32 (4h
    /// more); backward, each LayerNorm's two kernels read fp32 (14h more), the casts' gradients
    /// and the 16-bit casts of the stream's gradient before each dropout (24h), and the
    /// branches' gradients meet in fp32 (12h more): 28h forward, 64h backward, 2 and 4 more
    /// launches. Its attention concatenates keys and values onto the (empty) cache
    /// (`use_cache`, on by default in training): two copies forward (8h); backward their
    /// gradients' two copies and the concatenation of the three projections' gradients (20h),
    /// 2 and 3 launches. Counted kernel by kernel from a profiled step
    /// (`calibration/data/2026-11-30-h200-hf/gpt2-xl-b8`: 66h + 76f forward and 126h + 118f
    /// backward beyond the biases; the heads' merge, 4h each way, is counted though SDPA's
    /// output needs none). Nothing for other families and implementations.
    fn autocast_stream(&self, h: f64) -> (MemoryWork, MemoryWork) {
        if !self.autocast || self.family != Family::Gpt || self.implementation != Implementation::Hf
        {
            return (MemoryWork::default(), MemoryWork::default());
        }
        (MemoryWork::new(28.0 * h, 64.0 * h, 2, 4), MemoryWork::new(8.0 * h, 20.0 * h, 2, 3))
    }

    /// The embedding layer's work per token: token lookups (read a row, write it; backward a
    /// dense gradient's scatter, 6 launches), learned positions (a second table and the add),
    /// dropout.
    fn embedding_mem(&self) -> MemoryWork {
        let h = self.hidden as f64;
        let mut m = MemoryWork::new(4.0 * h, 6.0 * h, 1, 6);
        if self.position == Position::Learned {
            m = m.plus(MemoryWork::new(10.0 * h, 6.0 * h, 2, 5));
        }
        if self.dropout {
            m = m.plus(dropout_mem(h));
        }
        m
    }

    /// The embedding layer `name`: the token table of `vocab` rows and, with learned positions,
    /// the position table (`tables`' two names), their dense gradients zeroed each backward.
    fn embedding(
        &self,
        name: &str,
        tables: [&str; 2],
        vocab: u64,
        s: u64,
        grad_dtype: DataType,
    ) -> Layer {
        let d = self.hidden;
        let mut emb = vec![t(tables[0], vocab, d)];
        if self.position == Position::Learned {
            emb.push(t(tables[1], self.max_positions, d));
        }
        let rows: u64 = emb.iter().map(|x| x.rows).sum();
        let fixed = (grad_dtype.size() * rows * d) as f64;
        let memory = MemoryWork { bwd_fixed: fixed, ..self.embedding_mem().per_token(s) };
        Layer {
            parallel: Some(self.tp(TpRole::Embedding { vocab }, s)),
            ..Layer::new(name, emb, 0.0, 0.0, memory)
        }
    }

    /// A block's kept activations per sample: 34·s·h, and what eager ops keep beyond it;
    /// transformers' GPT-2 under autocast also keeps its LayerNorms' fp32 inputs (4h more) and
    /// the keys and values copied onto the cache beside the projection they came from (4h).
    fn block_acts(&self, s: u64) -> f64 {
        let (stream, _) = self.autocast_stream(1.0);
        let extra = if stream.fwd > 0.0 { 8.0 * self.hidden as f64 } else { 0.0 };
        transformer_acts(s, self.hidden)
            + (self.activation.extra_acts(self.ffn as f64, self.autocast) + extra) * s as f64
    }

    fn tp(&self, role: TpRole, tokens: u64) -> TpShape {
        TpShape {
            role,
            hidden: self.hidden,
            tokens,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.hidden / self.heads.max(1),
            ffn: self.ffn,
            gated: self.activation.gated(),
            // The experts are the blocks'.
            moe: if matches!(role, TpRole::Block { .. }) { self.experts } else { None },
            attention: Attention::Flash,
        }
    }

    /// GPT-2's layers (transformers' names): embeddings, blocks, the final LayerNorm with the
    /// head and loss.
    fn gpt_layers(&self, s: u64, grad_dtype: DataType, tp: u64) -> Vec<Layer> {
        let (d, vocab) = (self.hidden, self.padded_vocab(tp));
        let sf = s as f64;
        let norm = |name: String| -> Vec<super::models::Tensor> {
            let mut v = vec![t(format!("{name}.weight"), d, 1)];
            if self.norm.has_bias() {
                v.push(t(format!("{name}.bias"), d, 1));
            }
            v
        };
        let linear = |name: String, cin: u64, cout: u64| -> Vec<super::models::Tensor> {
            let mut v = vec![t(format!("{name}.weight"), cin, cout)];
            if self.bias {
                v.push(t(format!("{name}.bias"), cout, 1));
            }
            v
        };
        let mut out = vec![self.embedding(
            "transformer.embeddings",
            ["transformer.wte.weight", "transformer.wpe.weight"],
            vocab,
            s,
            grad_dtype,
        )];
        let (block, replicated) = self.block_mem(true);
        let kv = self.kv();
        for i in 0..self.layers {
            let p = format!("transformer.h.{i}");
            let mut v = norm(format!("{p}.ln_1"));
            v.extend(linear(format!("{p}.attn.c_attn"), d, d + 2 * kv));
            v.extend(linear(format!("{p}.attn.c_proj"), d, d));
            v.extend(norm(format!("{p}.ln_2")));
            v.extend(linear(format!("{p}.mlp.c_fc"), d, self.fc1()));
            v.extend(linear(format!("{p}.mlp.c_proj"), self.ffn, d));
            // Attention: QKV d x (d + 2 kv), o d x d, and the scores (QKᵀ and AV); the MLP's
            // two projections (three when gated).
            let mlp = if self.activation.gated() { 3 } else { 2 } * d * self.ffn;
            let macs = (2 * d * d + 2 * d * kv + mlp + 2 * s * d) as f64 * sf;
            let role = TpRole::Block { replicated: replicated.per_token(s) };
            out.push(Layer {
                parallel: Some(self.tp(role, s)),
                ..Layer::new(p, v, macs, self.block_acts(s), block.per_token(s))
            });
        }
        let mut head = norm("transformer.ln_f".into());
        if !self.tied {
            head.push(t("lm_head.weight", vocab, d));
        }
        let head_mem =
            self.norm.memory(d as f64).plus(self.loss.memory(vocab)).per_token(s).with_gemms(1, 2);
        out.push(Layer {
            parallel: Some(self.tp(TpRole::Head, s)),
            transient_bytes: self.loss.transient(s, vocab),
            ..Layer::new(
                "transformer.ln_f+lm_head",
                head,
                (d * vocab) as f64 * sf,
                self.loss.acts(s, vocab),
                head_mem,
            )
        });
        out
    }

    /// A Llama-family decoder's layers (transformers' names): the embedding, the blocks (a
    /// mixture of experts' MLP in Mixtral's), the final norm, the head and loss.
    fn decoder_layers(&self, s: u64, grad_dtype: DataType, tp: u64) -> Vec<Layer> {
        let (d, ff, vocab, kv) = (self.hidden, self.ffn, self.padded_vocab(tp), self.kv());
        let sf = s as f64;
        let h = d as f64;
        let mut out = vec![self.embedding(
            "model.embed_tokens",
            ["model.embed_tokens.weight", "model.embed_positions.weight"],
            vocab,
            s,
            grad_dtype,
        )];
        let (dense, replicated) = self.block_mem(self.experts.is_none());
        let mem = match self.experts {
            None => dense,
            Some((e, top)) => moe_block_mem(dense, h, ff as f64, e, top),
        };
        let bias = |v: &mut Vec<super::models::Tensor>, name: &str, rows: u64| {
            if self.bias {
                v.push(t(format!("{name}.bias"), rows, 1));
            }
        };
        for i in 0..self.layers {
            let p = format!("model.layers.{i}");
            let a = format!("{p}.self_attn");
            let mut v = Vec::new();
            for (w, rows) in [("q_proj", d), ("k_proj", kv), ("v_proj", kv), ("o_proj", d)] {
                v.push(t(format!("{a}.{w}.weight"), rows, d));
                bias(&mut v, &format!("{a}.{w}"), rows);
            }
            // Attention: q and o d x d, k and v kv x d, and the scores (QKᵀ and AV).
            let attn = 2 * d * d + 2 * d * kv + 2 * s * d;
            let mlp = match self.experts {
                None => {
                    let m = format!("{p}.mlp");
                    let mut ws = vec![("up_proj", ff, d), ("down_proj", d, ff)];
                    if self.activation.gated() {
                        ws.insert(0, ("gate_proj", ff, d));
                    }
                    let n = ws.len() as u64;
                    for (w, rows, cols) in ws {
                        v.push(t(format!("{m}.{w}.weight"), rows, cols));
                        bias(&mut v, &format!("{m}.{w}"), rows);
                    }
                    n * d * ff
                }
                Some((experts, top)) => {
                    let m = format!("{p}.block_sparse_moe");
                    v.push(t(format!("{m}.gate.weight"), experts, d));
                    for e in 0..experts {
                        for (w, rows, cols) in [("w1", ff, d), ("w2", d, ff), ("w3", ff, d)] {
                            let mut x = t(format!("{m}.experts.{e}.{w}.weight"), rows, cols);
                            x.expert = Some(e as u32);
                            v.push(x);
                        }
                    }
                    d * experts + top * 3 * d * ff
                }
            };
            for n in ["input_layernorm", "post_attention_layernorm"] {
                v.push(t(format!("{p}.{n}.weight"), d, 1));
                if self.norm.has_bias() {
                    v.push(t(format!("{p}.{n}.bias"), d, 1));
                }
            }
            let macs = (attn + mlp) as f64 * sf;
            let role = TpRole::Block { replicated: replicated.per_token(s) };
            out.push(Layer {
                parallel: Some(self.tp(role, s)),
                ..Layer::new(p, v, macs, self.block_acts(s), mem.per_token(s))
            });
        }
        let mut norm = vec![t("model.norm.weight", d, 1)];
        if self.norm.has_bias() {
            norm.push(t("model.norm.bias", d, 1));
        }
        out.push(Layer {
            parallel: Some(self.tp(TpRole::Replicated, s)),
            ..Layer::new("model.norm", norm, 0.0, 0.0, self.norm.memory(h).per_token(s))
        });
        // A tied head's weight is the embedding's (its gradient accumulates there).
        let head = if self.tied { Vec::new() } else { vec![t("lm_head.weight", vocab, d)] };
        out.push(Layer {
            parallel: Some(self.tp(TpRole::Head, s)),
            transient_bytes: self.loss.transient(s, vocab),
            ..Layer::new(
                "lm_head",
                head,
                (d * vocab) as f64 * sf,
                self.loss.acts(s, vocab),
                self.loss.memory(vocab).per_token(s).with_gemms(1, 2),
            )
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GPT-2 XL with `activation`, its step under autocast.
    fn gpt2(activation: Activation) -> ModelSpec {
        ModelSpec { activation, autocast: true, ..ModelSpec::preset("gpt2-xl").unwrap() }
    }

    #[test]
    fn a_block_is_the_sum_of_its_parts() {
        // GPT-2 with a one-kernel GELU, as transformers runs it under autocast: 86h forward in
        // 17 launches, 172h backward in 30 (5 and 9 FLOP-bound), of which the fp32 residual
        // stream and the key/value copies are 36h and 84h; HF's gelu_new adds 288h forward in
        // 9 more launches, 448h backward in 14 more, and keeps 12 bytes more a MLP element.
        // In 16 bits (16-bit parameters, no autocast) or run by Megatron, the same block moves
        // 50h and 88h in 13 and 23, and gelu_new adds 128h and 200h in 7 and 10 more, keeping 6
        // bytes more an MLP element.
        let h = 1600.0;
        let sixteen = |a| ModelSpec { autocast: false, ..gpt2(a) };
        let (one16, _) = sixteen(Activation::GeluTanh).block_mem(true);
        let (new16, _) = sixteen(Activation::GeluNew).block_mem(true);
        assert_eq!((one16.fwd, one16.bwd, one16.fwd_kernels), (50.0 * h, 88.0 * h, 13));
        assert_eq!((new16.fwd - one16.fwd, new16.bwd - one16.bwd), (128.0 * h, 200.0 * h));
        let acts16 = sixteen(Activation::GeluNew).block_acts(1024)
            - sixteen(Activation::GeluTanh).block_acts(1024);
        assert_eq!(acts16, 6.0 * 4.0 * h * 1024.0);
        let (one, _) = gpt2(Activation::GeluTanh).block_mem(true);
        assert_eq!(
            (one.fwd, one.bwd, one.fwd_kernels, one.bwd_kernels),
            (86.0 * h, 172.0 * h, 17, 30)
        );
        assert_eq!((one.gemms, one.bwd_gemms), (5, 9));
        let mg =
            ModelSpec { implementation: Implementation::Megatron, ..gpt2(Activation::GeluTanh) };
        let (m, _) = mg.block_mem(true);
        assert_eq!((m.fwd, m.bwd, m.fwd_kernels, m.bwd_kernels), (50.0 * h, 88.0 * h, 13, 23));
        let (new, _) = gpt2(Activation::GeluNew).block_mem(true);
        assert_eq!((new.fwd - one.fwd, new.bwd - one.bwd), (288.0 * h, 448.0 * h));
        assert_eq!((new.fwd_kernels - one.fwd_kernels, new.bwd_kernels - one.bwd_kernels), (9, 14));
        let s = 1024;
        let acts =
            gpt2(Activation::GeluNew).block_acts(s) - gpt2(Activation::GeluTanh).block_acts(s);
        assert_eq!(acts, 12.0 * 4.0 * h * s as f64);
        // HF's Llama: 108h + 20kv + 10ff forward in 39 launches (8 FLOP-bound), 200h + 40kv +
        // 18ff backward in 66 (15).
        let l = ModelSpec::preset("llama-2-70b").unwrap();
        let (h, kv, ff) = (8192.0, 1024.0, 28_672.0);
        let (b, rep) = l.block_mem(true);
        assert_eq!(b.fwd, 108.0 * h + 20.0 * kv + 10.0 * ff);
        assert_eq!(b.bwd, 200.0 * h + 40.0 * kv + 18.0 * ff);
        assert_eq!((b.fwd_kernels, b.bwd_kernels, b.gemms, b.bwd_gemms), (39, 66, 8, 15));
        // Every tensor-parallel rank repeats the norms and residual adds.
        assert_eq!((rep.fwd, rep.bwd), (84.0 * h, 156.0 * h));
    }

    #[test]
    fn each_implementation_runs_its_own_kernels() {
        let shapes = |i| ModelSpec {
            layers: 2,
            hidden: 4096,
            heads: 32,
            kv_heads: 8,
            ffn: 14_336,
            ..ModelSpec::defaults(Family::Llama, i)
        };
        let gemms = |i| {
            let (b, _) = shapes(i).block_mem(true);
            (b.gemms, b.bwd_gemms)
        };
        // q, k, v, o, gate, up, down and flash attention; Megatron fuses QKV and gate-up.
        assert_eq!(gemms(Implementation::Hf), (8, 15));
        assert_eq!(gemms(Implementation::Torchtitan), (8, 15));
        assert_eq!(gemms(Implementation::Megatron), (5, 9));
        // Megatron's fused norms, rotary and SwiGLU move a fraction of eager PyTorch's bytes.
        let (hf, _) = shapes(Implementation::Hf).block_mem(true);
        let (mg, _) = shapes(Implementation::Megatron).block_mem(true);
        assert!(mg.fwd < 0.5 * hf.fwd, "{} vs {}", mg.fwd, hf.fwd);
        // The parameters are the same whoever runs them.
        let params = |i| shapes(i).build(128, DataType::Half, 1).params();
        assert_eq!(params(Implementation::Hf), params(Implementation::Torchtitan));
    }

    #[test]
    fn megatron_pads_the_vocabulary_to_128_times_tp() {
        let g = ModelSpec {
            layers: 1,
            hidden: 1024,
            heads: 16,
            kv_heads: 16,
            ffn: 4096,
            max_positions: 1024,
            ..ModelSpec::defaults(Family::Gpt, Implementation::Megatron)
        };
        assert_eq!(g.padded_vocab(1), 50_304);
        assert_eq!(g.padded_vocab(4), 50_688);
        assert_eq!(ModelSpec { vocab_multiple: 1, ..g.clone() }.padded_vocab(4), 50_257);
        let m = g.build(1024, DataType::Half, 4);
        assert_eq!(m.tensors().next().unwrap().numel, 50_688 * 1024);
        assert_eq!(g.problem(), None);
    }
}
