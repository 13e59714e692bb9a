#!/usr/bin/env python3
"""Writes the Hopper (sm_90a) wgmma.mma_async inline-asm wrappers, one header per mode:

  ss   kernels/wgmma.cuh      m64nNk16, bf16/f16, A and B from shared memory (descriptors)
  fp8  kernels/wgmma_fp8.cuh  m64nNk32, e4m3 x e4m3, A and B from shared memory
  rs   kernels/wgmma_rs.cuh   m64nNk16, bf16/f16, A from registers, B from shared memory,
                              K-major or N-major (imm-trans-b)

All accumulate in fp32. The operand lists are long (N/2 registers), so they are generated, not
written by hand; the three modes differ only in the operands before the predicate, so one loop
writes them all. Each mode has its own header so that none moves when another's widths change.

Usage: tools/gen_wgmma.py MODE > kernels/<header> && clang-format -i kernels/<header>
       tools/gen_wgmma.py --write   (all three headers, clang-formatted, in place)"""
import itertools
import os
import re
import subprocess
import sys

TYPES16 = [("__nv_bfloat16", "bf16"), ("__half", "f16")]
INCLUDES16 = "#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n\n"


def shared_ab(r):
    """A and B as shared-memory descriptors: operands %r, %r+1."""
    return f"%{r}, %{r + 1}", '"l"(desc_a), "l"(desc_b)', 2


def register_a(r):
    """A as four 32-bit registers (a 16-bit pair each), B a descriptor."""
    a = ", ".join(f"%{r + i}" for i in range(4))
    ins = ", ".join(f'"r"(a[{i}])' for i in range(4))
    return f"{{{a}}}, %{r + 4}", f'{ins}, "l"(desc_b)', 5


# Per mode: header file, the header's comment after its first line, includes, the primary
# template, and the specializations as (template arguments, N, ptx shape and types, operand
# builder, parameters, immediates after the predicate).
def specs_ss():
    widths = [8, 16, 24, 32, 48, 64, 112, 128, 192, 224, 256]
    for (t, name), n in itertools.product(TYPES16, widths):
        yield (f"{t}, {n}", n, f"m64n{n}k16.f32.{name}.{name}", shared_ab,
               "float* d, uint64_t desc_a, uint64_t desc_b, int scale_d", "1, 1, 0, 0")


def specs_fp8():
    for n in [32, 48, 64, 128]:
        yield (f"{n}", n, f"m64n{n}k32.f32.e4m3.e4m3", shared_ab,
               "float* d, uint64_t desc_a, uint64_t desc_b, int scale_d", "1, 1")


def specs_rs():
    for (t, name), trans, n in itertools.product(TYPES16, (0, 1), [24, 32, 48, 64, 128]):
        yield (f"{t}, {n}, {'true' if trans else 'false'}", n, f"m64n{n}k16.f32.{name}.{name}",
               register_a, "float* d, const uint32_t (&a)[4], uint64_t desc_b, int scale_d",
               f"1, 1, {trans}")


MODES = {
    "ss": ("wgmma.cuh", """Hopper (sm_90a) warpgroup MMA wrappers:
// d[64 x N] (+)= A[64 x 16] . B[N x 16]^T, fp32 accumulators, A and B K-major in shared memory
// (descriptors). scale_d 0 overwrites d, 1 accumulates. Thread t of the warpgroup holds rows
// 16 * (t / 32) + (t % 32) / 4 + {0, 8} of columns 8 j + 2 (t % 4) + {0, 1}: d[4 j + {0, 1}]
// on the first row, d[4 j + {2, 3}] on the second.
""", INCLUDES16, "template <typename T, int N>\nstruct Wgmma;", "Wgmma", specs_ss),
    "fp8": ("wgmma_fp8.cuh", """Hopper (sm_90a) fp8 warpgroup MMA:
// d[64 x N] (+)= A[64 x 32] . B[N x 32]^T, A and B e4m3 codes, K-major in shared memory
// (descriptors; fp8 has no transposed form). scale_d 0 overwrites d, 1 accumulates. The
// accumulator layout is that of kernels/wgmma.cuh: thread t holds rows
// 16 * (t / 32) + (t % 32) / 4 + {0, 8} of columns 8 j + 2 (t % 4) + {0, 1}.
// The tensor core adds fp8 products into d with fewer mantissa bits than fp32: callers sum a
// few k-steps here and promote them into their own fp32 registers.
""", "", "template <int N>\nstruct WgmmaE4m3;", "WgmmaE4m3", specs_fp8),
    "rs": ("wgmma_rs.cuh", """Hopper (sm_90a) warpgroup MMA wrappers:
// d[64 x N] (+)= A[64 x 16] . B[16 x N], fp32 accumulators, A in registers (four 16-bit pairs
// per thread, the m16n8k16 A fragment of each warp's 16 rows), B in shared memory (a
// descriptor): kTransB false K-major, true N-major. scale_d 0 overwrites d, 1 accumulates. The
// accumulator layout is that of kernels/wgmma.cuh.
""", INCLUDES16, "template <typename T, int N, bool kTransB>\nstruct WgmmaRs;", "WgmmaRs",
           specs_rs),
}


def specialization(struct, targs, n, shape, operands, params, imm):
    r = n // 2
    regs = ", ".join(f"%{i}" for i in range(r))
    acc = ", ".join(f'"+f"(d[{i}])' for i in range(r))
    ops, ins, count = operands(r)
    # The last identifier of each parameter is its name: "const uint32_t (&a)[4]" is a.
    names = [re.findall(r"[A-Za-z_]\w*", p)[-1] for p in params.split(", ")]
    unused = ", ".join(f"(void){name}" for name in names)
    return f"""template <>
struct {struct}<{targs}> {{
  __device__ __forceinline__ static void run({params}) {{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{r + count}, 0;\\n"
        "wgmma.mma_async.sync.aligned.{shape} "
        "{{{regs}}}, {ops}, p, {imm};\\n}}\\n"
        : {acc}
        : {ins}, "r"(scale_d));
#else
    {unused};
    __trap();
#endif
  }}
}};

"""


def header(mode):
    name, comment, includes, primary, struct, specs = MODES[mode]
    text = [f"// Generated by `tools/gen_wgmma.py {mode}`: do not edit. {comment}#pragma once\n\n",
            f"{includes}#include <cstdint>\n\nnamespace hearth::kernels {{\n\n{primary}\n\n"]
    text += [specialization(struct, *s) for s in specs()]
    text.append("}  // namespace hearth::kernels\n")
    return name, "".join(text)


def write_all():
    kernels = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels")
    for mode in MODES:
        name, text = header(mode)
        path = os.path.join(kernels, name)
        with open(path, "w") as f:
            f.write(text)
        subprocess.run(["clang-format", "-i", path], check=True)
        print(f"wrote {os.path.normpath(path)}")


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) == 2 else 2
    if argv[1] == "--write":
        write_all()
        return 0
    if argv[1] not in MODES:
        print(f"unknown mode {argv[1]!r}; one of {', '.join(MODES)} or --write", file=sys.stderr)
        return 2
    sys.stdout.write(header(argv[1])[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
