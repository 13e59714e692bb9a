#!/usr/bin/env python3
"""Golden token ids and decodes from Hugging Face `tokenizers`, the reference hearth must equal.

usage: golden_ids.py CACHE_DIR OUT_DIR [--variants-only]

CACHE_DIR holds llama2/, llama3/, qwen3/ with tokenizer.json (tools/tokenizer/fetch-tokenizers.sh).
Writes OUT_DIR/{llama2,llama3,qwen3,variants}.jsonl and OUT_DIR/meta.json. Needs only the
`tokenizers` package (0.23 made the committed files); run it where that is installed.

Record fields (absent fields mean "same as" so the files stay small, yet every assertion is exact):
  i        corpus line index (corpus.jsonl), or hex: the invalid UTF-8 input (invalid_utf8.jsonl),
           HF encodes bytes.decode("utf-8", "replace") of it; or rd: random ids (decode only)
  ids      encode(text, add_special_tokens=False)
  pre/suf  encode(text, add_special_tokens=True) == pre + ids + suf; ids_sp when not of that form
  dec      decode(ids, skip_special_tokens=False); absent: equals the text
  dec_sp   decode(ids with special tokens, False); absent: no special tokens were added
  dec_skip decode(ids with special tokens, True); absent: equals dec
  *_panic  HF panicked instead of decoding (the message); hearth must merely not crash there
Variant records also carry v: the variant name (tools/tokenizer/variants.json).
"""

import json
import os
import random
import sys
import time

from tokenizers import Tokenizer
import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
BASES = ["llama2", "llama3", "qwen3"]


def read_lines(path):
    with open(path, "rb") as f:
        return [json.loads(line) for line in f.read().split(b"\n") if line]


def apply_variant(config, variant):
    """Same edits as tests/tokenizer/golden_test.cc applies."""
    for key, value in variant.get("set", {}).items():
        node = config
        parts = key.split(".")
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = value
    for tok in variant.get("added_tokens", []):
        for existing in config["added_tokens"]:
            if existing["content"] == tok["content"]:
                existing.update(tok)
                break
        else:
            config["added_tokens"].append(dict(tok))
    return config


def guarded(fn):
    """HF panics on a few inputs (PanicException derives from BaseException): keep the message."""
    try:
        return True, fn()
    except BaseException as e:  # noqa: B036 -- a panic is what we want to record
        if isinstance(e, KeyboardInterrupt):
            raise
        return False, "%s: %s" % (type(e).__name__, e)


def record(tok, text):
    ids = tok.encode(text, add_special_tokens=False).ids
    ids_sp = tok.encode(text, add_special_tokens=True).ids
    rec = {"ids": ids}
    if ids_sp != ids:
        placed = False
        for start in range(len(ids_sp) - len(ids) + 1):
            if ids_sp[start:start + len(ids)] == ids:
                rec["pre"] = ids_sp[:start]
                rec["suf"] = ids_sp[start + len(ids):]
                placed = True
                break
        if not placed:
            rec["ids_sp"] = ids_sp
    ok, dec = guarded(lambda: tok.decode(ids, skip_special_tokens=False))
    if not ok:
        rec["dec_panic"] = dec
    elif dec != text:
        rec["dec"] = dec
    if ids_sp != ids:
        ok, dec_sp = guarded(lambda: tok.decode(ids_sp, skip_special_tokens=False))
        rec["dec_sp" if ok else "dec_sp_panic"] = dec_sp
    ok, skip = guarded(lambda: tok.decode(ids_sp, skip_special_tokens=True))
    if not ok:
        rec["dec_skip_panic"] = skip
    elif skip != dec:
        rec["dec_skip"] = skip
    for k in ("pre", "suf"):
        if k in rec and not rec[k]:
            del rec[k]
    return rec


