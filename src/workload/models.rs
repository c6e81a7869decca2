//! Model presets for data-parallel training: every parameter tensor in `model.parameters()`
//! order (tied weights once, where PyTorch registers them first), grouped into layers with their
//! forward cost (`../shared/reference/ddp.md` §3).

use super::DataType;

/// One parameter tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// Its name in `model.named_parameters()`.
    pub name: String,
    /// Elements.
    pub numel: u64,
    /// Its first dimension (`shape[0]`): PowerSGD views a tensor as a rows × (numel / rows)
    /// matrix.
    pub rows: u64,
    /// Its gradient's dtype, where it differs from the model's (DDP buckets by dtype).
    pub dtype: Option<DataType>,
    /// The expert it belongs to, in a mixture-of-experts layer (expert parallelism divides
    /// the experts over its ranks, and their gradients reduce over the expert-data group).
    pub expert: Option<u32>,
}

/// A group of tensors computed together, with its forward cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// Name (a module path).
    pub name: String,
    /// Its parameters, in registration order.
    pub tensors: Vec<Tensor>,
    /// Forward multiply-accumulates per sample (an image, or a sequence).
    pub fwd_macs: f64,
    /// Measured forward and backward time of one micro-batch, s, where given: they replace
    /// the times from `fwd_macs` and the compute rate.
    pub times: Option<(f64, f64)>,
    /// Activation bytes per sample that forward keeps for backward, with 16-bit activations
    /// (mixed precision); fp32 activations take twice as much. An estimate: see
    /// [`Model::act_bytes`] for how the presets count.
    pub act_bytes: f64,
    /// Bytes per sample that exist, beyond the kept activations, only while this layer's
    /// backward starts (16-bit training, as `act_bytes`): the loss's gradient buffers over the
    /// vocabulary. The step's peak holds the largest such transient or a checkpointed block's
    /// recomputation, whichever is larger, on top of everything kept.
    pub transient_bytes: f64,
    /// Its memory-bound work: the bytes its norms, activations, dropout, residual adds and
    /// copies move, and the kernels it launches.
    pub memory: MemoryWork,
    /// How Megatron-LM splits it over a tensor-parallel group, for transformer presets (None:
    /// the layer cannot be split, and tensor and pipeline parallelism are refused).
    pub parallel: Option<TpShape>,
}

/// How Megatron-LM (megatron/core/tensor_parallel) splits a transformer's layer over `tp`
/// ranks, and what it sends between them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TpShape {
    /// Its part in the model.
    pub role: TpRole,
    /// Hidden size: tensor-parallel all-reduces and pipeline sends carry hidden x tokens.
    pub hidden: u64,
    /// Tokens per sample.
    pub tokens: u64,
    /// Attention heads of a block (tensor parallelism divides them: a layer [`split`] over
    /// `tp` ranks carries one rank's).
    ///
    /// [`split`]: super::parallel::split
    pub heads: u64,
    /// Key/value heads (query groups): `heads` without grouped-query attention.
    pub kv_heads: u64,
    /// Each head's width.
    pub head_dim: u64,
    /// The MLP's width (each expert's; a layer split over `tp` ranks carries one rank's).
    pub ffn: u64,
    /// Whether the MLP is gated (SwiGLU's two input projections).
    pub gated: bool,
    /// A mixture of experts: experts in the layer and experts each token goes to.
    pub moe: Option<(u64, u64)>,
    /// How a block computes its attention ([`with_attention`] sets it; flash otherwise).
    pub attention: Attention,
}

/// A layer's part in a Megatron transformer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TpRole {
    /// The input embedding (VocabParallelEmbedding): the `vocab` rows split, one all-reduce of
    /// its output forward; position embeddings stay whole.
    Embedding {
        /// Vocabulary rows.
        vocab: u64,
    },
    /// A transformer block: attention heads and MLP columns split (ColumnParallelLinear, then
    /// RowParallelLinear), two all-reduces forward and two backward; its norms, dropouts and
    /// residual adds (`replicated`) run whole on every rank, or split by sequence under
    /// sequence parallelism. Its wide tensors are split, those of at most `hidden` elements
    /// (norms, the row-parallel biases) kept whole.
    Block {
        /// The memory-bound work every rank repeats.
        replicated: MemoryWork,
    },
    /// A norm between blocks and the head: whole on every rank.
    Replicated,
    /// The output head and its loss (ColumnParallelLinear over the vocabulary, vocab-parallel
    /// cross entropy): one all-reduce backward.
    Head,
}

/// A layer's memory-bound kernels (what its FLOPs leave out) and its kernel launches. Bytes
/// are per sample with 16-bit activations (fp32 activations move twice as much), except
/// `bwd_fixed`, which is per micro-batch in the parameters' dtype.
///
/// How the presets count (PyTorch eager, one kernel per op unless a library fuses it): each
/// elementwise op reads its inputs and writes its output once; a norm in training reads its
/// input twice forward (statistics, then normalise) and its input and gradient twice backward;
/// GEMMs (with their fused bias) and flash attention are FLOP-bound and count here only as
/// launches. Per-preset figures are in [`preset`]'s helpers.
///
/// Left out: a tied embedding's second gradient accumulating into the first, and `no_sync`
/// micro-steps accumulating the dense embedding gradient (about a V×h pass each). In fp32 runs
/// every count doubles, which overstates the parts that are fp32 or int64 already (the loss's
/// fp32 logits, RMSNorm's fp32 intermediates, max-pool's indices): GPT-2 XL's forward by about
/// a fifth.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MemoryWork {
    /// Bytes the forward moves per sample.
    pub fwd: f64,
    /// Bytes the backward moves per sample.
    pub bwd: f64,
    /// Bytes the backward moves per micro-batch whatever its size: a dense embedding
    /// gradient zeroed before its rows are added.
    pub bwd_fixed: f64,
    /// Kernels the forward launches per micro-batch (GEMMs included).
    pub fwd_kernels: u32,
    /// Kernels the backward launches per micro-batch.
    pub bwd_kernels: u32,
    /// The forward's kernels bound by FLOPs (GEMMs, convolutions, fused attention; the
    /// presets count a head's or pooler's GEMMs here, not always among its launches): each
    /// takes the GPU's fixed time per GEMM beyond its FLOPs
    /// ([`super::ddp::GpuFacts::gemm_fixed`]).
    pub gemms: u32,
    /// The backward's: two for each GEMM and convolution (the input's and the weights'
    /// gradients), one for fused attention's backward kernel. A first layer that computes no
    /// input gradient runs `gemms` of them.
    pub bwd_gemms: u32,
}

