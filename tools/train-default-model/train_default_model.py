#!/usr/bin/env python3
"""Trains hearth's embedded default model: a small Llama-architecture model and a
byte-level BPE tokenizer, on openly licensed English text shipped in Debian packages.

Two steps, which may run on different machines:

  gather  (a Debian machine with apt-get; no GPU, no PyTorch)
          Downloads the source packages' .debs, extracts and cleans their English text,
          dedupes it, assigns every document to train/valid/test by a hash of its text,
          and writes one corpus file (JSON lines) plus a manifest of sources, package
          versions, licenses, sizes and the corpus sha256.

  train   (a machine with a CUDA GPU, torch, transformers, tokenizers, safetensors)
          Trains the tokenizer on the train split, then a LlamaForCausalLM, with fixed
          seeds; prints the loss curve (step, train loss, held-out loss), saves a PNG of
          it, reports held-out loss (nats/token, bits/byte), generates samples and writes
          the model in plain Hugging Face format (bf16 safetensors) with its model card.

  card    Re-renders the model card from the saved metrics (no GPU needed).

Exact commands used for the committed model are in README.md beside this file.

Sources (every one is in Debian 12 "bookworm" main; licenses from each package's
/usr/share/doc/<package>/copyright, recorded in the manifest and the model card):
  fortunes, fortunes-min   fortune cookie files (fortune-mod); BSD-3-Clause package terms
  fortunes-bofh-excuses    BOFH excuses; public domain
  fortunes-debian-hints    Debian hints (English file only); BSD-3-Clause
  dict-devil               Ambrose Bierce, The Devil's Dictionary (1911); public domain
  jargon-text              The Jargon File 4.4.7 (lexicon entries); public domain
  r-cran-janeaustenr       Jane Austen's six novels (public domain texts; package MIT)
Left out on purpose: the fortune files ascii-art (pictures), ethnic and men-women (jokes
about groups of people; not what a project's default model should echo), translate-me
(Latin); Debian 12 ships no offensive ("off/") fortunes.
"""

import argparse
import hashlib
import json
import math
import os
import random
import re
import subprocess
import sys
import time
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

BOS = "<|bos|>"
EOS = "<|eos|>"

# --------------------------------------------------------------------------- gather

PACKAGES = [
    {
        "package": "fortunes",
        "license": "BSD-3-Clause (fortune-mod's terms, Regents of the University of California); "
                   "quotations are attributed to their authors in the texts",
        "what": "fortune cookie files, /usr/share/games/fortunes/*",
    },
    {
        "package": "fortunes-min",
        "license": "BSD-3-Clause (same source package as fortunes)",
        "what": "the selected fortunes file, /usr/share/games/fortunes/fortunes",
    },
    {
        "package": "fortunes-bofh-excuses",
        "license": "public domain (\"The author has placed this into the public domain.\")",
        "what": "BOFH excuses, /usr/share/games/fortunes/bofh-excuses",
    },
    {
        "package": "fortunes-debian-hints",
        "license": "BSD-3-Clause (Joel Aelwyn, Kartik Mistry)",
        "what": "English Debian hints, /usr/share/games/fortunes/debian-hints",
    },
    {
        "package": "dict-devil",
        "license": "public domain (copyright expired; Ambrose Bierce, 1911)",
        "what": "The Devil's Dictionary, /usr/share/dictd/devil.dict.dz",
    },
    {
        "package": "jargon-text",
        "license": "public domain (\"This document (the Jargon File) is in the public domain\")",
        "what": "The Jargon File 4.4.7 lexicon entries, /usr/share/doc/jargon-text/jargon.txt.gz",
    },
    {
        "package": "r-cran-janeaustenr",
        "license": "texts public domain (Jane Austen, 1811-1818, via Project Gutenberg); "
                   "package MIT (Julia Silge)",
        "what": "Jane Austen's six completed novels, R data base in "
                "/usr/lib/R/site-library/janeaustenr/data",
    },
]

FORTUNE_FILES_SKIPPED = {
    "ascii-art": "pictures, not prose",
    "ethnic": "jokes about ethnic groups",
    "men-women": "jokes about men and women",
    "translate-me": "mostly Latin",
}

TYPOGRAPHY = {
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "--",
    "\u2014": "--", "\u2026": "...", "\u00a0": " ", "\u2022": "*", "\u00b7": ".",
}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_packages(cache):
    """apt-get download + dpkg-deb -x each package into cache/<package>/."""
    os.makedirs(cache, exist_ok=True)
    info = {}
    for spec in PACKAGES:
        pkg = spec["package"]
        debs = [f for f in os.listdir(cache) if f.startswith(pkg + "_") and f.endswith(".deb")]
        if not debs:
            subprocess.run(["apt-get", "download", pkg], cwd=cache, check=True)
            debs = [f for f in os.listdir(cache) if f.startswith(pkg + "_") and f.endswith(".deb")]
        if len(debs) != 1:
            raise SystemExit("expected one .deb for %s in %s, found %s" % (pkg, cache, debs))
        deb = os.path.join(cache, debs[0])
        root = os.path.join(cache, pkg)
        if not os.path.isdir(root):
            subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
        version = subprocess.run(["dpkg-deb", "-f", deb, "Version"], check=True,
                                 capture_output=True, text=True).stdout.strip()
        info[pkg] = {"root": root, "deb": os.path.basename(deb), "version": version,
                     "deb_sha256": sha256_file(deb)}
    return info


def clean(text):
    text = unicodedata.normalize("NFC", text)
    text = re.sub(r".\x08", "", text)  # overstrike (x BS x, _ BS x) in old fortunes
    text = text.replace("\x07", "")  # terminal bells
    for a, b in TYPOGRAPHY.items():
        text = text.replace(a, b)
    text = re.sub(r"(?<![\w_])_([^_\n]+(?:\n[^_\n]+)?)_(?![\w_])", r"\1", text)  # _italics_
    text = text.replace("\r", "")
    lines = [line.rstrip() for line in text.split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n").rstrip()


def acceptable(text):
    if len(text) < 8:
        return False
    if re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text):
        return False
    visible = [c for c in text if not c.isspace()]
    letters = sum(c.isalpha() for c in visible)
    return letters >= 0.6 * len(visible)


