"""C for `dot4`, the int8 dot product of four byte pairs, in scalar and vector form.

x86's VNNI instruction vpdpbusd adds, lane by lane, the four products of unsigned bytes of one
operand and signed bytes of the other to an int32 accumulator: 64 multiply-adds per 512-bit
instruction where a float32 FMA does 16, and exact. The vector helper uses it where gcc's
macros say the target has it (AVX512-VNNI for 16 lanes; AVX512-VNNI with VL, or AVX-VNNI, for
8), so the ISA comes from the target's -march; elsewhere it computes the same sums lane by lane.
"""
from __future__ import annotations

#: C of the scalar dot product of two uint32 words (a's bytes unsigned, b's signed)
SCALAR_NAME = "dot4_u8s8"
SCALAR = (f"static inline int32_t {SCALAR_NAME}(uint32_t a, uint32_t b) {{ int32_t s = 0; "
          "for (int q = 0; q < 4; ++q) s += (int32_t)(uint8_t)(a >> (8 * q)) * (int32_t)(int8_t)(b >> (8 * q)); "
          "return s; }")
#: lanes -> (gcc's macro condition for the instruction, its builtin)
_VNNI = {
    16: ("defined(__AVX512VNNI__)", "__builtin_ia32_vpdpbusd_v16si"),
    8: ("(defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)", "__builtin_ia32_vpdpbusd_v8si"),
}


def accumulate_name(vt: str) -> str:
    return f"dpbusd_{vt}"


def accumulate(vt: str, ut: str, lanes: int, inline: str = "static inline") -> str:
    """A helper `acc + dot4(a, b)` lane by lane over int32 vector type `vt` with uint32 words of
    vector type `ut`: one vpdpbusd where the target has it."""
    name = accumulate_name(vt)
    fallback = (f"{vt} r; for (int l = 0; l < {lanes}; ++l) r[l] = acc[l] + {SCALAR_NAME}(a[l], b[l]); return r;")
    if lanes not in _VNNI:
        return f"{inline} {vt} {name}({vt} acc, {ut} a, {ut} b) {{ {fallback} }}"
    condition, builtin = _VNNI[lanes]
    return (f"{inline} {vt} {name}({vt} acc, {ut} a, {ut} b) {{\n"
            f"#if {condition}\n  return ({vt}){builtin}(acc, ({vt})a, ({vt})b);\n"
            f"#else\n  {fallback}\n#endif\n}}")