impl MemoryWork {
    /// Forward `fwd` bytes and backward `bwd` bytes per sample, `kernels` launches forward
    /// and `bwd_kernels` backward.
    pub fn new(fwd: f64, bwd: f64, kernels: u32, bwd_kernels: u32) -> MemoryWork {
        MemoryWork {
            fwd,
            bwd,
            bwd_fixed: 0.0,
            fwd_kernels: kernels,
            bwd_kernels,
            gemms: 0,
            bwd_gemms: 0,
        }
    }

    /// This work with `fwd` FLOP-bound kernels forward and `bwd` backward
    /// ([`MemoryWork::gemms`]).
    pub fn with_gemms(self, fwd: u32, bwd: u32) -> MemoryWork {
        MemoryWork { gemms: fwd, bwd_gemms: bwd, ..self }
    }

    /// Per-token bytes as per-sample bytes for a sequence of `s` tokens (launches and fixed
    /// bytes do not grow with the sequence).
    pub(crate) fn per_token(self, s: u64) -> MemoryWork {
        let s = s as f64;
        MemoryWork { fwd: self.fwd * s, bwd: self.bwd * s, ..self }
    }

    pub(crate) fn plus(self, o: MemoryWork) -> MemoryWork {
        MemoryWork {
            fwd: self.fwd + o.fwd,
            bwd: self.bwd + o.bwd,
            bwd_fixed: self.bwd_fixed + o.bwd_fixed,
            fwd_kernels: self.fwd_kernels + o.fwd_kernels,
            bwd_kernels: self.bwd_kernels + o.bwd_kernels,
            gemms: self.gemms + o.gemms,
            bwd_gemms: self.bwd_gemms + o.bwd_gemms,
        }
    }
}

/// A model: layers in forward order, and the dtype of its gradients.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// Preset or user name.
    pub name: String,
    /// Layers in forward order.
    pub layers: Vec<Layer>,
    /// Gradient dtype (what DDP buckets and reduces).
    pub grad_dtype: DataType,
    /// Bytes of module buffers (batch-norm statistics and the like), which DDP broadcasts from
    /// rank 0 at the start of each synchronised forward.
    pub buffer_bytes: u64,
}

impl Layer {
    /// A layer that keeps `act` bytes per sample for backward and does `memory`'s
    /// memory-bound work, with no tensor-parallel layout.
    pub(crate) fn new(
        name: impl Into<String>,
        tensors: Vec<Tensor>,
        fwd_macs: f64,
        act: f64,
        memory: MemoryWork,
    ) -> Layer {
        Layer { act_bytes: act, memory, ..layer(name, tensors, fwd_macs) }
    }
}

impl Model {
    /// Every tensor in `parameters()` order.
    pub fn tensors(&self) -> impl Iterator<Item = &Tensor> {
        self.layers.iter().flat_map(|l| l.tensors.iter())
    }

    /// A tensor's gradient dtype.
    pub fn dtype_of(&self, t: &Tensor) -> DataType {
        t.dtype.unwrap_or(self.grad_dtype)
    }

    /// A tensor's gradient bytes.
    pub fn grad_bytes(&self, t: &Tensor) -> u64 {
        t.numel * self.dtype_of(t).size()
    }

    /// Total parameters.
    pub fn params(&self) -> u64 {
        self.tensors().map(|t| t.numel).sum()
    }

    /// Forward MACs per sample.
    pub fn fwd_macs(&self) -> f64 {
        self.layers.iter().map(|l| l.fwd_macs).sum()
    }

    /// Activation bytes per sample kept for backward, with 16-bit activations. How the presets
    /// estimate them, with no recomputation:
    ///
    /// * a transformer layer of hidden size h on s tokens keeps 34·s·h bytes (Korthikanti et al.,
    ///   "Reducing Activation Recomputation in Large Transformer Models", 2022, eq. 1, without its
    ///   5·a·s² term: PyTorch's scaled-dot-product attention, flash or memory-efficient, does not
    ///   keep the attention matrix);
    /// * a language-model head over a vocabulary V keeps its logits, 16-bit, and the fp32 copy the
    ///   cross-entropy takes: 6·s·V bytes;
    /// * a convolution block keeps each convolution's output, its batch norm's output and its
    ///   ReLU's output (which is the next convolution's input): 3 × 2 bytes per output element.
    ///
    /// GPT-2 XL's `gelu_new` keeps 12 bytes more an MLP element under autocast, and its fp32
    /// residual stream and key/value copies 8 bytes more a hidden element
    /// (`super::spec::Activation`, `ModelSpec::block_acts`).
    ///
    /// Per-preset figures (per sample): GPT-2 XL 7.39 GB at s = 1024 under autocast (4.87 with
    /// 16-bit parameters), BERT-large 0.130 GB at
    /// s = 128, Llama-7B 9.52 GB at s = 2048, ResNet-50 67 MB at 224 × 224.
    pub fn act_bytes(&self) -> f64 {
        self.layers.iter().map(|l| l.act_bytes).sum()
    }

    /// Memory-bound bytes per sample, forward and backward, with 16-bit activations
    /// ([`MemoryWork`]). The presets': ResNet-50 142 / 208 MB per 224 × 224 image; BERT-large
    /// 233 / 369 MB at s = 128; GPT-2 XL 30.38 / 49.94 GB at s = 1024 under autocast (its eager
    /// `gelu_new`, in fp32, four fifths of it; 14.96 / 23.83 with 16-bit parameters); Llama-7B 43.1 / 79.5 GB
    /// at s = 2048.
    pub fn memory_bytes(&self) -> (f64, f64) {
        let sum = |f: fn(&MemoryWork) -> f64| self.layers.iter().map(|l| f(&l.memory)).sum();
        (sum(|m| m.fwd), sum(|m| m.bwd))
    }
}

/// A tensor of `rows` × `cols` (a vector: `cols` = 1).
pub fn tensor(name: impl Into<String>, rows: u64, cols: u64) -> Tensor {
    Tensor { name: name.into(), numel: rows * cols, rows, dtype: None, expert: None }
}

use tensor as t;