def fortune_docs(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        raw = f.read()
    return [d for d in re.split(r"(?m)^%\n", raw + "\n") if d.strip()]


def devil_docs(root):
    import gzip
    # dictd writes offsets and lengths in base64 digits, most significant first.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def b64(s):
        n = 0
        for c in s:
            n = n * 64 + alphabet.index(c)
        return n

    base = os.path.join(root, "usr/share/dictd")
    data = gzip.open(os.path.join(base, "devil.dict.dz")).read()  # dictzip is gzip
    entries = []
    with open(os.path.join(base, "devil.index"), encoding="utf-8") as f:
        for line in f:
            head, off, ln = line.rstrip("\n").split("\t")
            if head.startswith("00database"):
                continue
            entries.append((b64(off), b64(ln)))
    entries.sort()
    docs = []
    seen = set()
    for off, ln in entries:
        if off in seen:  # several headwords can point at one entry
            continue
        seen.add(off)
        docs.append(data[off:off + ln].decode("utf-8", errors="replace"))
    return docs


def jargon_docs(root):
    import gzip
    path = os.path.join(root, "usr/share/doc/jargon-text/jargon.txt.gz")
    lines = gzip.open(path).read().decode("utf-8", errors="replace").split("\n")
    head_re = re.compile(r"^   :(.+?):\s*(.*)$")
    docs, current = [], None
    for line in lines:
        if re.search(r"Part\s+III\.\s+Appendices", line):  # (no-break spaces in the file)
            break
        m = head_re.match(line)
        if m:
            if current:
                docs.append(current)
            word = m.group(1)
            rest = re.sub(r"^/[^/]*/,?\s*", "", m.group(2)).strip()
            current = [word + (", " + rest if rest else ""), ""]
        elif current is not None:
            current.append(line[3:] if line.startswith("   ") else line)
    if current:
        docs.append(current)
    out = []
    for d in docs:
        text = "\n".join(d)
        text = re.sub(r"\{([^{}]+)\}", r"\1", text)
        out.append(text)
    return out


AUSTEN_TITLES = {
    "sensesensibility": "Sense and Sensibility", "prideprejudice": "Pride and Prejudice",
    "mansfieldpark": "Mansfield Park", "emma": "Emma",
    "northangerabbey": "Northanger Abbey", "persuasion": "Persuasion",
}


def austen_docs(root, max_chars=1500):
    """Each novel's paragraphs, grouped into documents of up to max_chars; chapter and
    volume headings (and the title pages) end a document and are dropped."""
    from rdata import read_lazyload_db
    base = os.path.join(root, "usr/lib/R/site-library/janeaustenr/data")
    books = read_lazyload_db(os.path.join(base, "Rdata.rdx"), os.path.join(base, "Rdata.rdb"))
    out = []
    for name in AUSTEN_TITLES:  # publication order
        lines = [l if l is not None else "" for l in books[name]]
        paras, cur = [], []
        for line in lines + [""]:
            if line.strip():
                cur.append(line)
            elif cur:
                paras.append("\n".join(cur))
                cur = []
        heading = re.compile(r"^\s*(CHAPTER|Chapter|VOLUME|Volume)\b|^\s*(THE )?END\s*$")
        started = False
        docs, cur, size = [], [], 0
        for p in paras:
            first = p.strip().split("\n")[0]
            if heading.match(first) or (p.strip().isupper() and len(p) < 80):
                started = started or bool(heading.match(first))
                if cur:
                    docs.append("\n\n".join(cur))
                cur, size = [], 0
                continue
            if not started:  # title page, author line, advertisement
                continue
            if cur and size + len(p) > max_chars:
                docs.append("\n\n".join(cur))
                cur, size = [], 0
            cur.append(p.strip("\n"))
            size += len(p) + 2
        if cur:
            docs.append("\n\n".join(cur))
        out.append((name, docs))
    return out


def split_of(key, valid_per_mille, test_per_mille):
    bucket = int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) % 1000
    if bucket < valid_per_mille:
        return "valid"
    if bucket < valid_per_mille + test_per_mille:
        return "test"
    return "train"


def cmd_gather(args):
    info = fetch_packages(args.cache)
    raw = []  # (source, text)
    fortune_dir = os.path.join(info["fortunes"]["root"], "usr/share/games/fortunes")
    fortune_files = sorted(f for f in os.listdir(fortune_dir)
                           if not f.endswith((".dat", ".u8")) and
                           os.path.isfile(os.path.join(fortune_dir, f)))
    for f in fortune_files:
        if f in FORTUNE_FILES_SKIPPED:
            continue
        raw += [("fortunes/" + f, d) for d in fortune_docs(os.path.join(fortune_dir, f))]
    raw += [("fortunes-min/fortunes", d) for d in fortune_docs(
        os.path.join(info["fortunes-min"]["root"], "usr/share/games/fortunes/fortunes"))]
    raw += [("fortunes-bofh-excuses", d) for d in fortune_docs(
        os.path.join(info["fortunes-bofh-excuses"]["root"],
                     "usr/share/games/fortunes/bofh-excuses"))]
    raw += [("fortunes-debian-hints", d) for d in fortune_docs(
        os.path.join(info["fortunes-debian-hints"]["root"],
                     "usr/share/games/fortunes/debian-hints"))]
    raw += [("dict-devil", d) for d in devil_docs(info["dict-devil"]["root"])]
    raw += [("jargon-text", d) for d in jargon_docs(info["jargon-text"]["root"])]
    for name, docs in austen_docs(info["r-cran-janeaustenr"]["root"]):
        raw += [("r-cran-janeaustenr/" + name, d) for d in docs]

    seen = set()
    rows = []
    stats = {}
    dropped = {"filtered": 0, "duplicate": 0}
    for source, text in raw:
        text = clean(text)
        if not acceptable(text):
            dropped["filtered"] += 1
            continue
        key = re.sub(r"\W+", " ", text.lower()).strip()
        if key in seen:
            dropped["duplicate"] += 1
            continue
        seen.add(key)
        split = split_of(key, args.valid_per_mille, args.test_per_mille)
        rows.append({"source": source, "split": split, "text": text})
        group = source.split("/")[0]
        s = stats.setdefault(group, {"docs": 0, "bytes": 0, "train": 0, "valid": 0, "test": 0})
        s["docs"] += 1
        s["bytes"] += len(text.encode("utf-8"))
        s[split] += 1

    os.makedirs(os.path.dirname(os.path.abspath(args.corpus)), exist_ok=True)
    with open(args.corpus, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    split_bytes = {s: sum(len(r["text"].encode("utf-8")) for r in rows if r["split"] == s)
                   for s in ("train", "valid", "test")}
    manifest = {
        "corpus_file": os.path.basename(args.corpus),
        "corpus_bytes": os.path.getsize(args.corpus),
        "corpus_sha256": sha256_file(args.corpus),
        "documents": len(rows),
        "text_bytes_by_split": split_bytes,
        "docs_by_split": {s: sum(r["split"] == s for r in rows) for s in ("train", "valid", "test")},
        "dropped": dropped,
        "split_rule": "sha256(normalized text) -> first 32 bits mod 1000: < %d valid, < %d test, "
                      "else train" % (args.valid_per_mille, args.valid_per_mille + args.test_per_mille),
        "fortune_files_skipped": FORTUNE_FILES_SKIPPED,
        "packages": [dict(spec, version=info[spec["package"]]["version"],
                          deb=info[spec["package"]]["deb"],
                          deb_sha256=info[spec["package"]]["deb_sha256"]) for spec in PACKAGES],
        "sources": stats,
    }
    with open(args.corpus + ".manifest.json", "w") as f:
        json.dump(manifest, f, indent=1)
    print(json.dumps({k: manifest[k] for k in ("corpus_bytes", "corpus_sha256", "documents",
                                               "text_bytes_by_split", "docs_by_split", "dropped")},
                     indent=1))
    for group, s in stats.items():
        print("%-24s %6d docs %9d bytes  (train %d, valid %d, test %d)"
              % (group, s["docs"], s["bytes"], s["train"], s["valid"], s["test"]))


# --------------------------------------------------------------------------- train

def load_corpus(path):
    rows = [json.loads(line) for line in open(path, encoding="utf-8")]
    return {s: [r["text"] for r in rows if r["split"] == s] for s in ("train", "valid", "test")}


def build_tokenizer(texts, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())  # byte-level: every byte is in the alphabet, so no unk
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=BOS + " $A:0", pair=BOS + " $A:0 " + BOS + ":1 $B:1",
        special_tokens=[(BOS, bos_id)])
    return tok