def random_decodes(tok, config, rng, count):
    """Decode-only records: ids in odd orders (lone byte tokens, specials, out-of-vocab ids)."""
    vocab = config["model"]["vocab"]
    size = max(vocab.values()) + 1
    byte_ids = [i for t, i in vocab.items() if len(t) == 6 and t.startswith("<0x")]
    added = [t["id"] for t in config["added_tokens"]]
    out = []
    for _ in range(count):
        ids = []
        for _ in range(rng.randrange(0, 40)):
            k = rng.randrange(10)
            if k < 4:
                ids.append(rng.randrange(size))
            elif k < 7 and byte_ids:
                ids.append(rng.choice(byte_ids))
            elif k < 8 and added:
                ids.append(rng.choice(added))
            elif k < 9:
                ids.append(size + len(added) + rng.randrange(1000))  # outside every vocabulary
            else:
                ids.append(rng.randrange(min(size, 400)))
        rec = {"rd": ids}
        ok, dec = guarded(lambda: tok.decode(ids, skip_special_tokens=False))
        rec["dec" if ok else "dec_panic"] = dec
        if not ok:
            dec = None
        ok, skip = guarded(lambda: tok.decode(ids, skip_special_tokens=True))
        if not ok:
            rec["dec_skip_panic"] = skip
        elif skip != dec:
            rec["dec_skip"] = skip
        out.append(rec)
    return out


def main():
    cache, out_dir = sys.argv[1], sys.argv[2]
    variants_only = "--variants-only" in sys.argv[3:]
    os.makedirs(out_dir, exist_ok=True)
    corpus = read_lines(os.path.join(HERE, "corpus.jsonl"))
    invalid = read_lines(os.path.join(HERE, "invalid_utf8.jsonl"))
    with open(os.path.join(HERE, "variants.json"), encoding="utf-8") as f:
        variants = json.load(f)
    stride = variants["stride"]
    meta = {"tokenizers_version": tokenizers.__version__, "python": sys.version.split()[0],
            "corpus_lines": len(corpus), "stride": stride, "errors": {}, "added_token_ids": {}}
    configs = {}
    for base in BASES:
        with open(os.path.join(cache, base, "tokenizer.json"), encoding="utf-8") as f:
            configs[base] = json.load(f)

    for base in [] if variants_only else BASES:
        t0 = time.time()
        path = os.path.join(out_dir, base + ".jsonl")
        try:
            tok = Tokenizer.from_str(json.dumps(configs[base]))
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                for i, text in enumerate(corpus):
                    rec = {"i": i}
                    rec.update(record(tok, text))
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                for h in invalid:
                    rec = {"hex": h}
                    rec.update(record(tok, bytes.fromhex(h).decode("utf-8", "replace")))
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                for rec in random_decodes(tok, configs[base], random.Random(base), 300):
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        except BaseException as e:  # keep going: one broken base must not waste the device call
            meta["errors"][base] = repr(e)
        print("%s: %.1fs" % (base, time.time() - t0), flush=True)

    with open(os.path.join(out_dir, "variants.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for variant in variants["variants"]:
            t0 = time.time()
            name = variant["name"]
            try:
                config = apply_variant(json.loads(json.dumps(configs[variant["base"]])), variant)
                tok = Tokenizer.from_str(json.dumps(config))
                meta["added_token_ids"][name] = {
                    t["content"]: tok.token_to_id(t["content"]) for t in variant.get("added_tokens", [])}
                for i in range(0, len(corpus), stride):
                    rec = {"v": name, "i": i}
                    rec.update(record(tok, corpus[i]))
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                for rec in random_decodes(tok, config, random.Random(name), 60):
                    rec = dict(v=name, **rec)
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            except BaseException as e:
                meta["errors"][name] = repr(e)
            print("%s: %.1fs" % (name, time.time() - t0), flush=True)

    meta["vocab_sizes"] = {}
    for base in BASES:
        ok, sizes = guarded(lambda: [Tokenizer.from_str(json.dumps(configs[base])).get_vocab_size(w)
                                     for w in (False, True)])
        meta["vocab_sizes"][base] = sizes

    # Reference speed of HF's single-call encode on this corpus (informational only).
    try:
        tok = Tokenizer.from_str(json.dumps(configs["llama3"]))
        lines = [s for s in corpus if s] * 4
        t0 = time.time()
        for s in lines:
            tok.encode(s, add_special_tokens=False)
        secs = time.time() - t0
        meta["hf_llama3_encode_corpus_mb_s"] = sum(len(s.encode()) for s in lines) / secs / 1e6
    except BaseException as e:
        meta["errors"]["timing"] = repr(e)

    with open(os.path.join(out_dir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    print(json.dumps(meta, ensure_ascii=False))


if __name__ == "__main__":
    main()