fn layer(name: impl Into<String>, tensors: Vec<Tensor>, fwd_macs: f64) -> Layer {
    Layer {
        name: name.into(),
        tensors,
        fwd_macs,
        times: None,
        act_bytes: 0.0,
        transient_bytes: 0.0,
        memory: MemoryWork::default(),
        parallel: None,
    }
}

/// A transformer layer's kept activations per sample: 34·s·h bytes (see [`Model::act_bytes`]).
pub(crate) fn transformer_acts(s: u64, h: u64) -> f64 {
    34.0 * (s * h) as f64
}

/// A language-model head's logits per sample: 16-bit and an fp32 copy, 6·s·V bytes.
pub(crate) fn logits_acts(s: u64, vocab: u64) -> f64 {
    6.0 * (s * vocab) as f64
}

/// The preset names (`llama-13b` is also accepted for `llama-2-13b`, whose shapes LLaMA-1 13B
/// shares).
pub const PRESETS: [&str; 11] = [
    "resnet50",
    "bert-large",
    "gpt2-xl",
    "llama-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "llama-3.2-1b",
    "mixtral-8x7b",
    "gpt3-175b",
];

/// A transformer preset's usual sequence length (None for other models): the length it was
/// trained at, as its paper or model card gives it (LLaMA-1 2,048, Llama 2 4,096, Llama 3
/// 8,192; Mixtral's training length is not published: 4,096 here).
pub fn default_sequence(name: &str) -> Option<u64> {
    match name {
        "bert-large" => Some(128),
        "gpt2-xl" => Some(1024),
        "llama-7b" => Some(2048),
        "llama-2-13b" | "llama-13b" | "llama-2-70b" | "mixtral-8x7b" => Some(4096),
        "llama-3-8b" | "llama-3-70b" | "llama-3.2-1b" => Some(8192),
        "gpt3-175b" => Some(2048),
        _ => None,
    }
}

/// A preset by name, at sequence length `seq` for the transformers (their usual one if None),
/// with gradients of `grad_dtype`, its step under 16-bit autocast over fp32 parameters or not
/// ([`super::spec::ModelSpec::autocast`]).
pub fn preset(name: &str, seq: Option<u64>, grad_dtype: DataType, autocast: bool) -> Option<Model> {
    // Buffers: ResNet-50's 53 batch norms hold running mean and variance (26,560 channels, fp32)
    // and an int64 counter each; BERT's embeddings hold position_ids and token_type_ids (512
    // int64 each). GPT-2's and Llama's are left out (they depend on the transformers version).
    let gs = grad_dtype.size() as f64;
    let (layers, buffer_bytes) = match name {
        "resnet50" => (resnet50(), 2 * 26_560 * 4 + 53 * 8),
        "bert-large" => (bert_large(seq.or(default_sequence(name))?, gs), 2 * 512 * 8),
        _ => {
            let spec = super::spec::ModelSpec { autocast, ..super::spec::ModelSpec::preset(name)? };
            let mut m = spec.build(seq.or(default_sequence(name))?, grad_dtype, 1);
            m.name = name.to_string();
            return Some(m);
        }
    };
    Some(Model { name: name.to_string(), layers, grad_dtype, buffer_bytes })
}

/// A batch norm's weight and bias.
fn bn(name: &str, ch: u64) -> [Tensor; 2] {
    [t(format!("{name}.weight"), ch, 1), t(format!("{name}.bias"), ch, 1)]
}

/// A `torch.nn.Linear`'s two tensors (weight [out, in]).
fn linear(name: &str, cin: u64, cout: u64) -> [Tensor; 2] {
    [t(format!("{name}.weight"), cout, cin), t(format!("{name}.bias"), cout, 1)]
}

/// torchvision ResNet-50 (v1.5: stride on the 3×3 conv), 224×224 images; one layer per
/// bottleneck block. Conv MACs = k²·c_in·c_out·H_out·W_out; batch norms count 0.
fn resnet50() -> Vec<Layer> {
    // A conv's weight [c_out, c_in, k, k] and its MACs per image.
    let conv = |name: String, k: u64, cin: u64, cout: u64, hw: u64| {
        (t(name, cout, k * k * cin), (k * k * cin * cout * hw * hw) as f64)
    };
    // Kept per output element: the convolution's output, its batch norm's and its ReLU's,
    // 2 bytes each.
    let acts = |elems: u64| 6.0 * elems as f64;
    let (w, macs) = conv("conv1.weight".into(), 7, 3, 64, 112);
    let mut stem = vec![w];
    stem.extend(bn("bn1", 64));
    // The stem: conv, batch norm, ReLU, then a 3×3 max-pool with its int64 indices (forward
    // reads e, writes e/4 and e/4 indices; backward zero-fills e, reads e/4 and the indices,
    // writes e).
    let e = 64 * 112 * 112;
    let pool = MemoryWork::new(4.5 * e as f64, 6.5 * e as f64, 1, 2);
    let stem_mem = conv_mem().plus(bn_relu_mem(e, true)).plus(pool);
    let mut out = vec![Layer::new("stem", stem, macs, acts(e), stem_mem)];
    let mut cin = 64;
    let mut hw = 56; // after the stem's max-pool
    for (stage, (planes, blocks)) in
        [(64u64, 3usize), (128, 4), (256, 6), (512, 3)].into_iter().enumerate()
    {
        for b in 0..blocks {
            let p = format!("layer{}.{b}", stage + 1);
            let out_hw = if b == 0 && stage > 0 { hw / 2 } else { hw };
            let mut tensors = Vec::new();
            let mut macs = 0.0;
            let mut elems = 0;
            let mut mem = MemoryWork::default();
            let convs = [
                (1, cin, planes, hw),
                (3, planes, planes, out_hw),
                (1, planes, 4 * planes, out_hw),
            ];
            for (i, (k, ci, co, h)) in convs.into_iter().enumerate() {
                let (w, m) = conv(format!("{p}.conv{}.weight", i + 1), k, ci, co, h);
                tensors.push(w);
                tensors.extend(bn(&format!("{p}.bn{}", i + 1), co));
                macs += m;
                elems += co * h * h;
                // conv1 and conv2 are followed by a ReLU; conv3's batch norm by the residual add.
                mem = mem.plus(conv_mem()).plus(bn_relu_mem(co * h * h, i < 2));
            }
            let e_out = 4 * planes * out_hw * out_hw;
            mem = mem.plus(residual_mem(cin * hw * hw, e_out));
            if b == 0 {
                let (w, m) = conv(format!("{p}.downsample.0.weight"), 1, cin, 4 * planes, out_hw);
                tensors.push(w);
                tensors.extend(bn(&format!("{p}.downsample.1"), 4 * planes));
                macs += m;
                elems += 4 * planes * out_hw * out_hw;
                mem = mem.plus(conv_mem()).plus(bn_relu_mem(e_out, false));
            }
            out.push(Layer::new(p, tensors, macs, acts(elems), mem));
            cin = 4 * planes;
            hw = out_hw;
        }
    }
    // The head: global average pool over 2048 × 7 × 7 (read forward, written backward), the
    // linear layer, and the loss over 1,000 classes (negligible bytes, 3 launches each way).
    let head = MemoryWork::new(2.0 * 2048.0 * 49.0, 2.0 * 2048.0 * 49.0, 5, 7).with_gemms(1, 2);
    out.push(Layer::new("fc", linear("fc", 2048, 1000).to_vec(), (2048 * 1000) as f64, 0.0, head));
    out
}

