"""A tiny transformer language model (float32, deterministic from a seed) and its data, for
the distributed training tests.

Attention projections and MLP layers are separate nn.Linear modules so that tensor
parallelism can shard them (q/k/v and fc1 column-wise, out and fc2 row-wise); the attention
takes its head count from the local width, so it also runs on a column-wise shard.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 64
DIM = 32
HEADS = 4
LAYERS = 2
SEQ = 16
MLP_RATIO = 4


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.head_dim = dim // heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, _ = x.shape
        # -1: the heads held locally (all of them, or dim / tp_degree of them under TP).
        q = self.q(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        y = scores.softmax(dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, MLP_RATIO * dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab=VOCAB, dim=DIM, heads=HEADS, layers=LAYERS, seq=SEQ):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(seq, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def make_model(seed=0, **sizes):
    """The model (TinyTransformer(**sizes)) with float32 parameters drawn from `seed`
    (independent of the global RNG)."""
    gen = torch.Generator().manual_seed(seed)
    model = TinyTransformer(**sizes)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))
            elif ".ln" in name or name.startswith("ln."):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
    return model.float()


def tp_plan(embedding=True):
    """Megatron-style tensor parallelism for TinyTransformer: q/k/v and fc1 column-wise, out
    and fc2 row-wise (one all-reduce per attention and per MLP); the head (and, with
    `embedding`, the embedding) sharded over the vocabulary."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    # Vocabulary-sharded head: logits all-gathered.
    plan = {"head": ColwiseParallel(output_layouts=Replicate())}
    if embedding:  # vocabulary-sharded embedding: partial outputs all-reduced
        plan["tok"] = RowwiseParallel(input_layouts=Replicate())
    for i in range(LAYERS):
        for name in ("attn.q", "attn.k", "attn.v", "mlp.fc1"):
            plan[f"blocks.{i}.{name}"] = ColwiseParallel()
        for name in ("attn.out", "mlp.fc2"):
            plan[f"blocks.{i}.{name}"] = RowwiseParallel()
    return plan


def make_batches(steps, batch, seed=1):
    """`steps` global batches of (inputs, targets), token ids of shape (batch, SEQ): the
    task is to repeat the previous token, so the loss goes down within a few steps."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        tokens = torch.randint(0, VOCAB, (batch, SEQ + 1), generator=gen)
        out.append((tokens[:, :-1].clone(), tokens[:, :-1].roll(1, dims=1).clone()))
    return out


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
