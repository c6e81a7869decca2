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
    /// Per-preset figures (per sample): GPT-2 XL 2.98 GB at s = 1024, BERT-large 0.130 GB at
    /// s = 128, Llama-7B 9.52 GB at s = 2048, ResNet-50 67 MB at 224 × 224.
    pub fn act_bytes(&self) -> f64 {
        self.layers.iter().map(|l| l.act_bytes).sum()
    }
}

/// A tensor of `rows` × `cols` (a vector: `cols` = 1).
pub fn tensor(name: impl Into<String>, rows: u64, cols: u64) -> Tensor {
    Tensor { name: name.into(), numel: rows * cols, rows, dtype: None }
}

use tensor as t;

fn layer(name: impl Into<String>, tensors: Vec<Tensor>, fwd_macs: f64) -> Layer {
    Layer { name: name.into(), tensors, fwd_macs, times: None, act_bytes: 0.0 }
}

/// A layer that keeps `act_bytes` per sample for backward.
fn layer_acts(name: impl Into<String>, tensors: Vec<Tensor>, fwd_macs: f64, act: f64) -> Layer {
    Layer { act_bytes: act, ..layer(name, tensors, fwd_macs) }
}

/// A transformer layer's kept activations per sample: 34·s·h bytes (see [`Model::act_bytes`]).
fn transformer_acts(s: u64, h: u64) -> f64 {
    34.0 * (s * h) as f64
}

/// A language-model head's logits per sample: 16-bit and an fp32 copy, 6·s·V bytes.
fn logits_acts(s: u64, vocab: u64) -> f64 {
    6.0 * (s * vocab) as f64
}

/// The preset names.
pub const PRESETS: [&str; 4] = ["resnet50", "bert-large", "gpt2-xl", "llama-7b"];

/// A transformer preset's usual sequence length (None for other models).
pub fn default_sequence(name: &str) -> Option<u64> {
    match name {
        "bert-large" => Some(128),
        "gpt2-xl" => Some(1024),
        "llama-7b" => Some(2048),
        _ => None,
    }
}

/// A preset by name, at sequence length `seq` for the transformers (their usual one if None),
/// with gradients of `grad_dtype`.
pub fn preset(name: &str, seq: Option<u64>, grad_dtype: DataType) -> Option<Model> {
    // Buffers: ResNet-50's 53 batch norms hold running mean and variance (26,560 channels, fp32)
    // and an int64 counter each; BERT's embeddings hold position_ids and token_type_ids (512
    // int64 each). GPT-2's and Llama's are left out (they depend on the transformers version).
    let (layers, buffer_bytes) = match name {
        "resnet50" => (resnet50(), 2 * 26_560 * 4 + 53 * 8),
        "bert-large" => (bert_large(seq.or(default_sequence(name))?), 2 * 512 * 8),
        "gpt2-xl" => (gpt2_xl(seq.or(default_sequence(name))?), 0),
        "llama-7b" => (llama_7b(seq.or(default_sequence(name))?), 0),
        _ => return None,
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

/// A GPT-2 `Conv1D`'s two tensors (weight [in, out]).
fn conv1d(name: &str, cin: u64, cout: u64) -> [Tensor; 2] {
    [t(format!("{name}.weight"), cin, cout), t(format!("{name}.bias"), cout, 1)]
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
    let mut out = vec![layer_acts("stem", stem, macs, acts(64 * 112 * 112))];
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
            }
            if b == 0 {
                let (w, m) = conv(format!("{p}.downsample.0.weight"), 1, cin, 4 * planes, out_hw);
                tensors.push(w);
                tensors.extend(bn(&format!("{p}.downsample.1"), 4 * planes));
                macs += m;
                elems += 4 * planes * out_hw * out_hw;
            }
            out.push(layer_acts(p, tensors, macs, acts(elems)));
            cin = 4 * planes;
            hw = out_hw;
        }
    }
    out.push(layer("fc", linear("fc", 2048, 1000).to_vec(), (2048 * 1000) as f64));
    out
}

/// HF BertForPreTraining (BERT-large): the decoder weight is the word embedding, and the
/// decoder bias is `cls.predictions.bias`. MACs per sequence of `s` tokens, heads on every token.
fn bert_large(s: u64) -> Vec<Layer> {
    let (d, ff, vocab) = (1024u64, 4096u64, 30_522u64);
    let sf = s as f64;
    let mut emb = vec![
        t("bert.embeddings.word_embeddings.weight", vocab, d),
        t("bert.embeddings.position_embeddings.weight", 512, d),
        t("bert.embeddings.token_type_embeddings.weight", 2, d),
    ];
    emb.extend(bn("bert.embeddings.LayerNorm", d));
    let mut out = vec![layer("bert.embeddings", emb, 0.0)];
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
        out.push(layer_acts(p, v, macs, transformer_acts(s, d)));
    }
    out.push(layer("bert.pooler", linear("bert.pooler.dense", d, d).to_vec(), (d * d) as f64));
    let mut head = vec![t("cls.predictions.bias", vocab, 1)];
    head.extend(linear("cls.predictions.transform.dense", d, d));
    head.extend(bn("cls.predictions.transform.LayerNorm", d));
    out.push(layer_acts(
        "cls.predictions",
        head,
        (d * d + d * vocab) as f64 * sf,
        logits_acts(s, vocab),
    ));
    out.push(layer(
        "cls.seq_relationship",
        linear("cls.seq_relationship", d, 2).to_vec(),
        (2 * d) as f64,
    ));
    out
}