/// A convolution's launches: forward 1, backward 2 (data and weight gradients), FLOP-bound.
fn conv_mem() -> MemoryWork {
    MemoryWork::new(0.0, 0.0, 1, 2).with_gemms(1, 2)
}

/// A training batch norm over `e` elements per sample, 2-byte activations, and an in-place
/// ReLU after it if `relu`. The norm reads its input twice and writes once forward (6 bytes per
/// element, 2 launches: statistics, then normalise); backward reads input and gradient for the
/// statistics' gradients, then both again as it writes (10 bytes, 2 launches). The ReLU reads
/// and writes forward (4 bytes); backward reads the gradient and its output and writes (6).
fn bn_relu_mem(e: u64, relu: bool) -> MemoryWork {
    let e = e as f64;
    let bn = MemoryWork::new(6.0 * e, 10.0 * e, 2, 2);
    if relu { bn.plus(MemoryWork::new(4.0 * e, 6.0 * e, 1, 1)) } else { bn }
}

/// A bottleneck's residual add and the ReLU after it over `e_out` elements; backward, the two
/// branches' gradients meet at the block's `e_in`-element input (read two, write one).
fn residual_mem(e_in: u64, e_out: u64) -> MemoryWork {
    let (e_in, e_out) = (e_in as f64, e_out as f64);
    MemoryWork::new(6.0 * e_out + 4.0 * e_out, 6.0 * e_out + 6.0 * e_in, 2, 2)
}

/// HF BertForPreTraining (BERT-large): the decoder weight is the word embedding, and the
/// decoder bias is `cls.predictions.bias`. MACs per sequence of `s` tokens, heads on every token.
fn bert_large(s: u64, gs: f64) -> Vec<Layer> {
    let (d, ff, vocab) = (1024u64, 4096u64, 30_522u64);
    let sf = s as f64;
    let mut emb = vec![
        t("bert.embeddings.word_embeddings.weight", vocab, d),
        t("bert.embeddings.position_embeddings.weight", 512, d),
        t("bert.embeddings.token_type_embeddings.weight", 2, d),
    ];
    emb.extend(bn("bert.embeddings.LayerNorm", d));
    // Three lookups (read a row, write it), two adds, LayerNorm and dropout; backward the
    // dropout, LayerNorm and three embedding backwards, and each dense gradient zeroed.
    let h = d as f64;
    let emb_mem = MemoryWork {
        bwd_fixed: gs * ((vocab + 512 + 2) * d) as f64,
        ..MemoryWork::new(33.0 * h, 33.0 * h, 7, 20).per_token(s)
    };
    let mut out = vec![Layer::new("bert.embeddings", emb, 0.0, 0.0, emb_mem)];
    for i in 0..24 {
        let p = format!("bert.encoder.layer.{i}");
        let mut v = Vec::new();
        for m in [
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
        ] {
            v.extend(linear(&format!("{p}.{m}"), d, d));
        }
        v.extend(bn(&format!("{p}.attention.output.LayerNorm"), d));
        v.extend(linear(&format!("{p}.intermediate.dense"), d, ff));
        v.extend(linear(&format!("{p}.output.dense"), ff, d));
        v.extend(bn(&format!("{p}.output.LayerNorm"), d));
        let macs = (4 * d * d + 2 * d * ff + 2 * s * d) as f64 * sf;
        out.push(Layer::new(p, v, macs, transformer_acts(s, d), bert_block_mem(h).per_token(s)));
    }
    let one_gemm = MemoryWork::default().with_gemms(1, 2);
    let pooler = linear("bert.pooler.dense", d, d).to_vec();
    out.push(Layer::new("bert.pooler", pooler, (d * d) as f64, 0.0, one_gemm));
    let mut head = vec![t("cls.predictions.bias", vocab, 1)];
    head.extend(linear("cls.predictions.transform.dense", d, d));
    head.extend(bn("cls.predictions.transform.LayerNorm", d));
    // The MLM transform's GELU (on h elements: 4h forward, 6h backward) and LayerNorm, then the
    // loss over every token's logits.
    let head_mem = MemoryWork::new(4.0 * h, 6.0 * h, 1, 1)
        .plus(layer_norm_mem(h))
        .plus(loss_mem(vocab))
        .per_token(s)
        .with_gemms(2, 4);
    out.push(Layer::new(
        "cls.predictions",
        head,
        (d * d + d * vocab) as f64 * sf,
        logits_acts(s, vocab),
        head_mem,
    ));
    out.push(Layer::new(
        "cls.seq_relationship",
        linear("cls.seq_relationship", d, 2).to_vec(),
        (2 * d) as f64,
        0.0,
        one_gemm,
    ));
    out
}

/// Megatron-LM's GPT (GPT-2's architecture, tied head) of `layers` blocks of width `hidden`
/// with `heads` attention heads, a `vocab`-row embedding (Megatron pads GPT-2's 50,257 to a
/// multiple of 128 x tp), trained at sequence `seq` (also its positions), with gradients of
/// `grad_dtype`; attention is flash attention (see [`with_attention`]), the loss Megatron's
/// own (`vocab_parallel_cross_entropy`, pass for pass).
pub fn gpt(
    layers: u64,
    hidden: u64,
    heads: u64,
    vocab: u64,
    seq: u64,
    grad_dtype: DataType,
) -> Model {
    megatron_gpt(layers, hidden, heads, vocab, seq).build(seq, grad_dtype, 1)
}

