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
}

impl Model {
    /// Every tensor in `parameters()` order.
    pub fn tensors(&self) -> impl Iterator<Item = &Tensor> {
        self.layers.iter().flat_map(|l| l.tensors.iter())
    }

    /// Total parameters.
    pub fn params(&self) -> u64 {
        self.tensors().map(|t| t.numel).sum()
    }

    /// Forward MACs per sample.
    pub fn fwd_macs(&self) -> f64 {
        self.layers.iter().map(|l| l.fwd_macs).sum()
    }
}

fn t(name: impl Into<String>, numel: u64) -> Tensor {
    Tensor { name: name.into(), numel }
}

fn layer(name: impl Into<String>, tensors: Vec<Tensor>, fwd_macs: f64) -> Layer {
    Layer { name: name.into(), tensors, fwd_macs }
}

/// The preset names.
pub const PRESETS: [&str; 4] = ["resnet50", "bert-large", "gpt2-xl", "llama-7b"];

/// A preset by name, at sequence length `seq` for the transformers (their usual one if None),
/// with gradients of `grad_dtype`.
pub fn preset(name: &str, seq: Option<u64>, grad_dtype: DataType) -> Option<Model> {
    let layers = match name {
        "resnet50" => resnet50(),
        "bert-large" => bert_large(seq.unwrap_or(128)),
        "gpt2-xl" => gpt2_xl(seq.unwrap_or(1024)),
        "llama-7b" => llama_7b(seq.unwrap_or(2048)),
        _ => return None,
    };
    Some(Model { name: name.to_string(), layers, grad_dtype })
}

/// torchvision ResNet-50 (v1.5: stride on the 3×3 conv), 224×224 images; one layer per
/// bottleneck block. Conv MACs = k²·c_in·c_out·H_out·W_out; batch norms count 0.
fn resnet50() -> Vec<Layer> {
    let conv = |k: u64, cin: u64, cout: u64, hw: u64| {
        (k * k * cin * cout, (k * k * cin * cout * hw * hw) as f64)
    };
    let mut out = Vec::new();
    let (w, macs) = conv(7, 3, 64, 112);
    out.push(layer(
        "stem",
        vec![t("conv1.weight", w), t("bn1.weight", 64), t("bn1.bias", 64)],
        macs,
    ));
    let mut cin = 64;
    let mut hw = 56; // after the stem's max-pool
    for (stage, (planes, blocks)) in
        [(64u64, 3usize), (128, 4), (256, 6), (512, 3)].iter().enumerate()
    {
        for b in 0..*blocks {
            let p = format!("layer{}.{b}", stage + 1);
            let stride2 = b == 0 && stage > 0;
            let out_hw = if stride2 { hw / 2 } else { hw };
            let mut tensors = Vec::new();
            let mut macs = 0.0;
            let mut add = |name: &str, (w, m): (u64, f64), c: u64, tensors: &mut Vec<Tensor>| {
                tensors.push(t(format!("{p}.{name}.weight"), w));
                macs += m;
                let bn = name.replace("conv", "bn");
                if name.starts_with("conv") {
                    tensors.push(t(format!("{p}.{bn}.weight"), c));
                    tensors.push(t(format!("{p}.{bn}.bias"), c));
                }
            };
            add("conv1", conv(1, cin, *planes, hw), *planes, &mut tensors);
            add("conv2", conv(3, *planes, *planes, out_hw), *planes, &mut tensors);
            add("conv3", conv(1, *planes, 4 * planes, out_hw), 4 * planes, &mut tensors);
            if b == 0 {
                let (w, m) = conv(1, cin, 4 * planes, out_hw);
                tensors.push(t(format!("{p}.downsample.0.weight"), w));
                tensors.push(t(format!("{p}.downsample.1.weight"), 4 * planes));
                tensors.push(t(format!("{p}.downsample.1.bias"), 4 * planes));
                macs += m;
            }
            out.push(layer(p, tensors, macs));
            cin = 4 * planes;
            hw = out_hw;
        }
    }
    out.push(layer(
        "fc",
        vec![t("fc.weight", 2048 * 1000), t("fc.bias", 1000)],
        (2048 * 1000) as f64,
    ));
    out
}

/// A linear layer's two tensors.
fn linear(name: &str, cin: u64, cout: u64) -> [Tensor; 2] {
    [t(format!("{name}.weight"), cin * cout), t(format!("{name}.bias"), cout)]
}

