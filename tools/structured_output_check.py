#!/usr/bin/env python3
"""Structured output, checked end to end: generated JSON schemas x seeds on a model.

Writes N random schemas from the subset hearth supports (worker/engine/structured/
json_schema_language.h: objects with required and optional properties, arrays with item bounds,
strings with length bounds, bounded and unbounded integers and numbers, booleans, null, enums,
consts, type lists, anyOf, nesting), runs them all as one --requests file through one
hearth-worker (guided_json, sampled at temperature 1 with each seed), and validates every
output that ended with end-of-sequence against its schema with python3-jsonschema. An output
cut by max_tokens must still be a prefix the schema allows, which the engine guarantees and the
unit tests check; here it is counted. Exit status 1 when any output is invalid or any request
failed.

usage: tools/structured_output_check.py --worker build/bin/hearth-worker \
           --model models/hearth-tiny-fortunes [--schemas 1000] [--seeds 3] [--max-tokens 256]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

import jsonschema

WORDS = ["name", "age", "city", "luck", "color", "items", "score", "ok", "tags", "note", "id",
         "when", "level", "kind", "value"]


def gen_schema(rng, depth=0):
    """One random schema of the supported subset; containers nest at most 3 deep."""
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const", "types"]
    if depth < 3:
        kinds += ["object", "object", "array", "anyOf"]
    kind = rng.choice(kinds)
    if kind == "string":
        s = {"type": "string"}
        lo = rng.choice([None, 0, 1, 3])
        hi = rng.choice([None, 5, 12, 24])
        if lo is not None:
            s["minLength"] = lo
        if hi is not None and (lo is None or hi >= lo):
            s["maxLength"] = hi
        elif "maxLength" not in s:
            s["maxLength"] = 16  # bounded, so a sampled model finishes
        return s
    if kind == "integer":
        s = {"type": "integer"}
        a, b = sorted(rng.sample(range(-1000, 1000), 2))
        r = rng.random()
        if r < 0.4:
            s["minimum"], s["maximum"] = a, b
        elif r < 0.55:
            s["minimum"] = a
        elif r < 0.7:
            s["maximum"] = b
        elif r < 0.8:
            s["exclusiveMinimum"], s["exclusiveMaximum"] = a, b + 2
        return s
    if kind == "number":
        s = {"type": "number"}
        if rng.random() < 0.5:
            a, b = sorted(rng.sample(range(-50, 50), 2))
            s["minimum"], s["maximum"] = a, b
        return s
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "null":
        return {"type": "null"}
    if kind == "enum":
        pool = ["red", "green", "blue", 1, 2.5, True, None, "a b", "\u00e9t\u00e9"]
        return {"enum": rng.sample(pool, rng.randint(1, 4))}
    if kind == "const":
        return {"const": rng.choice(["fixed", 42, False, {"k": [1, "x"]}])}
    if kind == "types":
        return {"type": rng.sample(["string", "integer", "boolean", "null"], 2), "maxLength": 10}
    if kind == "anyOf":
        return {"anyOf": [gen_schema(rng, depth + 1) for _ in range(rng.randint(2, 3))]}
    if kind == "array":
        s = {"type": "array", "items": gen_schema(rng, depth + 1)}
        lo = rng.choice([0, 0, 1, 2])
        s["minItems"] = lo
        s["maxItems"] = lo + rng.choice([0, 1, 2, 3])
        return s
    names = rng.sample(WORDS, rng.randint(1, 4))
    props = {n: gen_schema(rng, depth + 1) for n in names}
    s = {"type": "object", "properties": props,
         "required": [n for n in names if rng.random() < 0.6]}
    if rng.random() < 0.7:
        s["additionalProperties"] = False
    return s


def top_schema(rng):
    """Mostly objects at the top (the common use), sometimes anything."""
    while True:
        s = gen_schema(rng)
        if s.get("type") == "object" or rng.random() < 0.25:
            return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", required=True, help="the hearth-worker binary")
    ap.add_argument("--model", required=True, help="model directory")
    ap.add_argument("--schemas", type=int, default=1000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--generator-seed", type=int, default=20261126,
                    help="seed of the schema generator (the same schemas every run)")
    ap.add_argument("--prompt", default="Answer in JSON:")
    ap.add_argument("--show", type=int, default=3, help="print this many sample outputs")
    args = ap.parse_args()

    rng = random.Random(args.generator_seed)
    schemas = [top_schema(rng) for _ in range(args.schemas)]
    for s in schemas:  # the generator itself writes only valid schemas
        jsonschema.Draft202012Validator.check_schema(s)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "requests.jsonl")
        with open(path, "w") as f:
            for i, s in enumerate(schemas):
                for seed in range(1, args.seeds + 1):
                    f.write(json.dumps({"id": f"{i}/{seed}", "prompt": args.prompt,
                                        "guided_json": s, "seed": seed, "temperature": 1.0,
                                        "max_tokens": args.max_tokens}) + "\n")
        run = subprocess.run([args.worker, "--model", args.model, "--requests", path,
                              "--format", "jsonl"], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"hearth-worker failed ({run.returncode}):\n{run.stderr[-4000:]}")
    texts, stops, errors = {}, {}, {}
    for line in run.stdout.splitlines():
        e = json.loads(line)
        rid = e.get("id")
        if rid is None:
            continue
        if e.get("done"):
            stops[rid] = e.get("stop")
            if "error" in e:
                errors[rid] = e["error"]
            texts[rid] = texts.get(rid, "") + e.get("visible", "")
        else:
            texts[rid] = texts.get(rid, "") + e.get("visible", e.get("text", ""))
    total = args.schemas * args.seeds
    complete = truncated = invalid = 0
    shown = 0
    for i, s in enumerate(schemas):
        for seed in range(1, args.seeds + 1):
            rid = f"{i}/{seed}"
            stop = stops.get(rid)
            if stop is None or rid in errors:
                invalid += 1
                print(f"FAIL {rid}: {errors.get(rid, 'no final event')}\n  schema {json.dumps(s)}")
                continue
            if stop != "eos":
                truncated += 1
                continue
            complete += 1
            try:
                jsonschema.validate(json.loads(texts[rid]), s)
                if shown < args.show:
                    shown += 1
                    print(f"ok {rid}: {json.dumps(s)}\n  -> {texts[rid]}")
            except (ValueError, jsonschema.ValidationError) as err:
                invalid += 1
                print(f"INVALID {rid}: {str(err)[:300]}\n  schema {json.dumps(s)}\n"
                      f"  output {texts[rid]!r}")
    print(f"{total} outputs ({args.schemas} schemas x {args.seeds} seeds): {complete} complete "
          f"and validated, {truncated} cut at max_tokens {args.max_tokens}, {invalid} invalid "
          f"or failed")
    sys.exit(1 if invalid else 0)


if __name__ == "__main__":
    main()