/// As [`gpt`], with the loss as plain PyTorch code computes it (`F.cross_entropy` on the fp32
/// logits, as nanoGPT and `calibration/trace/capture_step.py` do) and, as that script builds
/// it, a head of its own (`nn.Linear(h, vocab, bias=False)`, not tied to the embedding): its
/// weight's gradient and optimizer state count apart.
pub fn gpt_torch_loss(
    layers: u64,
    hidden: u64,
    heads: u64,
    vocab: u64,
    seq: u64,
    grad_dtype: DataType,
) -> Model {
    let spec = super::spec::ModelSpec {
        loss: super::spec::Loss::Fp32,
        tied: false,
        ..megatron_gpt(layers, hidden, heads, vocab, seq)
    };
    spec.build(seq, grad_dtype, 1)
}

/// Megatron-LM's GPT as a specification, its vocabulary already padded.
fn megatron_gpt(
    layers: u64,
    hidden: u64,
    heads: u64,
    vocab: u64,
    seq: u64,
) -> super::spec::ModelSpec {
    use super::spec::{Family, Implementation, ModelSpec};
    ModelSpec {
        layers,
        hidden,
        heads,
        kv_heads: heads,
        ffn: 4 * hidden,
        vocab,
        vocab_multiple: 1,
        max_positions: seq,
        ..ModelSpec::defaults(Family::Gpt, Implementation::Megatron)
    }
}

/// How a transformer block computes its attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Attention {
    /// One fused kernel forward and one backward, the scores never in memory (SDPA's flash
    /// attention, Megatron's `--use-flash-attn` or Transformer Engine's fused attention): what
    /// the presets assume.
    Flash,
    /// Megatron-LM's CoreAttention without flash attention: the scores written to memory by a
    /// batched GEMM, then its fused scale-mask-softmax, dropout and a second batched GEMM.
    Unfused,
}

impl Attention {
    /// The scenario key's values.
    pub const NAMES: &'static str = "\"flash\" or \"unfused\"";

    /// `flash` or `unfused`.
    pub fn parse(s: &str) -> Option<Attention> {
        match s {
            "flash" => Some(Attention::Flash),
            "unfused" => Some(Attention::Unfused),
            _ => None,
        }
    }
}

/// `model` with its transformer blocks' attention computed as `attention` says: unfused adds
/// `core_attention_mem` at each block's heads and tokens (None if the model has no blocks
/// with heads: a preset without a Megatron layout, or custom layers).
pub fn with_attention(mut model: Model, attention: Attention) -> Option<Model> {
    let mut blocks = 0;
    for l in &mut model.layers {
        if let Some(p @ TpShape { role: TpRole::Block { .. }, .. }) = &mut l.parallel {
            blocks += 1;
            p.attention = attention;
            if attention == Attention::Unfused {
                l.memory = l.memory.plus(core_attention_mem(p.heads, p.tokens));
                l.act_bytes += unfused_attention_acts(p.heads, p.tokens);
            }
        }
    }
    (blocks > 0).then_some(model)
}

/// Whether Megatron's fused scale-mask-softmax kernel takes a causal block's scores: 16-bit
/// input, 16 < s <= 4096 with s a multiple of 4, and the score matrices of a micro-batch
/// (`batch` x the rank's `heads`) a multiple of the kernel's batches per thread block (4 from
/// s = 129 up, 8 below). Otherwise `FusedScaleMaskSoftmax` falls back to PyTorch's ops
/// (Megatron-LM's `FusedScaleMaskSoftmax.is_kernel_available` and the CUDA extension's
/// `get_batch_per_block`, as we know them: that source is not among the repositories collsim
/// reads). Tensor parallelism divides the heads, so a layout alone can cross the line: 16
/// heads at tp 8 and one sample a micro-batch leave two matrices, and the slower path.
pub fn fused_softmax_fits(batch: u64, heads: u64, s: u64, sixteen_bit: bool) -> bool {
    let per_block = if s <= 128 { 8 } else { 4 };
    sixteen_bit
        && 16 < s
        && s <= 4096
        && s.is_multiple_of(4)
        && (batch * heads).is_multiple_of(per_block)
}

/// `layer`'s memory-bound work for a micro-batch of `batch` samples: its own, and where an
/// unfused-attention block's scores miss the fused softmax ([`fused_softmax_fits`]), what
/// PyTorch's ops add. In 16-bit training the scores are cast to fp32 for the softmax (Megatron
/// runs it in fp32 under its default query-key layer scaling), scaled, masked in place,
/// soft-maxed and cast back: read and write 36 bytes a score in 5 kernels where the fused
/// kernel moves 4 in 1; backward each op's gradient, 40 bytes in 5 kernels for the fused
/// kernel's 6 in 1. In fp32 training (no casts) the scale, mask and softmax move 24 bytes
/// forward and 28 backward where the fused kernel's traffic, doubled, counts 8 and 12, in two
/// more kernels each way. The fp32 probabilities kept for backward are left out of memory.
pub fn layer_memory_work(layer: &Layer, batch: u64, sixteen_bit: bool) -> MemoryWork {
    let Some(p) = layer.parallel else { return layer.memory };
    if p.attention != Attention::Unfused
        || !matches!(p.role, TpRole::Block { .. })
        || fused_softmax_fits(batch, p.heads, p.tokens, sixteen_bit)
    {
        return layer.memory;
    }
    let e = (p.heads * p.tokens) as f64;
    // Bytes counted as 16-bit activations: fp32 runs double them.
    let extra = if sixteen_bit {
        MemoryWork::new(32.0 * e, 34.0 * e, 4, 4)
    } else {
        MemoryWork::new(8.0 * e, 8.0 * e, 2, 2)
    };
    layer.memory.plus(extra.per_token(p.tokens))
}