def token_stream(tok, texts, bos_id, eos_id):
    """<|bos|> doc <|eos|> for every document, concatenated."""
    ids = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.append(bos_id)
        ids.extend(enc.ids)
        ids.append(eos_id)
    return ids


def write_png_fallback(path, series, width=900, height=500):
    """Minimal line plot as PNG (zlib + struct only), used when matplotlib is missing."""
    import struct
    import zlib
    img = [[(255, 255, 255)] * width for _ in range(height)]
    colors = [(31, 119, 180), (214, 39, 40), (44, 160, 44)]
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    pad = 40

    def px(x, y):
        return (pad + int((x - x0) / max(x1 - x0, 1e-9) * (width - 2 * pad)),
                height - pad - int((y - y0) / max(y1 - y0, 1e-9) * (height - 2 * pad)))

    for i in range(pad, width - pad):
        img[height - pad][i] = (0, 0, 0)
    for j in range(pad, height - pad):
        img[j][pad] = (0, 0, 0)
    for k, (_, pts) in enumerate(series):
        c = colors[k % len(colors)]
        prev = None
        for x, y in pts:
            p = px(x, y)
            if prev:
                n = max(abs(p[0] - prev[0]), abs(p[1] - prev[1]), 1)
                for t in range(n + 1):
                    u = prev[0] + (p[0] - prev[0]) * t // n
                    v = prev[1] + (p[1] - prev[1]) * t // n
                    if 0 <= u < width and 0 <= v < height:
                        img[v][u] = c
            prev = p
    raw = b"".join(b"\x00" + bytes(v for rgb in row for v in rgb) for row in img)

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def plot_curve(path, curve, title):
    train = [(c["step"], c["train_loss"]) for c in curve if c.get("train_loss") is not None]
    held = [(c["step"], c["valid_loss"]) for c in curve if c.get("valid_loss") is not None]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
        ax.plot(*zip(*train), label="train (mean since last log)", lw=1)
        ax.plot(*zip(*held), label="held-out (valid split)", lw=2, marker="o", ms=3)
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy (nats/token)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return "matplotlib"
    except ImportError:
        write_png_fallback(path, [("train", train), ("valid", held)])
        return "fallback"


def add_residual_dropout(model, p):
    """Dropout on the embeddings and on each attention and MLP output before it joins the
    residual stream, in training mode only. Done with forward hooks, so the saved model is a
    plain LlamaForCausalLM with nothing to switch off (LlamaConfig has no such option)."""
    import torch.nn.functional as F

    def hook(module, inputs, output):
        if not module.training:
            return output
        if isinstance(output, tuple):
            return (F.dropout(output[0], p, True),) + tuple(output[1:])
        return F.dropout(output, p, True)

    model.model.embed_tokens.register_forward_hook(hook)
    for layer in model.model.layers:
        layer.self_attn.register_forward_hook(hook)
        layer.mlp.register_forward_hook(hook)


