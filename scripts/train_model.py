#!/usr/bin/python3
"""Trains one of kvcodec's small Llama-architecture test models and converts it to GGUF.

Text (--text), public domain, from Debian packages:
- bible: the King James Bible (bible-kjv), extracted with its `bible` command. Whole books are
  held out: some for calibration (calib.txt), others for evaluation (eval.txt).
- jargon: the Jargon File 4.4.7 (dict-jargon) and Ambrose Bierce's The Devil's Dictionary
  (dict-devil), read from their dictd files (the packages are fetched with `apt-get download`
  when they are not installed; nothing is installed). Whole entries are held out, chosen by a
  hash of their headword.
Calibration and evaluation text are never trained on and share nothing.

The model is Llama as llama.cpp's "llama" architecture runs it: RMSNorm, rotary embeddings on
adjacent channel pairs (llama.cpp's "normal" RoPE, as llama2.c and the original Llama do),
grouped-query attention, SwiGLU, tied embeddings. It is written in llama2.c's checkpoint
format (version 0) and converted with llama.cpp's llama-convert-llama2c-to-ggml.

Run with Debian's Python (/usr/bin/python3: torch, numpy, sentencepiece), with
OPENBLAS_NUM_THREADS=1 so torch and OpenBLAS do not fight over the cores.
"""

import argparse
import base64
import glob
import gzip
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np
import sentencepiece as spm
import torch
import torch.nn as nn
import torch.nn.functional as F

CALIB_BOOKS = ["Jeremiah", "Romans"]
EVAL_BOOKS = ["Acts", "Ezekiel", "Hebrews"]