/// The memory traffic that unfused attention adds to a block, per token, at sequence `s`:
/// each token's `heads` x `s` scores (fp16, computed whole, causal mask or not). Forward:
/// baddbmm writes them (2 bytes), the fused scale-mask-softmax reads and writes (4), dropout
/// reads, writes and stores a 1-byte mask (5), the bmm with the values reads them (2): 13
/// bytes in 3 launches beyond flash attention's one. Backward: the gradient of the
/// probabilities written (2), the values' gradient reading the probabilities (2), dropout's
/// backward (5), softmax's backward reading output and gradient and writing (6), the query
/// and key gradients reading it (4): 19 bytes in 5 launches beyond flash's one.
/// What unfused attention keeps for backward per sample, beyond a block's 34·s·h bytes: the
/// softmax's output (2 bytes a score), dropout's mask (1) and output (2), the 5·a·s² of
/// Korthikanti et al.'s s·b·h·(34 + 5·a·s/h) per layer.
fn unfused_attention_acts(heads: u64, s: u64) -> f64 {
    5.0 * (heads * s * s) as f64
}

fn core_attention_mem(heads: u64, s: u64) -> MemoryWork {
    let e = (heads * s) as f64;
    // Two batched GEMMs where flash attention runs one kernel, four backward for its one: one
    // FLOP-bound kernel more forward, three backward.
    MemoryWork::new(13.0 * e, 19.0 * e, 3, 5).per_token(s).with_gemms(1, 3)
}

/// A LayerNorm over `h` 16-bit elements per token: forward reads and writes (4h bytes, one
/// launch); backward reads input and gradient for the input's gradient and again for the
/// weight's (10h, two launches).
pub(crate) fn layer_norm_mem(h: f64) -> MemoryWork {
    MemoryWork::new(4.0 * h, 10.0 * h, 1, 2)
}

/// HF's LlamaRMSNorm over `h` elements per token, op by op: cast to fp32 (6h bytes), square
/// (8h), mean (4h), add eps and rsqrt (per token), multiply (8h), cast back (6h), times the
/// weight (4h): 36h in 8 launches; backward about twice the traffic in 14.
pub(crate) fn rms_norm_mem(h: f64) -> MemoryWork {
    MemoryWork::new(36.0 * h, 72.0 * h, 8, 14)
}

/// The loss over a vocabulary of `v` per token as HF computes it: the logits cast to fp32
/// (read 2, write 4 bytes per logit), log-softmax (read twice, write once: 12), NLL; backward
/// zero-fills the fp32 gradient (4), log-softmax's backward (12), the cast back (6).
pub(crate) fn loss_mem(v: u64) -> MemoryWork {
    let v = v as f64;
    MemoryWork::new(18.0 * v, 22.0 * v, 4, 6)
}

/// The loss over a vocabulary of `v` per token as Megatron-LM computes it: the logits cast to
/// fp32 (6 bytes per logit), then `vocab_parallel_cross_entropy`'s passes over them in place:
/// max (4), subtract the max (8), exp (8), sum (4), divide by the sum (8); backward multiplies
/// the saved softmax by the loss's gradient in place (8) and casts it back (6): 38 bytes forward
/// in 21 launches and 14 backward in 8 (the per-token ones small). A profiled step of our
/// re-implementation on an H200 runs exactly these eight passes
/// (`calibration/data/2026-11-27-h200-megatron`); PyTorch's `F.cross_entropy` ([`loss_mem`])
/// moves 40 bytes a logit where this moves 52.
pub(crate) fn megatron_loss_mem(v: u64) -> MemoryWork {
    let v = v as f64;
    MemoryWork::new(38.0 * v, 14.0 * v, 21, 8)
}

/// An HF BERT block per token (post-LN, SDPA attention, dropout 0.1, exact GELU as one kernel):
/// merge 4h, two dropouts 10h, two residual adds 12h, two LayerNorms 8h, GELU on 4h elements
/// 16h: 50h forward in 15 launches (6 GEMMs and SDPA's attention: 7 FLOP-bound). Backward:
/// merge 4h, dropouts 10h, residual gradients 12h, LayerNorms 20h, GELU 24h, bias gradients
/// 18h: 88h in 30 launches.
fn bert_block_mem(h: f64) -> MemoryWork {
    MemoryWork::new(50.0 * h, 88.0 * h, 15, 30).with_gemms(7, 13)
}

/// One expert's FLOP-bound kernels (forward, backward): its three GEMMs (w1, w3, w2), each
/// with its input and weight gradients backward.
pub const EXPERT_GEMMS: (u32, u32) = (3, 6);

/// A Mixtral block per token: `dense`, the Llama block's attention and norms without its MLP
/// ([`super::spec::ModelSpec`]), then the router (a
/// softmax and top-k over `experts` logits, per token), each token copied to its `top` experts
/// and back (gathered: 6h bytes per expert; combined with its weight and added: 6h), and
/// `top` experts' SwiGLU (10·ff each). HF's MixtralSparseMoeBlock loops over the experts: about
/// 8 launches each forward, 16 backward, 3 of them GEMMs, and the router's GEMM.
pub(crate) fn moe_block_mem(
    dense: MemoryWork,
    h: f64,
    ff: f64,
    experts: u64,
    top: u64,
) -> MemoryWork {
    let top = top as f64;
    let routed = MemoryWork::new(
        top * (12.0 * h + 10.0 * ff),
        top * (24.0 * h + 18.0 * ff),
        4 + 8 * experts as u32,
        8 + 16 * experts as u32,
    )
    .with_gemms(1 + EXPERT_GEMMS.0 * experts as u32, 2 + EXPERT_GEMMS.1 * experts as u32);
    dense.plus(routed)
}

/// Under fp8, what Transformer Engine's recipe (as Megatron-Core and NeMo run it) changes in a
/// transformer block for one sample, as one rank holds it (`shape` split over tensor and
/// context parallelism): (the MACs of its linear layers, which run in fp8; bytes its casts move
/// forward; backward). The attention's scores, the head and the embedding stay 16-bit (TE's
/// fp8 attention is off by default). Casts: the inputs of the output projection and of FC2 are
/// cast to fp8 with their transpose for the weight gradients (2 bytes read, 2 written an
/// element; the norms before QKV and FC1 write fp8 themselves, TE's LayerNormLinear), and
/// backward each linear's output gradient likewise. The weights' casts (once a step) are left
/// out. None for a layer that is not a block.
pub fn fp8_linears(shape: &TpShape) -> Option<(f64, f64, f64)> {
    if !matches!(shape.role, TpRole::Block { .. }) {
        return None;
    }
    let (d, hd) = (shape.hidden as f64, shape.head_dim as f64);
    let q = shape.heads as f64 * hd;
    let kv = shape.kv_heads as f64 * hd;
    let gate = if shape.gated { 2.0 } else { 1.0 };
    // A token's expert GEMMs: its `top` experts', else the dense MLP's.
    let routed = shape.moe.map_or(1.0, |(_, top)| top as f64);
    let f = shape.ffn as f64;
    let tokens = shape.tokens as f64;
    let macs = d * (q + 2.0 * kv) + q * d + routed * (d * f * gate + f * d);
    let fwd = 4.0 * (q + routed * f);
    let bwd = 4.0 * ((q + 2.0 * kv) + d + routed * (f * gate + d));
    Some((macs * tokens, fwd * tokens, bwd * tokens))
}

