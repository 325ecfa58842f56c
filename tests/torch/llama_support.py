"""A tiny Hugging Face Llama (transformers' LlamaForCausalLM from a LlamaConfig: random
weights, no download), its data and its one-process training, for test_parallelize.py.

Sizes divide by 4 and 8 where tensor parallelism splits them: 8 attention heads and 4
key-value heads (grouped-query attention, 2 query heads per key-value head) of dimension 8,
hidden size 64, MLP width 128, vocabulary 128. The weights are drawn from a seed with a
private generator (not the model's own init), so they do not depend on the transformers
version or the global RNG.
"""
import math

import torch
import torch.nn.functional as F

VOCAB = 128
HIDDEN = 64
HEADS = 8
KV_HEADS = 4
INTERMEDIATE = 128
LAYERS = 2
SEQ = 16


def make_config():
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        max_position_embeddings=SEQ, tie_word_embeddings=False, attention_dropout=0.0,
        # "eager": plain matmul/softmax attention, the same kernels with 8 local heads or 2.
        attn_implementation="eager",
    )


def make_model(seed=0):
    """LlamaForCausalLM in float32, parameters drawn from `seed`: norm weights near 1, the
    rest normal with standard deviation 1/sqrt(fan-in) (so activations and gradients are of
    order one and float32 tolerances mean something)."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(make_config()).float()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
    return model.train()


def make_batches(steps, batch, seed=1):
    """`steps` global batches of token ids, shape (batch, SEQ): random first tokens, then
    x[t + 1] = (5 x[t] + 3) mod VOCAB, a rule the model learns within a few steps (so the loss
    goes down and the training is not just noise)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        tokens = torch.empty(batch, SEQ, dtype=torch.long)
        tokens[:, 0] = torch.randint(0, VOCAB, (batch,), generator=gen)
        for t in range(1, SEQ):
            tokens[:, t] = (5 * tokens[:, t - 1] + 3) % VOCAB
        out.append(tokens)
    return out


def shifted_loss(logits, tokens):
    """The causal-LM loss Hugging Face computes for labels=tokens: predict token t + 1 from
    position t, mean over the positions."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                           tokens[:, 1:].reshape(-1))


def train_reference(steps, batch, lr, momentum):
    """One-process training on the whole batches with SGD: returns (logits of each step,
    gradients of each step {name: tensor}, final parameters {name: tensor})."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    all_logits, all_grads = [], []
    for tokens in make_batches(steps, batch):
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=tokens, labels=tokens)
        out.loss.backward()
        all_logits.append(out.logits.detach().clone())
        all_grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters()})
        opt.step()
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return all_logits, all_grads, params