def log(msg):
    print(f"[train] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- text


def read_bible():
    """Returns [(book, chapter_text)], one paragraph per chapter, verse numbers dropped."""
    out = subprocess.run(["bible", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True).stdout
    chapters = []
    book, verses = None, []

    def flush():
        if book is not None and verses:
            chapters.append((book, f"{book} {chapter_no}\n" + " ".join(verses)))

    chapter_no = 0
    for line in out.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        head = stripped.rsplit(" ", 1)
        if not line.startswith(" ") and len(head) == 2 and head[1].isdigit():
            flush()
            book, chapter_no, verses = head[0], int(head[1]), []
            continue
        first, _, rest = stripped.partition(" ")
        if line.startswith(" ") and first.isdigit():
            verses.append(rest)
        elif verses:
            verses[-1] += " " + stripped  # a verse wrapped onto the next line
    flush()
    return chapters


def split_bible():
    return split_text(read_bible())


def dictd_entries(package, name):
    """[(headword, text)] of a dictd dictionary, from /usr/share/dictd or the package's .deb."""
    folder = "/usr/share/dictd"
    if not os.path.exists(os.path.join(folder, name + ".index")):
        folder = tempfile.mkdtemp(prefix="kvcodec-text-")
        subprocess.run(["apt-get", "download", package], check=True, cwd=folder, capture_output=True)
        subprocess.run(["dpkg-deb", "-x", glob.glob(os.path.join(folder, package + "_*.deb"))[0], folder],
                       check=True)
        folder = os.path.join(folder, "usr", "share", "dictd")
    with gzip.open(os.path.join(folder, name + ".dict.dz"), "rb") as f:
        data = f.read()
    digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def number(b64):
        v = 0
        for c in b64:
            v = v * 64 + digits.index(c)
        return v

    entries, seen = [], set()
    with open(os.path.join(folder, name + ".index"), encoding="utf-8") as f:
        for line in f:
            head, offset, length = line.rstrip("\n").split("\t")[:3]
            where = (number(offset), number(length))
            if head.startswith("00-database") or where in seen:
                continue
            seen.add(where)
            raw = data[where[0] : where[0] + where[1]].decode("utf-8", errors="replace")
            # One line a paragraph: dictd text is indented and wrapped at 70 columns.
            paragraphs = [" ".join(p.split()) for p in raw.split("\n\n")]
            entries.append((head, "\n".join(p for p in paragraphs if p)))
    return entries


def split_jargon():
    entries = dictd_entries("dict-jargon", "jargon") + dictd_entries("dict-devil", "devil")
    parts = {"train": [], "calib": [], "eval": []}
    for head, text in entries:
        bucket = zlib.crc32(head.lower().encode()) % 20
        parts["calib" if bucket < 2 else "eval" if bucket < 4 else "train"].append(text)
    return tuple("\n\n".join(parts[k]) + "\n" for k in ("train", "calib", "eval"))


TEXTS = {
    "bible": {
        "split": split_bible, "prompt": "And it came to pass",
        "source": "the King James Bible (public domain; Debian package `bible-kjv`)",
        "calib": f"books {', '.join(CALIB_BOOKS)}", "eval": f"books {', '.join(EVAL_BOOKS)}",
    },
    "jargon": {
        "split": split_jargon, "prompt": "The hacker",
        "source": "the Jargon File 4.4.7 and The Devil's Dictionary (public domain; Debian packages "
                  "`dict-jargon`, `dict-devil`)",
        "calib": "entries whose headword's CRC-32 mod 20 is 0-1",
        "eval": "entries whose headword's CRC-32 mod 20 is 2-3",
    },
}


def split_text(chapters):
    def join(books):
        return "\n\n".join(text for book, text in chapters if book in books) + "\n"

    held_out = set(CALIB_BOOKS) | set(EVAL_BOOKS)
    train = "\n\n".join(text for book, text in chapters if book not in held_out) + "\n"
    return train, join(CALIB_BOOKS), join(EVAL_BOOKS)


# ---------------------------------------------------------------- tokenizer


def train_tokenizer(train_text, vocab_size, work_dir):
    corpus = os.path.join(work_dir, "train.txt")
    with open(corpus, "w") as f:
        f.write(train_text)
    prefix = os.path.join(work_dir, "tok")
    # Identity normalisation so llama.cpp's SPM tokenizer (which does not normalise) splits
    # text the same way; byte fallback so any text encodes.
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=prefix, model_type="bpe", vocab_size=vocab_size,
        character_coverage=1.0, byte_fallback=True, split_digits=True,
        allow_whitespace_only_pieces=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, num_threads=2, minloglevel=2,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, user_defined_symbols=[])
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def export_tokenizer_llama2c(sp, path):
    """llama2.c's tokenizer.bin: max_token_length, then per token (score f32, len u32, bytes)."""
    pieces = []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i).replace("\u2581", " ")
        pieces.append((piece.encode("utf-8"), sp.get_score(i)))
    with open(path, "wb") as f:
        f.write(struct.pack("<I", max(len(b) for b, _ in pieces)))
        for b, score in pieces:
            f.write(struct.pack("<fI", score, len(b)))
            f.write(b)


# ---------------------------------------------------------------- model


