#!/usr/bin/env python3
"""hearth-tokenize start-up time: from process start to its first line of ids on stdout.

    tools/tokenizer/startup_time.py --tokenize build/bin/hearth-tokenize --tokenizer DIR [--runs 10]

Measures four ways of loading the tokenizer and prints one JSON object: wall milliseconds to
the first line and CPU milliseconds of the whole process (user + system), median and min over
the runs, for:
  parse    --no-cache: tokenizer.json parsed every time
  cold     an empty image cache: parsed, image built and stored
  cached   the image cache holds the image: opened from it
  image    --image FILE: the image opened directly, tokenizer.json not read
and the sizes of tokenizer.json and of its image.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time


def first_line_ms(cmd, env):
    """(wall ms to the first output line, CPU ms of the process)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    proc.stdin.write(b'"Hello world"\n')
    proc.stdin.flush()
    line = proc.stdout.readline()
    elapsed = (time.perf_counter() - start) * 1e3
    proc.stdin.close()
    proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0 or not line.startswith(b"["):
        raise SystemExit(f"{' '.join(cmd)} failed (status {status}, output {line!r})")
    return elapsed, (usage.ru_utime + usage.ru_stime) * 1e3


def summary(samples):
    wall = [w for w, _ in samples]
    cpu = [c for _, c in samples]
    return {"wall_median_ms": round(statistics.median(wall), 1), "wall_min_ms": round(min(wall), 1),
            "cpu_median_ms": round(statistics.median(cpu), 1), "cpu_min_ms": round(min(cpu), 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tokenize", required=True, help="the hearth-tokenize binary")
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json or a model directory")
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()

    base = [args.tokenize, "--tokenizer", args.tokenizer]
    json_path = args.tokenizer
    if os.path.isdir(json_path):
        json_path = os.path.join(json_path, "tokenizer.json")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, HEARTH_TOKENIZER_IMAGE_CACHE=os.path.join(tmp, "cache"))
        image = os.path.join(tmp, "tokenizer.tokimg")
        subprocess.run(base + ["--build-image", image], check=True)

        results = {"parse": [], "cold": [], "cached": [], "image": []}
        first_line_ms(base, env)  # fills the cache for "cached"
        for run in range(args.runs):
            results["parse"].append(first_line_ms(base + ["--no-cache"], env))
            cold_env = dict(env, HEARTH_TOKENIZER_IMAGE_CACHE=os.path.join(tmp, f"cold{run}"))
            results["cold"].append(first_line_ms(base, cold_env))
            results["cached"].append(first_line_ms(base, env))
            results["image"].append(first_line_ms([args.tokenize, "--image", image], env))
        out = {name: summary(times) for name, times in results.items()}
        out["tokenizer_json_bytes"] = os.path.getsize(json_path)
        out["image_bytes"] = os.path.getsize(image)
        out["runs"] = args.runs
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