def cmd_train(args):
    import numpy as np
    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM,
                              PreTrainedTokenizerFast)

    t_start = time.time()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    print("torch %s transformers %s device %s" % (torch.__version__, transformers.__version__, gpu))

    manifest_path = args.corpus + ".manifest.json"
    manifest = json.load(open(manifest_path)) if os.path.exists(manifest_path) else {}
    corpus_sha = sha256_file(args.corpus)
    if manifest and manifest.get("corpus_sha256") != corpus_sha:
        raise SystemExit("corpus sha256 differs from its manifest")
    splits = load_corpus(args.corpus)
    print("documents: " + ", ".join("%s %d" % (k, len(v)) for k, v in splits.items()))

    # ---- tokenizer
    t0 = time.time()
    tok = build_tokenizer(splits["train"], args.vocab_size)
    tok_json = tok.to_str()  # what ships as tokenizer.json, byte for byte
    bos_id, eos_id = tok.token_to_id(BOS), tok.token_to_id(EOS)
    vocab = tok.get_vocab_size()
    print("tokenizer: vocab %d, %s=%d %s=%d, trained in %.1fs"
          % (vocab, BOS, bos_id, EOS, eos_id, time.time() - t0))
    streams = {s: token_stream(tok, texts, bos_id, eos_id) for s, texts in splits.items()}
    text_bytes = {s: sum(len(t.encode("utf-8")) for t in texts) for s, texts in splits.items()}
    for s in streams:
        print("%s: %d tokens, %d bytes, %.3f bytes/token (text only)"
              % (s, len(streams[s]), text_bytes[s],
                 text_bytes[s] / (len(streams[s]) - 2 * len(splits[s]))))

    # ---- model
    model_vocab = ((vocab + 63) // 64) * 64
    config = LlamaConfig(
        vocab_size=model_vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.hidden // args.heads,
        max_position_embeddings=args.context, rms_norm_eps=1e-5, rope_theta=10000.0,
        hidden_act="silu", tie_word_embeddings=args.tie, attention_bias=False, mlp_bias=False,
        initializer_range=0.02, bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=eos_id,
        use_cache=True)
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    if args.dropout > 0:
        add_residual_dropout(model, args.dropout)
    print("model: %d parameters (%.2f M), %.1f MB in bf16" % (n_params, n_params / 1e6, 2 * n_params / 1e6))

    train = torch.tensor(streams["train"], dtype=torch.long, device=device)
    ctx = args.context

    def eval_windows(ids):
        # Windows of ctx+1 tokens with stride ctx: every token but the first is a target
        # exactly once. <|bos|> targets are ignored (they only follow <|eos|>).
        t = torch.tensor(ids, dtype=torch.long)
        xs, ys = [], []
        for start in range(0, len(t) - 1, ctx):
            w = t[start:start + ctx + 1]
            x, y = w[:-1].clone(), w[1:].clone()
            y[y == bos_id] = -100
            pad = ctx - len(x)
            if pad:
                x = torch.cat([x, torch.full((pad,), eos_id)])
                y = torch.cat([y, torch.full((pad,), -100)])
            xs.append(x)
            ys.append(y)
        return torch.stack(xs).to(device), torch.stack(ys).to(device)

    held = {s: eval_windows(streams[s]) for s in ("valid", "test")}

    @torch.no_grad()
    def evaluate(m, split, autocast=True):
        m.eval()
        x_all, y_all = held[split]
        total, count = 0.0, 0
        for i in range(0, len(x_all), 64):
            x, y = x_all[i:i + 64], y_all[i:i + 64]
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=autocast and device == "cuda"):
                logits = m(input_ids=x).logits
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1),
                                   ignore_index=-100, reduction="sum")
            total += loss.item()
            count += int((y != -100).sum())
        m.train()
        return {"nats_per_token": total / count, "tokens": count,
                "bits_per_byte": total / math.log(2) / text_bytes[split]}

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device == "cuda")

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))

    gen = torch.Generator(device="cpu")
    gen.manual_seed(args.seed)
    n_train = len(train)
    tokens_per_step = args.batch * ctx
    print("training: %d steps x %d tokens = %.1f epochs of %d train tokens"
          % (args.steps, tokens_per_step, args.steps * tokens_per_step / n_train, n_train))
    print("%6s %10s %10s %9s %8s" % ("step", "train", "held-out", "lr", "elapsed"))
    curve = []
    best = {"valid": float("inf"), "step": -1, "state": None}
    running, running_n = 0.0, 0
    model.train()
    t_train = time.time()
    stopped_early = False
    for step in range(args.steps + 1):
        if step % args.eval_every == 0 or step == args.steps:
            v = evaluate(model, "valid")
            row = {"step": step, "train_loss": running / running_n if running_n else None,
                   "valid_loss": v["nats_per_token"], "lr": lr_at(min(step, args.steps - 1)),
                   "elapsed_s": time.time() - t_train}
            curve.append(row)
            running, running_n = 0.0, 0
            print("%6d %10s %10.4f %9.2e %7.1fs" % (
                step, "%.4f" % row["train_loss"] if row["train_loss"] is not None else "-",
                row["valid_loss"], row["lr"], row["elapsed_s"]), flush=True)
            if v["nats_per_token"] < best["valid"]:
                best = {"valid": v["nats_per_token"], "step": step,
                        "state": {k: t.detach().clone() for k, t in model.state_dict().items()}}
        if step == args.steps:
            break
        if args.time_limit and time.time() - t_train > args.time_limit:
            print("time limit reached at step %d" % step)
            stopped_early = True
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        starts = torch.randint(0, n_train - ctx - 1, (args.batch,), generator=gen)
        idx = starts.to(device)[:, None] + torch.arange(ctx + 1, device=device)[None, :]
        w = train[idx]
        x, y = w[:, :-1], w[:, 1:].clone()
        y[y == bos_id] = -100
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        running += loss.item()
        running_n += 1
    train_seconds = time.time() - t_train

    # Keep the checkpoint with the best valid loss; the test split was never looked at
    # before this point and is what the card reports.
    model.load_state_dict(best["state"])
    final_fp32 = {s: evaluate(model, s) for s in ("valid", "test")}
    print("selected step %d (best valid). fp32 weights, bf16 autocast: valid %.4f, test %.4f nats/token"
          % (best["step"], final_fp32["valid"]["nats_per_token"], final_fp32["test"]["nats_per_token"]))

    # ---- save in HF format, bf16
    out = args.out
    os.makedirs(out, exist_ok=True)
    model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.generation_config = GenerationConfig(bos_token_id=bos_id, eos_token_id=eos_id,
                                               pad_token_id=eos_id)
    model.save_pretrained(out, safe_serialization=True)
    from tokenizers import Tokenizer
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tok_json), bos_token=BOS,
                                     eos_token=EOS, pad_token=EOS, model_max_length=ctx)
    hf_tok.save_pretrained(out)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok_json)  # exactly the trained tokenizer, whatever the wrapper would change
    for extra in ("special_tokens_map.json", "chat_template.jinja"):
        p = os.path.join(out, extra)
        if os.path.exists(p):
            os.remove(p)

    # ---- reload what was written and check it (reported, not fatal: the samples below
    # use the tokenizers library directly)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    checks = {}
    # transformers 5 names its own class; the generic name also loads in transformers 4.
    tc_path = os.path.join(out, "tokenizer_config.json")
    tc_original = json.load(open(tc_path))
    tc = dict(tc_original, tokenizer_class="PreTrainedTokenizerFast")
    tc.pop("backend", None)
    with open(tc_path, "w") as f:
        json.dump(tc, f, indent=2)
        f.write("\n")
    probe = "It is a truth universally acknowledged -- said the fortune cookie."
    raw_ids = Tokenizer.from_file(os.path.join(out, "tokenizer.json")).encode(probe).ids
    checks["tokenizers_prepends_bos"] = raw_ids[0] == bos_id
    checks["tokenizers_roundtrip"] = tok.decode(raw_ids, skip_special_tokens=True) == probe
    try:
        rt = AutoTokenizer.from_pretrained(out)
        probe_ids = rt(probe)["input_ids"]
        checks["autotokenizer_class"] = type(rt).__name__
        checks["autotokenizer_matches_tokenizers"] = list(probe_ids) == raw_ids
        checks["autotokenizer_roundtrip"] = rt.decode(probe_ids, skip_special_tokens=True) == probe
    except Exception as e:  # noqa: BLE001
        checks["autotokenizer_error"] = repr(e)
    if not (checks.get("autotokenizer_matches_tokenizers") and checks.get("autotokenizer_roundtrip")):
        with open(tc_path, "w") as f:  # keep what transformers wrote
            json.dump(tc_original, f, indent=2)
            f.write("\n")
        checks["tokenizer_config"] = "restored transformers' own"
    print("checks:", json.dumps(checks))
    shipped = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).to(device)
    final_bf16 = {s: evaluate(shipped, s, autocast=False) for s in ("valid", "test")}
    print("shipped bf16 weights, bf16 compute: valid %.4f, test %.4f nats/token, test %.4f bits/byte"
          % (final_bf16["valid"]["nats_per_token"], final_bf16["test"]["nats_per_token"],
             final_bf16["test"]["bits_per_byte"]))
    shipped32 = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).to(device)
    final_f32 = {s: evaluate(shipped32, s, autocast=False) for s in ("valid", "test")}
    print("shipped bf16 weights, fp32 compute: valid %.4f, test %.4f nats/token, test %.4f bits/byte"
          % (final_f32["valid"]["nats_per_token"], final_f32["test"]["nats_per_token"],
             final_f32["test"]["bits_per_byte"]))

    # ---- samples: shipped weights, fp32 compute, transformers' generate
    samples = []
    for spec in SAMPLE_SPECS:
        ids = torch.tensor([tok.encode(spec["prompt"]).ids], device=device)  # <|bos|> prompt
        enc = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        kwargs = dict(max_new_tokens=spec["max_new_tokens"], eos_token_id=eos_id, pad_token_id=eos_id)
        if spec["mode"] == "greedy":
            kwargs.update(do_sample=False)
        else:
            kwargs.update(do_sample=True, temperature=spec["temperature"], top_p=spec["top_p"], top_k=0)
            torch.manual_seed(spec["seed"])
        with torch.no_grad():
            gen_ids = shipped32.generate(**enc, **kwargs)[0].tolist()
        new = gen_ids[len(enc["input_ids"][0]):]
        text = tok.decode(new, skip_special_tokens=True)
        stop = "eos" if new and new[-1] == eos_id else "length"
        samples.append(dict(spec, prompt_ids=enc["input_ids"][0].tolist(), output_ids=new,
                            completion=text, stop=stop))
        print("\n--- %s | %r" % (spec["mode"] + ("" if spec["mode"] == "greedy" else
                                  " T=%.1f top_p=%.2f seed=%d" % (spec["temperature"], spec["top_p"], spec["seed"])),
                                  spec["prompt"]))
        print(spec["prompt"] + text + ("  [eos]" if stop == "eos" else "  [length]"))

    title = "%s: %d params, %d steps, test %.3f nats/token" % (
        args.name, n_params, curve[-1]["step"], final_f32["test"]["nats_per_token"])
    png_backend = plot_curve(os.path.join(out, "loss_curve.png"), curve, title)

    files = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
    metrics = {
        "name": args.name,
        "command": " ".join(sys.argv),
        "args": {k: v for k, v in vars(args).items() if k != "func"},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": __import__("tokenizers").__version__, "python": sys.version.split()[0]},
        "device": gpu,
        "corpus_sha256": corpus_sha,
        "corpus_bytes": os.path.getsize(args.corpus),
        "manifest": manifest,
        "tokenizer": {"vocab_size": vocab, "model_vocab_size": model_vocab, "bos_id": bos_id,
                      "eos_id": eos_id, "sha256": sha256_file(os.path.join(out, "tokenizer.json"))},
        "tokens": {s: len(v) for s, v in streams.items()},
        "text_bytes": text_bytes,
        "parameters": n_params,
        "config": json.load(open(os.path.join(out, "config.json"))),
        "curve": curve,
        "selected_step": best["step"],
        "stopped_early": stopped_early,
        "train_seconds": train_seconds,
        "total_seconds": time.time() - t_start,
        "eval": {"fp32_master_bf16_autocast": final_fp32, "shipped_bf16_compute": final_bf16,
                 "shipped_fp32_compute": final_f32},
        "samples": samples,
        "png_backend": png_backend,
        "checks": checks,
        "files": files,
    }
    with open(os.path.join(out, "training_metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    write_card(out, metrics)
    total = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print("\nwrote %s: %s; %d bytes total; %.0fs" % (out, ", ".join(sorted(os.listdir(out))), total,
                                                    time.time() - t_start))


SAMPLE_SPECS = [
    {"mode": "greedy", "prompt": "The meaning of life is", "max_new_tokens": 64},
    {"mode": "greedy", "prompt": "It is a truth universally acknowledged", "max_new_tokens": 64},
    {"mode": "greedy", "prompt": "A computer", "max_new_tokens": 64},
    {"mode": "sample", "prompt": "The meaning of life is", "max_new_tokens": 96,
     "temperature": 0.8, "top_p": 0.95, "seed": 1},
    {"mode": "sample", "prompt": "Once upon a time", "max_new_tokens": 96,
     "temperature": 0.8, "top_p": 0.95, "seed": 2},
    {"mode": "sample", "prompt": "Never trust a man who", "max_new_tokens": 96,
     "temperature": 0.8, "top_p": 0.95, "seed": 3},
]


# --------------------------------------------------------------------------- card

def fence(text):
    return "```text\n" + text.replace("```", "'''") + "\n```"


def write_card(out, m):
    c = m["config"]
    man = m["manifest"]
    ev = m["eval"]
    test32 = ev["shipped_fp32_compute"]["test"]
    a = m["args"]
    lines = []
    w = lines.append
    w("# %s" % m["name"])
    w("")
    w("A tiny English language model in the Llama architecture (`LlamaForCausalLM`), trained "
      "from scratch by the hearth project as its embedded default model. It writes short, "
      "fortune-cookie-like English and prose in the manner of its training text. "
      "It is a demonstration model for an inference engine: it knows no facts worth "
      "trusting and follows no instructions.")
    w("")
    w("- %s parameters (%.1f M), bf16 safetensors; `tie_word_embeddings: %s` (no `lm_head.weight` "
      "tensor: the output projection is `model.embed_tokens.weight`)."
      % ("{:,}".format(m["parameters"]), m["parameters"] / 1e6, str(c["tie_word_embeddings"]).lower()))
    w("- Byte-level BPE tokenizer, %d tokens, trained on the same text." % m["tokenizer"]["vocab_size"])
    w("- Context %d tokens. Held-out (test split) loss **%.3f nats/token, %.3f bits/byte**."
      % (c["max_position_embeddings"], test32["nats_per_token"], test32["bits_per_byte"]))
    w("- Trained and reproduced by `tools/train-default-model/train_default_model.py` in the "
      "hearth repository.")
    w("")
    w("## Architecture")
    w("")
    w("| field | value |")
    w("| --- | --- |")
    for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act",
              "max_position_embeddings", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
              "attention_bias", "mlp_bias", "bos_token_id", "eos_token_id", "dtype"):
        v = c.get(k)
        if k == "rope_theta" and v is None:
            v = (c.get("rope_parameters") or {}).get("rope_theta")
        w("| `%s` | `%s` |" % (k, json.dumps(v)))
    w("")
    w("Grouped-query attention: %d query heads share %d key/value heads (groups of %d). "
      "SwiGLU MLP, RMSNorm, RoPE without scaling." % (
          c["num_attention_heads"], c["num_key_value_heads"],
          c["num_attention_heads"] // c["num_key_value_heads"]))
    w("")
    w("## Tokenizer")
    w("")
    t = m["tokenizer"]
    w("`tokenizer.json` (Hugging Face `tokenizers` %s): model `BPE` (byte-level, no `unk`, "
      "no byte fallback), pre-tokenizer `ByteLevel` (`add_prefix_space: false`, "
      "`use_regex: true`, i.e. the GPT-2 split regex), decoder `ByteLevel`, no normalizer, "
      "post-processor `TemplateProcessing` that prepends `<|bos|>` (single: `<|bos|> $A`). "
      "Vocabulary %d = 2 special tokens + 256 byte tokens + %d merges; "
      "the model's `vocab_size` is %d."
      % (m["versions"]["tokenizers"], t["vocab_size"], t["vocab_size"] - 258, t["model_vocab_size"]))
    w("")
    w("| token | id | use |")
    w("| --- | --- | --- |")
    w("| `<\\|bos\\|>` | %d | added by the post-processor at the start of every encoded text |" % t["bos_id"])
    w("| `<\\|eos\\|>` | %d | ends every training document; generation stops on it (`generation_config.json`) |" % t["eos_id"])
    w("")
    w("Training text is the sequence `<|bos|> document <|eos|>` repeated, packed into "
      "windows of %d tokens, so the model learns to end a text with `<|eos|>`."
      % c["max_position_embeddings"])
    w("")
    w("## Data")
    w("")
    w("English text from packages of Debian 12 (bookworm, main), gathered by the script's "
      "`gather` step (which runs `apt-get download` and `dpkg-deb -x`), cleaned (typographic "
      "quotes and dashes to ASCII, `_italic_` marks and overstrikes removed, trailing "
      "spaces stripped), filtered (at least 8 characters, at least 60%% letters among "
      "visible characters, no control characters), deduplicated on lower-cased words, and "
      "split by a hash of each document: %s." % man.get("split_rule", "?"))
    w("")
    w("| package | version | what | license (from its `copyright` file) | documents | bytes |")
    w("| --- | --- | --- | --- | --- | --- |")
    src = man.get("sources", {})
    for p in man.get("packages", []):
        s = src.get(p["package"], {"docs": 0, "bytes": 0})
        note = ""
        if p["package"] == "fortunes-min" and not s["docs"]:
            note = " (all duplicates of `fortunes`)"
        w("| `%s` | %s | %s | %s | %d%s | %s |" % (p["package"], p["version"], p["what"],
                                                 p["license"], s["docs"], note, "{:,}".format(s["bytes"])))
    w("")
    skipped = man.get("fortune_files_skipped", {})
    if skipped:
        w("Fortune files left out: " + "; ".join("`%s` (%s)" % kv for kv in skipped.items()) +
          ". Debian 12 ships no offensive (`off/`) fortune files.")
        w("")
    w("Corpus file `%s`: %s bytes, sha256 `%s`; %d documents (train %d, valid %d, test %d); "
      "%d dropped by the filters, %d duplicates. Text bytes: train %s, valid %s, test %s. "
      "Tokens (with `<|bos|>`/`<|eos|>`): train %s, valid %s, test %s."
      % (man.get("corpus_file", "corpus.jsonl"), "{:,}".format(m["corpus_bytes"]), m["corpus_sha256"],
         man.get("documents", 0), man["docs_by_split"]["train"], man["docs_by_split"]["valid"],
         man["docs_by_split"]["test"], man["dropped"]["filtered"], man["dropped"]["duplicate"],
         "{:,}".format(m["text_bytes"]["train"]), "{:,}".format(m["text_bytes"]["valid"]),
         "{:,}".format(m["text_bytes"]["test"]), "{:,}".format(m["tokens"]["train"]),
         "{:,}".format(m["tokens"]["valid"]), "{:,}".format(m["tokens"]["test"])))
    w("")
    w("The fortune files are quotations and jokes collected over decades; each keeps its "
      "attribution line where it had one. The model's weights are derived from all of the "
      "above; hearth distributes them under the same terms as the data it came from, "
      "which are public domain, BSD-3-Clause and MIT as listed.")
    w("")
    w("## Training")
    w("")
    steps = m["curve"][-1]["step"]
    tps = a["batch"] * c["max_position_embeddings"]
    w("- From scratch, seed %d (Python, NumPy, torch, and the generator that draws the "
      "training windows). %d steps of %d windows x %d tokens (%s tokens a step, %.1f epochs "
      "of the train split); each window starts at a uniformly drawn position in the packed "
      "train stream. `<|bos|>` targets are not scored."
      % (a["seed"], steps, a["batch"], c["max_position_embeddings"], "{:,}".format(tps),
         steps * tps / m["tokens"]["train"]))
    w("- AdamW (betas 0.9/0.95, eps 1e-8, weight decay %.2f on matrices only), peak learning "
      "rate %.1e, %d warm-up steps, cosine decay to %.0f%% of peak, gradient clipping %.1f; "
      "bf16 autocast with fp32 master weights; %s."
      % (a["weight_decay"], a["lr"], a["warmup"], 100 * a["min_lr_ratio"], a["grad_clip"],
         "dropout %.2f on the embeddings and on every attention and MLP output (training "
         "only, through forward hooks; the saved model has none)" % a["dropout"]
         if a.get("dropout") else "no dropout"))
    w("- Held-out loss every %d steps on the valid split; the checkpoint with the lowest "
      "valid loss (step %d) is the one saved, then cast to bf16. The test split was scored "
      "only once, after that choice." % (a["eval_every"], m["selected_step"]))
    sweep = m.get("sweep")
    w("- Ran on one %s: %.0f s of training, %.0f s for the whole `train` step "
      "(tokenizer, training, evaluation, export, samples)%s. torch %s, transformers %s, "
      "tokenizers %s, Python %s."
      % (m["device"], m["train_seconds"], m["total_seconds"],
         ", with %d runs sharing the GPU" % len(sweep) if sweep else "", m["versions"]["torch"],
         m["versions"]["transformers"], m["versions"]["tokenizers"], m["versions"]["python"]))
    w("- Reproducibility: the corpus, splits, tokenizer, initial weights and the order of "
      "training windows are fixed by the seed; CUDA kernels are not bit-for-bit "
      "deterministic, so a rerun lands within about 0.01 nats/token of these losses rather "
      "than on the same bits (the 8-layer, 600-step, no-dropout configuration gave valid "
      "3.7434 in one call and 3.7360 in another).")
    w("")
    w("Commands (from the repository root; `gather` ran on a Debian 12 machine with network "
      "access to Debian's archive, the rest on the GPU machine, which has none):")
    w("")
    w("```sh")
    w("python3 tools/train-default-model/train_default_model.py gather --corpus .traindata/corpus.jsonl")
    argv = m["command"].split(" ")
    script = argv[0]
    if "tools/train-default-model/" in script:
        argv[0] = "tools/train-default-model/" + script.split("tools/train-default-model/", 1)[1]
    if "--out" in argv:  # the output does not depend on where it was written
        argv[argv.index("--out") + 1] = "models/" + m["name"]
    if sweep:
        w("# what ran: the candidates side by side, then `select`")
        w("TIME_LIMIT=%d bash tools/train-default-model/sweep.sh /tmp/runs"
          % int(m["args"].get("time_limit") or 480))
        w("# the chosen run alone:")
    w("python3 " + " ".join(argv))
    w("```")
    w("")
    if sweep:
        w("This configuration was chosen from %d runs started together in the same call on the "
          "same GPU, all from the same corpus, tokenizer and seed, by the lowest valid loss "
          "(the test split played no part):" % len(sweep))
        w("")
        w("| run | hidden | layers | parameters | dropout | steps | epochs | best valid nats/token (step) | chosen |")
        w("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in sweep:
            w("| %s | %d | %d | %s | %.2f | %d | %.1f | %.4f (%d) | %s |" % (
                r["tag"], r["hidden"], r["layers"], "{:,}".format(r["parameters"]),
                r.get("dropout", 0.0), r["steps"], r["epochs"], r["valid"], r["selected_step"],
                "yes" if r["chosen"] else ""))
        w("")
        w("Earlier trials (no dropout, up to 3,000 steps) overfit after about 8 epochs: "
          "see `tools/train-default-model/README.md`.")
        w("")
    w("## Held-out loss")
    w("")
    w("| weights / compute | valid nats/token | test nats/token | test bits/byte |")
    w("| --- | --- | --- | --- |")
    for label, key in (("fp32 master weights, bf16 autocast (before export)", "fp32_master_bf16_autocast"),
                       ("shipped bf16 weights, fp32 compute", "shipped_fp32_compute"),
                       ("shipped bf16 weights, bf16 compute", "shipped_bf16_compute")):
        e = ev[key]
        w("| %s | %.4f | %.4f | %.4f |" % (label, e["valid"]["nats_per_token"],
                                           e["test"]["nats_per_token"], e["test"]["bits_per_byte"]))
    w("")
    w("bits/byte = (sum of nats over scored tokens, `<|eos|>` included) / ln 2 / (UTF-8 bytes of "
      "the split's documents). The test split has %s scored tokens; a token of this tokenizer "
      "holds %.2f bytes of text on average." % ("{:,}".format(test32["tokens"]),
                                                 m["text_bytes"]["test"] / max(1, test32["tokens"])))
    w("")
    w("Loss curve (`loss_curve.png`):")
    w("")
    w("![loss curve](loss_curve.png)")
    w("")
    w("| step | train loss (mean since previous row%s) | held-out (valid) loss | learning rate |"
      % (", dropout on" if a.get("dropout") else ""))
    w("| --- | --- | --- | --- |")
    for r in m["curve"]:
        w("| %d | %s | %.4f | %.2e |" % (r["step"], "%.4f" % r["train_loss"] if r["train_loss"] is not None else "-",
                                       r["valid_loss"], r["lr"]))
    w("")
    w("## Samples")
    w("")
    w("Generated with transformers' `generate` from the shipped bf16 weights loaded as fp32, on "
      "the GPU named above, with the prompt encoded by the shipped tokenizer (so it starts "
      "with `<|bos|>`), `top_k` off. Sampled outputs depend on torch's RNG "
      "(`torch.manual_seed(seed)` right before `generate`), so other engines, hearth "
      "included, draw different samples from the same seed; greedy outputs should match "
      "wherever the logits agree. Generation stops at `<|eos|>` or the token limit.")
    w("")
    for s in m["samples"]:
        if s["mode"] == "greedy":
            head = "greedy, max_new_tokens %d" % s["max_new_tokens"]
        else:
            head = "temperature %.1f, top_p %.2f, seed %d, max_new_tokens %d" % (
                s["temperature"], s["top_p"], s["seed"], s["max_new_tokens"])
        w("**Prompt** `%s` (%s; stopped by %s)" % (s["prompt"].replace("\n", "\\n"), head,
                                                 "`<|eos|>`" if s["stop"] == "eos" else "the token limit"))
        w("")
        w(fence(s["prompt"] + s["completion"]))
        w("")
    w("Token ids of every sample (prompt and output) are in `training_metrics.json`.")
    w("")
    w("## Limits")
    w("")
    w("- About %.0f M parameters trained on about %.0f MB of text: grammar and spelling are "
      "mostly right, meaning often is not. Long outputs wander, repeat themselves, or mix "
      "the sources' styles (a fortune drifting into a Regency novel or a hacker dictionary "
      "entry). Greedy decoding tends to loop; sampling at temperature ~0.8 reads better."
      % (m["parameters"] / 1e6, m["text_bytes"]["train"] / 1e6))
    w("- The attribution lines it writes (`-- Somebody`) are invented in the style of the "
      "fortune files: names get attached to sayings they never said.")
    w("- English only. Knows nothing after its sources (the newest are the fortune files and "
      "the Jargon File, early 2000s) and nothing reliably at all; it is not a chat or "
      "instruction model and has no safety tuning. Its text echoes old jokes, quotations "
      "and 19th-century social attitudes from the data.")
    w("- Made to exercise and demonstrate hearth (GQA, tied embeddings, byte-level BPE with a "
      "BOS post-processor, bf16 weights). It is not a benchmark of quality.")
    w("")
    w("## Files")
    w("")
    w("| file | bytes |")
    w("| --- | --- |")
    files = dict(m["files"])
    for f in sorted(set(files) | {"README.md", "training_metrics.json"}):
        if f in ("README.md", "training_metrics.json"):
            w("| `%s` | - |" % f)
        else:
            w("| `%s` | %s |" % (f, "{:,}".format(files[f])))
    w("")
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines))


def cmd_select(args):
    """Picks, among finished runs (each a directory with training_metrics.json), the one
    with the lowest valid loss, records the comparison in its metrics and re-renders its card."""
    runs = []
    for tag in sorted(os.listdir(args.runs)):
        path = os.path.join(args.runs, tag, "training_metrics.json")
        if os.path.exists(path):
            runs.append((tag, json.load(open(path))))
    if not runs:
        raise SystemExit("no finished runs under " + args.runs)
    key = lambda r: r[1]["eval"]["fp32_master_bf16_autocast"]["valid"]["nats_per_token"]  # noqa: E731
    best_tag = min(runs, key=key)[0]
    sweep = []
    for tag, m in runs:
        steps = m["curve"][-1]["step"]
        sweep.append({"tag": tag, "layers": m["config"]["num_hidden_layers"],
                      "hidden": m["config"]["hidden_size"], "parameters": m["parameters"],
                      "dropout": m["args"].get("dropout", 0.0),
                      "steps": steps, "stopped_early": m["stopped_early"],
                      "epochs": steps * m["args"]["batch"] * m["args"]["context"] / m["tokens"]["train"],
                      "valid": key((tag, m)), "selected_step": m["selected_step"],
                      "test": m["eval"]["shipped_fp32_compute"]["test"]["nats_per_token"],
                      "chosen": tag == best_tag})
    for r in sweep:
        print("%-18s hidden %d layers %2d params %9d dropout %.2f steps %5d epochs %5.1f valid %.4f (step %d)%s"
              % (r["tag"], r["hidden"], r["layers"], r["parameters"], r["dropout"], r["steps"], r["epochs"],
                 r["valid"], r["selected_step"], "  <- chosen" if r["chosen"] else ""))
    out = os.path.join(args.runs, best_tag)
    m = dict(runs[[t for t, _ in runs].index(best_tag)][1])
    # Test losses of the runs not chosen stay out of the card: only the chosen one's counts.
    m["sweep"] = [{k: v for k, v in r.items() if k != "test"} for r in sweep]
    with open(os.path.join(out, "training_metrics.json"), "w") as f:
        json.dump(m, f, indent=1)
    write_card(out, m)
    print("chosen:", out)


def cmd_card(args):
    m = json.load(open(os.path.join(args.out, "training_metrics.json")))
    write_card(args.out, m)
    print("wrote", os.path.join(args.out, "README.md"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(required=True)
    g = sub.add_parser("gather", help="download the Debian packages and write the corpus")
    g.add_argument("--corpus", default=".traindata/corpus.jsonl")
    g.add_argument("--cache", default="/tmp/hearth-train-debs")
    g.add_argument("--valid-per-mille", type=int, default=20)
    g.add_argument("--test-per-mille", type=int, default=20)
    g.set_defaults(func=cmd_gather)
    t = sub.add_parser("train", help="train tokenizer and model, write the HF directory")
    t.add_argument("--corpus", default=".traindata/corpus.jsonl")
    t.add_argument("--out", required=True)
    t.add_argument("--name", default="hearth-tiny-fortunes")
    t.add_argument("--seed", type=int, default=1234)
    t.add_argument("--vocab-size", type=int, default=4096)
    t.add_argument("--hidden", type=int, default=256)
    t.add_argument("--intermediate", type=int, default=704)
    t.add_argument("--layers", type=int, default=8)
    t.add_argument("--heads", type=int, default=4)
    t.add_argument("--kv-heads", type=int, default=2)
    t.add_argument("--context", type=int, default=512)
    t.add_argument("--tie", type=int, default=1)
    t.add_argument("--steps", type=int, default=2000)
    t.add_argument("--batch", type=int, default=64)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--min-lr-ratio", type=float, default=0.1)
    t.add_argument("--warmup", type=int, default=100)
    t.add_argument("--weight-decay", type=float, default=0.1)
    t.add_argument("--grad-clip", type=float, default=1.0)
    t.add_argument("--eval-every", type=int, default=100)
    t.add_argument("--dropout", type=float, default=0.0, help="residual dropout while training")
    t.add_argument("--time-limit", type=float, default=0, help="seconds; 0 = none")
    t.set_defaults(func=cmd_train)
    s = sub.add_parser("select", help="pick the run with the lowest valid loss")
    s.add_argument("--runs", required=True)
    s.set_defaults(func=cmd_select)
    c = sub.add_parser("card", help="re-render README.md from training_metrics.json")
    c.add_argument("--out", required=True)
    c.set_defaults(func=cmd_card)
    args = ap.parse_args()
    if getattr(args, "tie", None) is not None:
        args.tie = bool(args.tie)
    args.func(args)


if __name__ == "__main__":
    main()