class Config:
    def __init__(self, a, vocab_size):
        self.dim, self.n_layers, self.n_heads, self.n_kv_heads = a.dim, a.layers, a.heads, a.kv_heads
        self.hidden_dim, self.vocab_size, self.seq_len = a.hidden, vocab_size, a.seq_len
        self.head_dim = a.dim // a.heads
        self.rope_theta = 10000.0
        self.norm_eps = 1e-5


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg):
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim))
    ang = torch.outer(torch.arange(cfg.seq_len).float(), inv)
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x, cos, sin):
    # x: (B, T, H, D); rotates channel pairs (2i, 2i+1) — llama.cpp's LLAMA_ROPE_TYPE_NORM.
    T = x.shape[1]
    xr = x.float().reshape(*x.shape[:-1], -1, 2)
    a, b = xr[..., 0], xr[..., 1]
    c, s = cos[:T].view(1, T, 1, -1), sin[:T].view(1, T, 1, -1)
    return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2).type_as(x)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        kv_dim = cfg.n_kv_heads * cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, kv_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, kv_dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.w1 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.w2 = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x, cos, sin, mask):
        cfg = self.cfg
        B, T, _ = x.shape
        h = self.attention_norm(x)
        q = apply_rope(self.wq(h).view(B, T, cfg.n_heads, cfg.head_dim), cos, sin)
        k = apply_rope(self.wk(h).view(B, T, cfg.n_kv_heads, cfg.head_dim), cos, sin)
        v = self.wv(h).view(B, T, cfg.n_kv_heads, cfg.head_dim)
        rep = cfg.n_heads // cfg.n_kv_heads
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(cfg.head_dim) + mask[:T, :T]
        out = (F.softmax(att.float(), dim=-1).type_as(q) @ v).transpose(1, 2).reshape(B, T, -1)
        x = x + self.wo(out)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.output.weight = self.tok_embeddings.weight
        cos, sin = rope_tables(cfg)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        mask = torch.full((cfg.seq_len, cfg.seq_len), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("wo.weight") or name.endswith("w2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask)
        return self.output(self.norm(x))


def export_llama2c(model, path):
    """llama2.c checkpoint version 0: 7 int32 config fields, then fp32 weights in its order."""
    cfg = model.cfg
    with open(path, "wb") as f:
        # Positive vocab_size means a shared (tied) classifier.
        f.write(struct.pack("<7i", cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads,
                            cfg.n_kv_heads, cfg.vocab_size, cfg.seq_len))

        def put(t):
            f.write(t.detach().float().contiguous().numpy().astype("<f4").tobytes())

        put(model.tok_embeddings.weight)
        for name in ["attention_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3"]:
            for layer in model.layers:
                put(getattr(layer, name).weight)
        put(model.norm.weight)
        put(model.cos[: cfg.seq_len])  # freq_cis_real: the converter skips these
        put(model.sin[: cfg.seq_len])


# ---------------------------------------------------------------- training


def batches(data, seq_len, batch_size, gen):
    n = len(data) - seq_len - 1
    while True:
        idx = torch.randint(0, n, (batch_size,), generator=gen)
        x = torch.stack([data[i : i + seq_len] for i in idx])
        y = torch.stack([data[i + 1 : i + 1 + seq_len] for i in idx])
        yield x, y


@torch.no_grad()
def perplexity(model, data, seq_len, max_windows):
    model.eval()
    total, count = 0.0, 0
    for w in range(min(max_windows, (len(data) - 1) // seq_len)):
        chunk = data[w * seq_len : w * seq_len + seq_len + 1]
        logits = model(chunk[:-1].unsqueeze(0))
        total += F.cross_entropy(logits[0].float(), chunk[1:], reduction="sum").item()
        count += seq_len
    model.train()
    return math.exp(total / max(count, 1))


def write_readme(out_dir):
    """models/<name>/README.md from model.json, so the figures there are the run's own."""
    with open(os.path.join(out_dir, "model.json")) as f:
        m = json.load(f)
    source = TEXTS[m.get("text", "bible")]
    attention = ("multi-head attention" if m["n_heads"] == m["n_kv_heads"]
                 else f"grouped-query attention, {m['n_heads'] // m['n_kv_heads']}:1")
    short = (f" (first {round(100 * m['short_frac'])}% of the time at {m['short_seq_len']})"
             if m["short_seq_len"] < m["train_ctx"] else "")
    threads = m.get("threads", 2)
    text = f"""# {m['name']}: one of kvcodec's test models

A small Llama-architecture model trained by `scripts/train_model.py` on {source['source']},
converted to GGUF with llama.cpp's `llama-convert-llama2c-to-ggml`. Tests and benchmarks use
this committed file; nothing retrains it.

| | |
|---|---|
| architecture | llama (RMSNorm, SwiGLU, RoPE "normal" = adjacent pairs, tied embeddings) |
| layers | {m['n_layers']} |
| model dim / FFN dim | {m['dim']} / {m['ffn_dim']} |
| attention heads / KV heads | {m['n_heads']} / {m['n_kv_heads']} ({attention}) |
| head_dim | {m['head_dim']} |
| vocabulary | {m['vocab_size']} (SentencePiece BPE with byte fallback) |
| parameters | {m['n_params']:,} |
| training context | {m['train_ctx']} tokens{short} |
| training | {m['train_steps']} steps, {m['train_tokens']:,} tokens, {m['train_minutes']} min, {threads} torch thread(s) on a 2-core machine |
| validation perplexity (PyTorch, held-out text, {m['train_ctx']}-token windows) | {m['eval_ppl_torch']} |
| GGUF size | {m['gguf_bytes']:,} bytes (f32 weights) |

Files:
- `{m['name']}.gguf`: the model.
- `calib.txt`: calibration text ({source['calib']}); never trained on.
- `eval.txt`: evaluation text ({source['eval']}); never trained on, disjoint from the
  calibration text.
- `model.json`: the run's settings and figures, and a greedy continuation computed by PyTorch
  that a test checks llama.cpp reproduces token for token.

Reproduce (about {round(m['train_minutes'])} minutes, plus a few for text and tokenizer):

```
OPENBLAS_NUM_THREADS=1 /usr/bin/python3 scripts/train_model.py --out models/{m['name']} \\
    --name {m['name']} --llama-prefix "$(scripts/setup-llama.sh)" --text {m.get('text', 'bible')} --layers {m['n_layers']} \\
    --dim {m['dim']} --heads {m['n_heads']} --kv-heads {m['n_kv_heads']} --hidden {m['ffn_dim']} \\
    --vocab {m['vocab_size']} --seq-len {m['train_ctx']} --batch {m['batch']} --short-seq-len {m['short_seq_len']} \\
    --short-batch {m.get('short_batch', 12)} --short-frac {m['short_frac']} --lr {m['lr']} --threads {threads} \\
    --minutes {round(m['train_minutes'])} --seed {m['seed']}
```
(needs Debian's python3-torch, python3-numpy and python3-sentencepiece; training is
time-budgeted, so the weights differ run to run.)
"""
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(text)


def main():
    if "--write-readme" in sys.argv:
        write_readme(sys.argv[sys.argv.index("--write-readme") + 1])
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder, e.g. models/kvtiny")
    p.add_argument("--name", default="kvtiny")
    p.add_argument("--text", choices=sorted(TEXTS), default="bible", help="training text (see above)")
    p.add_argument("--llama-prefix", required=True, help="llama.cpp install prefix (scripts/setup-llama.sh)")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--seq-len", type=int, default=1536)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--short-seq-len", type=int, default=512,
                   help="sequence length of the first phase (attention at full length is slow on CPU)")
    p.add_argument("--short-batch", type=int, default=12)
    p.add_argument("--short-frac", type=float, default=0.5,
                   help="fraction of the time budget spent at --short-seq-len; the rest trains at --seq-len")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--minutes", type=float, default=40.0, help="training wall-clock budget")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="torch threads (train two models side by side with 1 each)")
    a = p.parse_args()

    torch.manual_seed(a.seed)
    torch.set_num_threads(max(1, a.threads))
    os.makedirs(a.out, exist_ok=True)
    work = os.path.join(a.out, ".work")
    os.makedirs(work, exist_ok=True)

    a.short_seq_len = min(a.short_seq_len, a.seq_len)
    train_text, calib_text, eval_text = TEXTS[a.text]["split"]()
    log(f"text: train {len(train_text)} chars, calib {len(calib_text)}, eval {len(eval_text)}")
    with open(os.path.join(a.out, "calib.txt"), "w") as f:
        f.write(calib_text)
    with open(os.path.join(a.out, "eval.txt"), "w") as f:
        f.write(eval_text)

    sp = train_tokenizer(train_text, a.vocab, work)
    tok_path = os.path.join(work, "tokenizer.bin")
    export_tokenizer_llama2c(sp, tok_path)
    train_ids = torch.tensor(sp.encode(train_text), dtype=torch.long)
    eval_ids = torch.tensor(sp.encode(eval_text), dtype=torch.long)
    log(f"tokens: train {len(train_ids)}, eval {len(eval_ids)}")

    cfg = Config(a, sp.get_piece_size())
    model = Llama(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: dim {cfg.dim}, layers {cfg.n_layers}, heads {cfg.n_heads}/{cfg.n_kv_heads} kv, "
        f"head_dim {cfg.head_dim}, ffn {cfg.hidden_dim}, vocab {cfg.vocab_size}, {n_params} params")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(a.seed)
    short_data = batches(train_ids, a.short_seq_len, a.short_batch, gen)
    long_data = batches(train_ids, cfg.seq_len, a.batch, gen)
    budget = a.minutes * 60.0
    warmup = 30
    start = time.time()
    step, tokens_seen, ema = 0, 0, None
    # The learning rate follows the fraction of the time budget spent (cosine to 10%), so the
    # run ends on schedule whatever this machine's speed.
    while True:
        frac = (time.time() - start) / budget
        if frac >= 1.0:
            break
        lr = a.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = next(short_data if frac < a.short_frac else long_data)
        loss = F.cross_entropy(model(x).view(-1, cfg.vocab_size), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += x.numel()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % 10 == 0:
            el = time.time() - start
            log(f"step {step} seq {x.shape[1]} loss {ema:.3f} lr {lr:.2e} {tokens_seen / el:.0f} tok/s "
                f"{el / 60:.1f}/{a.minutes:.0f} min")
    train_minutes = (time.time() - start) / 60.0
    val_ppl = perplexity(model, eval_ids, cfg.seq_len, max_windows=16)
    log(f"trained {step} steps, {tokens_seen} tokens in {train_minutes:.1f} min; eval ppl {val_ppl:.2f}")

    ckpt = os.path.join(work, "model.bin")
    export_llama2c(model, ckpt)
    gguf = os.path.join(a.out, f"{a.name}.gguf")
    subprocess.run([os.path.join(a.llama_prefix, "bin", "llama-convert-llama2c-to-ggml"),
                    "--copy-vocab-from-model", tok_path, "--llama2c-model", ckpt,
                    "--llama2c-output-model", gguf], check=True, capture_output=True,
                   env=dict(os.environ, LD_LIBRARY_PATH=os.path.join(a.llama_prefix, "lib")))
    # The converter writes a fixed context length of 128; record the one we trained at.
    env = dict(os.environ, PYTHONPATH=os.path.join(a.llama_prefix, "share", "gguf-py"))
    subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_set_metadata", "--force", gguf,
                    "llama.context_length", str(cfg.seq_len)], check=True, env=env, capture_output=True)
    # It also caps the rotary dimension at 64; the model rotates the whole head.
    subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_set_metadata", "--force", gguf,
                    "llama.rope.dimension_count", str(cfg.head_dim)], check=True, env=env, capture_output=True)

    # Greedy continuation of a fixed prompt, so tests can check llama.cpp reproduces PyTorch.
    model.eval()
    prompt = TEXTS[a.text]["prompt"]
    ids = [1] + sp.encode(prompt)
    with torch.no_grad():
        for _ in range(16):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    meta = {
        "name": a.name, "dim": cfg.dim, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads,
        "n_kv_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim, "ffn_dim": cfg.hidden_dim,
        "vocab_size": cfg.vocab_size, "train_ctx": cfg.seq_len, "rope_theta": cfg.rope_theta,
        "n_params": n_params, "train_steps": step, "short_seq_len": a.short_seq_len,
        "short_frac": a.short_frac, "train_tokens": tokens_seen,
        "train_minutes": round(train_minutes, 1), "eval_ppl_torch": round(val_ppl, 3),
        "gguf_bytes": os.path.getsize(gguf), "seed": a.seed, "batch": a.batch, "lr": a.lr,
        "short_batch": a.short_batch, "threads": a.threads,
        "greedy_prompt": prompt, "greedy_tokens_torch": ids,
        "text": a.text,
    }
    with open(os.path.join(a.out, "model.json"), "w") as f:
        json.dump(meta, f, indent=2)
    write_readme(a.out)
    log(f"wrote {gguf} ({meta['gguf_bytes']} bytes)")


if __name__ == "__main__":
    main()