#[cfg(test)]
mod tests {
    #[test]
    fn under_fp8_a_blocks_linear_layers_are_its_macs_but_the_attention_scores() {
        for (name, seq) in [("llama-3-8b", 8192u64), ("gpt2-xl", 1024), ("mixtral-8x7b", 4096)] {
            let m = preset(name, Some(seq), DataType::Float, false).unwrap();
            let block = m
                .layers
                .iter()
                .find(|l| matches!(l.parallel.map(|p| p.role), Some(TpRole::Block { .. })));
            let block = block.unwrap();
            let shape = block.parallel.unwrap();
            let (lin, fwd, bwd) = fp8_linears(&shape).unwrap();
            // The scores: QKᵀ and AV, s x s x hidden MACs each.
            let scores = 2.0 * (seq * seq * shape.hidden) as f64;
            // A mixture of experts' router (hidden x experts a token) stays 16-bit too.
            let router = shape.moe.map_or(0.0, |(e, _)| (seq * shape.hidden * e) as f64);
            let rest = block.fwd_macs - lin;
            assert!((rest / (scores + router) - 1.0).abs() < 1e-9, "{name}: {rest} vs {scores}");
            assert!(fwd > 0.0 && bwd > fwd, "{name}");
        }
        let head = preset("llama-3-8b", Some(8192), DataType::Float, false).unwrap();
        let head = head.layers.last().unwrap().parallel.unwrap();
        assert!(fp8_linears(&head).is_none());
    }

    use super::*;

    #[test]
    fn presets_match_the_reference_counts() {
        // ddp.md §3.1-3.4: total parameters, tensors, forward MACs per sample / token.
        let cases = [
            ("resnet50", 25_557_032u64, 161usize, 4.089e9, 1.0),
            ("bert-large", 336_226_108, 398, 24.0 * 12.85e6 + 32.3e6, 128.0),
            ("gpt2-xl", 1_557_611_200, 580, 48.0 * 34.0e6 + 80.4e6, 1024.0),
            ("llama-7b", 6_738_415_616, 291, 32.0 * 219.15e6 + 131.07e6, 2048.0),
        ];
        for (name, params, tensors, macs, per) in cases {
            let m = preset(name, None, DataType::Float, false).unwrap();
            assert_eq!(m.params(), params, "{name}");
            assert_eq!(m.tensors().count(), tensors, "{name}");
            let got = m.fwd_macs() / per;
            assert!((got / macs - 1.0).abs() < 0.005, "{name}: {got} vs {macs}");
        }
        assert!(preset("gpt5", None, DataType::Float, false).is_none());
    }

    #[test]
    fn the_larger_presets_match_their_published_parameter_counts() {
        // Totals from the models' HF safetensors indexes / model cards (GPT-3 from its paper's
        // shapes: 12·d²+13·d per layer, and the embeddings); tensors as `named_parameters()`
        // lists them. Forward MACs per token at sequence s: the active weights (all but the
        // input embedding; for Mixtral its attention, router and 2 of 8 experts) plus the
        // attention scores, 2·s·d per layer.
        let cases = [
            ("llama-2-13b", 13_015_864_320u64, 363usize, 12_851.6e6, 4096.0, 40.0, 5120.0),
            ("llama-13b", 13_015_864_320, 363, 12_851.6e6, 4096.0, 40.0, 5120.0),
            ("llama-2-70b", 68_976_648_192, 723, 68_713.2e6, 4096.0, 80.0, 8192.0),
            ("llama-3-8b", 8_030_261_248, 291, 7_504.7e6, 8192.0, 32.0, 4096.0),
            ("llama-3-70b", 70_553_706_496, 723, 69_501.7e6, 8192.0, 80.0, 8192.0),
            ("llama-3.2-1b", 1_235_814_400, 146, 1_235.7e6, 8192.0, 16.0, 2048.0),
            ("mixtral-8x7b", 46_702_792_704, 995, 12_748.6e6, 4096.0, 32.0, 4096.0),
            ("gpt3-175b", 174_604_259_328, 1156, 174_563.7e6, 2048.0, 96.0, 12_288.0),
        ];
        for (name, params, tensors, active, seq, layers, d) in cases {
            let m = preset(name, None, DataType::Float, false).unwrap();
            assert_eq!(m.params(), params, "{name}");
            assert_eq!(m.tensors().count(), tensors, "{name}");
            let macs = m.fwd_macs() / seq;
            let want = active + 2.0 * seq * d * layers;
            assert!((macs / want - 1.0).abs() < 0.002, "{name}: {macs} vs {want}");
        }
    }

    #[test]
    fn preset_memory_traffic_matches_the_documented_counts() {
        // Model::memory_bytes's figures, per sample, to 1 %.
        for (name, fwd, bwd) in [
            ("resnet50", 0.142, 0.208),
            ("bert-large", 0.233, 0.369),
            ("gpt2-xl", 30.38, 49.94),
            ("llama-7b", 43.1, 79.5),
        ] {
            let (f, b) = preset(name, None, DataType::Float, true).unwrap().memory_bytes();
            assert!((f / 1e9 / fwd - 1.0).abs() < 0.01, "{name}: forward {f}");
            assert!((b / 1e9 / bwd - 1.0).abs() < 0.01, "{name}: backward {b}");
        }
    }

    #[test]
    fn preset_activations_match_the_documented_estimates() {
        // The figures Model::act_bytes documents, per sample, to 2 %.
        for (name, gb) in
            [("gpt2-xl", 7.39), ("bert-large", 0.130), ("llama-7b", 9.52), ("resnet50", 0.0667)]
        {
            let m = preset(name, None, DataType::Float, true).unwrap();
            let got = m.act_bytes() / 1e9;
            assert!((got / gb - 1.0).abs() < 0.02, "{name}: {got} GB vs {gb}");
        }
    }