/// HF GPT2LMHeadModel (GPT-2 XL); the LM head is the token embedding.
fn gpt2_xl(s: u64) -> Vec<Layer> {
    let (d, vocab, ctx) = (1600u64, 50_257u64, 1024u64);
    let sf = s as f64;
    let emb = vec![t("transformer.wte.weight", vocab, d), t("transformer.wpe.weight", ctx, d)];
    let mut out = vec![layer("transformer.embeddings", emb, 0.0)];
    for i in 0..48 {
        let p = format!("transformer.h.{i}");
        let mut v = bn(&format!("{p}.ln_1"), d).to_vec();
        v.extend(conv1d(&format!("{p}.attn.c_attn"), d, 3 * d));
        v.extend(conv1d(&format!("{p}.attn.c_proj"), d, d));
        v.extend(bn(&format!("{p}.ln_2"), d));
        v.extend(conv1d(&format!("{p}.mlp.c_fc"), d, 4 * d));
        v.extend(conv1d(&format!("{p}.mlp.c_proj"), 4 * d, d));
        let macs = (12 * d * d + 2 * s * d) as f64 * sf;
        out.push(layer_acts(p, v, macs, transformer_acts(s, d)));
    }
    out.push(layer_acts(
        "transformer.ln_f+lm_head",
        bn("transformer.ln_f", d).to_vec(),
        (d * vocab) as f64 * sf,
        logits_acts(s, vocab),
    ));
    out
}

/// Llama-7B (HF LlamaForCausalLM): no biases, RMSNorm, SwiGLU, untied head.
fn llama_7b(s: u64) -> Vec<Layer> {
    let (d, ff, vocab) = (4096u64, 11_008u64, 32_000u64);
    let sf = s as f64;
    let mut out =
        vec![layer("model.embed_tokens", vec![t("model.embed_tokens.weight", vocab, d)], 0.0)];
    for i in 0..32 {
        let p = format!("model.layers.{i}");
        let mut v: Vec<Tensor> = ["q_proj", "k_proj", "v_proj", "o_proj"]
            .iter()
            .map(|m| t(format!("{p}.self_attn.{m}.weight"), d, d))
            .collect();
        v.push(t(format!("{p}.mlp.gate_proj.weight"), ff, d));
        v.push(t(format!("{p}.mlp.up_proj.weight"), ff, d));
        v.push(t(format!("{p}.mlp.down_proj.weight"), d, ff));
        v.push(t(format!("{p}.input_layernorm.weight"), d, 1));
        v.push(t(format!("{p}.post_attention_layernorm.weight"), d, 1));
        let macs = (4 * d * d + 3 * d * ff + 2 * s * d) as f64 * sf;
        out.push(layer_acts(p, v, macs, transformer_acts(s, d)));
    }
    out.push(layer("model.norm", vec![t("model.norm.weight", d, 1)], 0.0));
    out.push(layer_acts(
        "lm_head",
        vec![t("lm_head.weight", vocab, d)],
        (d * vocab) as f64 * sf,
        logits_acts(s, vocab),
    ));
    out
}

#[cfg(test)]
mod tests {
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
            let m = preset(name, None, DataType::Float).unwrap();
            assert_eq!(m.params(), params, "{name}");
            assert_eq!(m.tensors().count(), tensors, "{name}");
            let got = m.fwd_macs() / per;
            assert!((got / macs - 1.0).abs() < 0.005, "{name}: {got} vs {macs}");
        }
        assert!(preset("gpt5", None, DataType::Float).is_none());
    }

    #[test]
    fn preset_activations_match_the_documented_estimates() {
        // The figures Model::act_bytes documents, per sample, to 2 %.
        for (name, gb) in
            [("gpt2-xl", 2.98), ("bert-large", 0.130), ("llama-7b", 9.52), ("resnet50", 0.0667)]
        {
            let m = preset(name, None, DataType::Float).unwrap();
            let got = m.act_bytes() / 1e9;
            assert!((got / gb - 1.0).abs() < 0.02, "{name}: {got} GB vs {gb}");
        }
    }
}
