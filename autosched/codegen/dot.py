"""C for `dot4`, the int8 dot product of four byte pairs, in scalar and vector form.

x86's VNNI instruction vpdpbusd adds, lane by lane, the four products of unsigned bytes of one
operand and signed bytes of the other to an int32 accumulator: 64 multiply-adds per 512-bit
instruction where a float32 FMA does 16, and exact. The vector helper uses it where gcc's
macros say the target has it (AVX512-VNNI for 16 lanes; AVX512-VNNI with VL, or AVX-VNNI, for
8), so the ISA comes from the target's -march; elsewhere it computes the same sums lane by lane.
"""
from __future__ import annotations

from autosched.lower import arith
from autosched.te.expr import Call, Cast, Expr, Load, const_value

#: C of the scalar dot product of two uint32 words (a's bytes unsigned, b's signed)
SCALAR_NAME = "dot4_u8s8"
SCALAR = (f"static inline int32_t {SCALAR_NAME}(uint32_t a, uint32_t b) {{ int32_t s = 0; "
          "for (int q = 0; q < 4; ++q) s += (int32_t)(uint8_t)(a >> (8 * q)) * (int32_t)(int8_t)(b >> (8 * q)); "
          "return s; }")
#: C of a uint32 read from four consecutive bytes at any address (memcpy: no alignment or
#: aliasing assumed; gcc emits one 32-bit load)
WORD_NAME = "load_word_u8"
WORD = (f"static inline uint32_t {WORD_NAME}(const void* p) {{ uint32_t w; __builtin_memcpy(&w, p, 4); return w; }}")
#: lanes -> (gcc's macro condition for the instruction, its builtin)
_VNNI = {
    16: ("defined(__AVX512VNNI__)", "__builtin_ia32_vpdpbusd_v16si"),
    8: ("(defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)", "__builtin_ia32_vpdpbusd_v8si"),
}


def word_source(e: Expr) -> Load | None:
    """The load of the first of four consecutive bytes that `e` assembles into a little-endian
    uint32 (`ops.integer_matmul`'s words: b0 | b1 << 8 | b2 << 16 | b3 << 24, each byte a load
    of one buffer cast to uint32), or None where `e` is not that: x86 then reads the word in one
    load where it took four loads, three shifts and three ors."""
    parts = []
    while isinstance(e, Call) and e.name == "bitor":
        parts.append(e.args[1])
        e = e.args[0]
    parts.append(e)
    parts.reverse()
    if len(parts) != 4:
        return None
    loads = []
    for t, part in enumerate(parts):
        if t:
            if not (isinstance(part, Call) and part.name == "shl" and const_value(part.args[1]) == 8 * t):
                return None
            part = part.args[0]
        while isinstance(part, Cast) and part.value.dtype in ("uint8", "int8", "uint32"):
            part = part.value
        if not (isinstance(part, Load) and part.dtype in ("uint8", "int8")):
            return None
        loads.append(part)
    first = loads[0]
    for t, load in enumerate(loads[1:], start=1):
        step = arith.linear(load.indices[0]).plus(arith.linear(first.indices[0]), -1)
        if load.source is not first.source or not step.is_const() or step.const != t:
            return None
    return first


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