/// HF BertForPreTraining (BERT-large): the decoder weight is the word embedding, and the
/// decoder bias is `cls.predictions.bias`. MACs per sequence of `s` tokens, heads on every token.
fn bert_large(s: u64) -> Vec<Layer> {
    let (d, ff, vocab) = (1024u64, 4096u64, 30_522u64);
    let sf = s as f64;
    let mut out = vec![layer(
        "bert.embeddings",
        vec![
            t("bert.embeddings.word_embeddings.weight", vocab * d),
            t("bert.embeddings.position_embeddings.weight", 512 * d),
            t("bert.embeddings.token_type_embeddings.weight", 2 * d),
            t("bert.embeddings.LayerNorm.weight", d),
            t("bert.embeddings.LayerNorm.bias", d),
        ],
        0.0,
    )];
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
        v.push(t(format!("{p}.attention.output.LayerNorm.weight"), d));
        v.push(t(format!("{p}.attention.output.LayerNorm.bias"), d));
        v.extend(linear(&format!("{p}.intermediate.dense"), d, ff));
        v.extend(linear(&format!("{p}.output.dense"), ff, d));
        v.push(t(format!("{p}.output.LayerNorm.weight"), d));
        v.push(t(format!("{p}.output.LayerNorm.bias"), d));
        let macs = (4 * d * d + 2 * d * ff + 2 * s * d) as f64 * sf;
        out.push(layer(p, v, macs));
    }
    out.push(layer("bert.pooler", linear("bert.pooler.dense", d, d).to_vec(), (d * d) as f64));
    let mut head = vec![t("cls.predictions.bias", vocab)];
    head.extend(linear("cls.predictions.transform.dense", d, d));
    head.push(t("cls.predictions.transform.LayerNorm.weight", d));
    head.push(t("cls.predictions.transform.LayerNorm.bias", d));
    out.push(layer("cls.predictions", head, (d * d + d * vocab) as f64 * sf));
    out.push(layer(
        "cls.seq_relationship",
        linear("cls.seq_relationship", d, 2).to_vec(),
        (2 * d) as f64,
    ));
    out
}

/// HF GPT2LMHeadModel (GPT-2 XL); the LM head is the token embedding. Conv1D weights are
/// [in, out].
fn gpt2_xl(s: u64) -> Vec<Layer> {
    let (d, vocab, ctx) = (1600u64, 50_257u64, 1024u64);
    let sf = s as f64;
    let mut out = vec![layer(
        "transformer.embeddings",
        vec![t("transformer.wte.weight", vocab * d), t("transformer.wpe.weight", ctx * d)],
        0.0,
    )];
    for i in 0..48 {
        let p = format!("transformer.h.{i}");
        let mut v = vec![t(format!("{p}.ln_1.weight"), d), t(format!("{p}.ln_1.bias"), d)];
        v.extend(linear(&format!("{p}.attn.c_attn"), d, 3 * d));
        v.extend(linear(&format!("{p}.attn.c_proj"), d, d));
        v.push(t(format!("{p}.ln_2.weight"), d));
        v.push(t(format!("{p}.ln_2.bias"), d));
        v.extend(linear(&format!("{p}.mlp.c_fc"), d, 4 * d));
        v.extend(linear(&format!("{p}.mlp.c_proj"), 4 * d, d));
        let macs = (4 * d * d + 8 * d * d + 2 * s * d) as f64 * sf;
        out.push(layer(p, v, macs));
    }
    out.push(layer(
        "transformer.ln_f+lm_head",
        vec![t("transformer.ln_f.weight", d), t("transformer.ln_f.bias", d)],
        (d * vocab) as f64 * sf,
    ));
    out
}

/// Llama-7B (HF LlamaForCausalLM): no biases, RMSNorm, SwiGLU, untied head.
fn llama_7b(s: u64) -> Vec<Layer> {
    let (d, ff, vocab) = (4096u64, 11_008u64, 32_000u64);
    let sf = s as f64;
    let mut out =
        vec![layer("model.embed_tokens", vec![t("model.embed_tokens.weight", vocab * d)], 0.0)];
    for i in 0..32 {
        let p = format!("model.layers.{i}");
        let mut v: Vec<Tensor> = ["q_proj", "k_proj", "v_proj", "o_proj"]
            .iter()
            .map(|m| t(format!("{p}.self_attn.{m}.weight"), d * d))
            .collect();
        for m in ["gate_proj", "up_proj", "down_proj"] {
            v.push(t(format!("{p}.mlp.{m}.weight"), d * ff));
        }
        v.push(t(format!("{p}.input_layernorm.weight"), d));
        v.push(t(format!("{p}.post_attention_layernorm.weight"), d));
        let macs = (4 * d * d + 3 * d * ff + 2 * s * d) as f64 * sf;
        out.push(layer(p, v, macs));
    }
    out.push(layer("model.norm", vec![t("model.norm.weight", d)], 0.0));
    out.push(layer("lm_head", vec![t("lm_head.weight", vocab * d)], (d * vocab) as f64 * sf));
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
}