    #[test]
    fn unfused_attention_adds_the_scores_traffic_to_each_block_and_splits_it_by_heads() {
        // GPT of 2 blocks, 1,024 wide, 16 heads, at 1,024 tokens: each block gains 13 bytes
        // forward and 19 backward per score, 16 x 1,024 x 1,024 of them, and 8 launches.
        let flash = gpt(2, 1024, 16, 50_304, 1024, DataType::Half);
        let unfused = with_attention(flash.clone(), Attention::Unfused).unwrap();
        let scores = (16 * 1024 * 1024) as f64;
        for (a, b) in flash.layers.iter().zip(&unfused.layers) {
            let block = matches!(a.parallel.map(|p| p.role), Some(TpRole::Block { .. }));
            let (df, db) = (b.memory.fwd - a.memory.fwd, b.memory.bwd - a.memory.bwd);
            let want = if block { (13.0 * scores, 19.0 * scores) } else { (0.0, 0.0) };
            assert_eq!((df, db), want, "{}", a.name);
            let launches = b.memory.fwd_kernels + b.memory.bwd_kernels;
            let before = a.memory.fwd_kernels + a.memory.bwd_kernels;
            assert_eq!(launches - before, if block { 8 } else { 0 });
            // Two batched GEMMs where flash attention runs one kernel (backward four for one).
            let more = (b.memory.gemms - a.memory.gemms, b.memory.bwd_gemms - a.memory.bwd_gemms);
            assert_eq!(more, if block { (1, 3) } else { (0, 0) }, "{}", a.name);
        }
        // Split over 4 tensor-parallel ranks (4 heads each), a rank's share is a quarter.
        let (a, b) = (&flash.layers[1], &unfused.layers[1]);
        let split = |l: &Layer| crate::workload::parallel::split(l, 4, false).memory.fwd;
        assert!((split(b) - split(a) - 13.0 * scores / 4.0).abs() < 1.0);
        // Flash changes nothing; a model without blocks has no attention to change.
        assert_eq!(with_attention(flash.clone(), Attention::Flash).unwrap().layers, flash.layers);
        let resnet = preset("resnet50", None, DataType::Float, false).unwrap();
        assert!(with_attention(resnet, Attention::Unfused).is_none());
    }

    #[test]
    fn each_layer_counts_its_flop_bound_kernels() {
        // Forward GEMMs (and fused attention) per layer, whatever the tensor-parallel split.
        let gemms = |name: &str| -> Vec<u32> {
            let m = preset(name, None, DataType::Half, false).unwrap();
            let mut v: Vec<u32> = m.layers.iter().map(|l| l.memory.gemms).collect();
            v.dedup();
            v
        };
        // Embedding, blocks (4 GEMMs and flash attention), the head's logits.
        assert_eq!(gemms("gpt2-xl"), [0, 5, 1]);
        // Embedding, blocks (q, k, v, o, gate, up, down and flash attention), norm, head.
        assert_eq!(gemms("llama-7b"), [0, 8, 0, 1]);
        // Mixtral: q, k, v, o, flash attention, the router and 3 GEMMs for each of 8 experts.
        assert_eq!(gemms("mixtral-8x7b"), [0, 30, 0, 1]);
        // BERT: 6 GEMMs and SDPA a block; pooler; the MLM transform and decoder; NSP.
        assert_eq!(gemms("bert-large"), [0, 7, 1, 2, 1]);
        // ResNet-50: the stem, bottlenecks of 3 convolutions (4 with the downsample), fc.
        assert_eq!(gemms("resnet50")[..3], [1, 4, 3]);
        // Backward two for each GEMM, one for fused attention's backward.
        let llama = preset("llama-7b", None, DataType::Half, false).unwrap();
        let block = crate::workload::parallel::split(&llama.layers[1], 8, true).memory;
        assert_eq!((block.gemms, block.bwd_gemms), (8, 15));
        let gpt = preset("gpt2-xl", None, DataType::Half, false).unwrap();
        assert_eq!(
            (gpt.layers[1].memory.bwd_gemms, gpt.layers.last().unwrap().memory.bwd_gemms),
            (9, 2)
        );
    }

    #[test]
    fn scores_that_miss_the_fused_softmax_pay_pytorchs_ops() {
        // Megatron's causal kernel takes a multiple of 4 score matrices above 128 tokens, of 8
        // up to 128, in 16 bits, up to 4,096 tokens.
        for (batch, heads, s, half, fits) in [
            (1, 16, 1024, true, true),
            (1, 2, 1024, true, false),
            (2, 2, 1024, true, true),
            (3, 3, 1024, true, false),
            (1, 4, 128, true, false),
            (2, 4, 128, true, true),
            (1, 16, 8192, true, false),
            (1, 16, 1022, true, false),
            (1, 16, 1024, false, false),
        ] {
            assert_eq!(fused_softmax_fits(batch, heads, s, half), fits, "{batch} x {heads} at {s}");
        }
        // A 16-head block split over 8 ranks keeps 2 heads: one sample a micro-batch falls
        // back (32 more bytes a score forward, 34 backward, 4 more launches each way), two do
        // not; flash attention never has scores to soft-max.
        let flash = gpt(2, 1024, 16, 50_304, 1024, DataType::Half);
        let unfused = with_attention(flash.clone(), Attention::Unfused).unwrap();
        let block = crate::workload::parallel::split(&unfused.layers[1], 8, false);
        let scores = (2 * 1024 * 1024) as f64;
        let (one, two) = (layer_memory_work(&block, 1, true), layer_memory_work(&block, 2, true));
        assert_eq!(two, block.memory);
        assert_eq!((one.fwd - two.fwd, one.bwd - two.bwd), (32.0 * scores, 34.0 * scores));
        assert_eq!((one.fwd_kernels, one.bwd_kernels), (two.fwd_kernels + 4, two.bwd_kernels + 4));
        let fp32 = layer_memory_work(&block, 2, false);
        assert_eq!((fp32.fwd - two.fwd, fp32.bwd_kernels - two.bwd_kernels), (8.0 * scores, 2));
        let flash_block = crate::workload::parallel::split(&flash.layers[1], 8, false);
        assert_eq!(layer_memory_work(&flash_block, 1, true), flash_block.memory);
    }
}
