"""Small Hugging Face models built from configs with random weights (no
downloads) and, per architecture, the sites their modeling source
(transformers 5.x) says they have — written by hand from that source, not
from dropmc's discovery.
"""

import torch

P = 0.1  # every dropout rate of the test models


def build(arch, impl="eager", layers=2, d=64, heads=4, p=P, seed=0):
    import transformers as T

    torch.manual_seed(seed)
    if arch == "bert":
        c = T.BertConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                         intermediate_size=2 * d, vocab_size=100, max_position_embeddings=64,
                         hidden_dropout_prob=p, attention_probs_dropout_prob=p)
        cls = T.BertModel
    elif arch == "gpt2":
        c = T.GPT2Config(n_embd=d, n_layer=layers, n_head=heads, vocab_size=100, n_positions=64,
                         resid_pdrop=p, embd_pdrop=p, attn_pdrop=p, bos_token_id=0, eos_token_id=0)
        cls = T.GPT2Model
    elif arch == "esm":
        c = T.EsmConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=2 * d, vocab_size=33, max_position_embeddings=64,
                        hidden_dropout_prob=p, attention_probs_dropout_prob=p, pad_token_id=1,
                        position_embedding_type="rotary")
        cls = T.EsmModel
    elif arch == "vit":
        c = T.ViTConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=2 * d, image_size=16, patch_size=4, hidden_dropout_prob=p,
                        attention_probs_dropout_prob=p)
        cls = T.ViTModel
    elif arch == "t5":
        c = T.T5Config(d_model=d, d_kv=d // heads, d_ff=2 * d, num_layers=layers, num_heads=heads,
                       vocab_size=100, dropout_rate=p)
        cls = T.T5EncoderModel
    elif arch == "llama":
        c = T.LlamaConfig(hidden_size=d, intermediate_size=2 * d, num_hidden_layers=layers,
                          num_attention_heads=heads, num_key_value_heads=heads // 2, vocab_size=100,
                          max_position_embeddings=64, attention_dropout=p)
        cls = T.LlamaModel
    else:
        raise ValueError(arch)
    c._attn_implementation = impl
    return cls(c)


def inputs(arch, batch=2, length=8, pad=True):
    """Keyword inputs; with ``pad`` the second sequence's last 3 tokens are
    padding (attention_mask 0)."""
    g = torch.Generator().manual_seed(1)
    if arch == "vit":
        return {"pixel_values": torch.randn(batch, 3, 16, 16, generator=g)}
    ids = torch.randint(4, 30, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    if pad:
        mask[-1, length - 3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def expected_sites(arch, layers=2):
    """``{(dropout_call, norm_call): form}`` from the modeling source."""
    s = {}
    if arch == "bert":  # post-LN: LayerNorm(dropout(dense(x)) + input_tensor) twice per layer
        for i in range(layers):
            s[(f"encoder.layer.{i}.attention.output.dropout",
               f"encoder.layer.{i}.attention.output.LayerNorm")] = "bypass"
            s[(f"encoder.layer.{i}.output.dropout", f"encoder.layer.{i}.output.LayerNorm")] = "bypass"
        # the embeddings' dropout is the first residual, and the attention's input too
        s[("embeddings.dropout", "encoder.layer.0.attention.output.LayerNorm")] = "entangled"
    elif arch == "gpt2":  # pre-LN; drop(embeddings) is the first residual
        s[("drop", "h.0.ln_1")] = "plain"
        s[("drop", "h.0.ln_2")] = "entangled"
        for i in range(layers):
            s[(f"h.{i}.attn.resid_dropout", f"h.{i}.ln_2")] = "bypass"
            s[(f"h.{i}.mlp.dropout", f"h.{i + 1}.ln_1" if i + 1 < layers else "ln_f")] = "bypass"
    elif arch == "esm":  # pre-LN; the embeddings' dropout is commented out in the source
        for i in range(layers):
            s[(f"encoder.layer.{i}.attention.output.dropout", f"encoder.layer.{i}.LayerNorm")] = "bypass"
            nxt = f"encoder.layer.{i + 1}.attention.LayerNorm" if i + 1 < layers else "encoder.emb_layer_norm_after"
            s[(f"encoder.layer.{i}.output.dropout", nxt)] = "bypass"
    elif arch == "vit":  # pre-LN; one nn.Dropout per layer, called after attention and after the MLP
        s[("embeddings.dropout", "layers.0.layernorm_before")] = "plain"
        s[("embeddings.dropout", "layers.0.layernorm_after")] = "entangled"
        for i in range(layers):
            s[(f"layers.{i}.dropout", f"layers.{i}.layernorm_after")] = "bypass"
            s[(f"layers.{i}.dropout#1", f"layers.{i + 1}.layernorm_before" if i + 1 < layers else "layernorm")] = "bypass"
    elif arch == "t5":  # pre-RMSNorm (T5LayerNorm); encoder.dropout on the embeddings (and after the final norm)
        s[("encoder.dropout", "encoder.block.0.layer.0.layer_norm")] = "plain"
        s[("encoder.dropout", "encoder.block.0.layer.1.layer_norm")] = "entangled"
        for i in range(layers):
            s[(f"encoder.block.{i}.layer.0.dropout", f"encoder.block.{i}.layer.1.layer_norm")] = "bypass"
            nxt = f"encoder.block.{i + 1}.layer.0.layer_norm" if i + 1 < layers else "encoder.final_layer_norm"
            s[(f"encoder.block.{i}.layer.1.dropout", nxt)] = "bypass"
    elif arch == "llama":  # no hidden dropout; attention_dropout only
        pass
    return s


def expected_attention(arch, impl, layers=2):
    """The attention-dropout calls, from the modeling source."""
    owner = {"bert": "encoder.layer.{}.attention.self", "gpt2": "h.{}.attn",
             "esm": "encoder.layer.{}.attention.self", "vit": "layers.{}.attention",
             "t5": "encoder.block.{}.layer.0.SelfAttention", "llama": "layers.{}.self_attn"}[arch]
    kind = "dropout" if impl == "eager" else "sdpa"
    return [f"{owner.format(i)}:{kind}" for i in range(layers)]
