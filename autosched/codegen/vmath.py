"""Vector exp, erf, sigmoid and tanh for float32 written in GCC vector extensions, branch-free.

Why: a lane-by-lane loop over libm's expf/erff stays scalar (gcc vectorizes libm calls only
under -ffast-math), and softmax and GELU spend most of their time there: 12·128·128
exponentials cost 0.25 ms on two AVX-512 cores, 393 K erf calls in BERT's intermediate dense
more than its GEMM does. These helpers use only vector arithmetic, compares, bit casts and the
lane-wise min and max (`minmax`: x86's instruction where gcc's macros say the target has it),
so the ISA comes from gcc's -march (the target's), never from this code.

Accuracy, measured against float64 math on a dense grid (tests/test_codegen_vmath.py):
exp within 2 ulp over [-87, 88] (Cephes' range reduction and polynomial), exactly 0 below
ln(FLT_MIN) = -87.34 where the result would be subnormal (each instruction that forms or
reads a subnormal takes a microcode assist: flushing only below -104 made x·sigmoid(x) 7x
slower on activations beyond ±87), inf above 88.73, NaN kept; erf
within 3e-7 absolute (a few ulp) everywhere, ±1 beyond ±4 (Eigen's rational approximation),
NaN kept; sigmoid within 4 ulp, 2^-126 (not a subnormal) below ln(FLT_MIN), NaN kept; tanh
within 2 ulp (Cephes' odd polynomial below |x| = 0.625, 1 - 2/(e^2|x| + 1)
above), NaN kept. A tanh GELU fused into a ViT's MLP MatMul spent 4× the
MatMul's time in libm's tanhf before this.
"""
from __future__ import annotations

#: Call names with a vector implementation here (float32 only)
FUNCTIONS = ("exp", "erf", "sigmoid", "tanh")


def helper_name(fn: str, vt: str) -> str:
    return f"v{fn}_{vt}"


#: x86 instructions for a lane-wise min and max, by (dtype, vector bytes): (the macro gcc
#: defines where the instruction exists, its builtin). MINPS(a, b) is `a < b ? a : b` lane by
#: lane, the second operand wherever the compare is false (a NaN, or two zeros), and MAXPS
#: likewise with `>`: exactly the compare and blend they replace, in one instruction where the
#: blend took two. The AVX-512 forms take a merge source, an all-ones mask and the current
#: rounding mode (4).
_X86_MINMAX = {
    ("float32", 16): ("__SSE__", "__builtin_ia32_{op}ps({a}, {b})"),
    ("float32", 32): ("__AVX__", "__builtin_ia32_{op}ps256({a}, {b})"),
    ("float32", 64): ("__AVX512F__", "__builtin_ia32_{op}ps512_mask({a}, {b}, {a}, (unsigned short)-1, 4)"),
    ("float64", 16): ("__SSE2__", "__builtin_ia32_{op}pd({a}, {b})"),
    ("float64", 32): ("__AVX__", "__builtin_ia32_{op}pd256({a}, {b})"),
    ("float64", 64): ("__AVX512F__", "__builtin_ia32_{op}pd512_mask({a}, {b}, {a}, (unsigned char)-1, 4)"),
}


def minmax(op: str, vt: str, it: str, dtype: str, vector_bytes: int) -> str:
    """The C of `{op}_{vt}(a, b)`, `a < b ? a : b` (min) or `a > b ? a : b` (max) lane by lane:
    gcc leaves a lane-by-lane ?: loop scalar, and compiles a vector compare and blend as two
    instructions without seeing that MINPS/MAXPS compute exactly it, so where the target has
    the instruction it is named. Elsewhere (integers, other ISAs) the compare and
    blend, in `it`, the mask vector of the same lanes. The min/max clamps of x·sigmoid(x) made
    EfficientNet's swish-fused convolutions 4-9% faster on an EPYC Zen 3 (1 thread) than
    with compare-and-blend clamps."""
    cmp = "<" if op == "min" else ">"
    blend = f"{it} m = ({it})(a {cmp} b); return ({vt})((m & ({it})a) | (~m & ({it})b));"
    head = f"static inline {vt} {op}_{vt}({vt} a, {vt} b) {{"
    if (dtype, vector_bytes) not in _X86_MINMAX:
        return f"{head} {blend} }}"
    macro, builtin = _X86_MINMAX[dtype, vector_bytes]
    return (f"{head}\n#if defined({macro})\n  return {builtin.format(op=op, a='a', b='b')};\n#else\n  {blend}\n"
            f"#endif\n}}")


def _blend(vt: str, it: str) -> str:
    """sel(mask, a, b): a where mask lanes are all ones, else b (C has no vector ?:)."""
    return (f"static inline {vt} vsel_{vt}({it} m, {vt} a, {vt} b) "
            f"{{ return ({vt})((m & ({it})a) | (~m & ({it})b)); }}")


def _exp_in_range(vt: str, it: str) -> str:
    """exp(x) for x in [ln FLT_MIN, ln FLT_MAX], with no test of its range: the exponent field
    of the result stays in [1, 254] there. `_exp` and `_sigmoid` clamp into it."""
    return f"""static inline {vt} vexp_in_range_{vt}({vt} x) {{
  const {vt} zero = ({vt}){{0}};
  /* n = round(x / ln 2) by the 1.5 * 2^23 trick; r = x - n ln 2 in two parts (Cephes) */
  {vt} n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  {vt} r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  {vt} p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  {vt} y = p * r * r + r + 1.0f;
  /* y * 2^n by adding n to the exponent field: y is in [0.7, 1.42], and a NaN x stays NaN
     through the arithmetic (its n converts to 0) */
  return ({vt})(({it})y + (__builtin_convertvector(n, {it}) << 23));
}}"""


def _exp(vt: str, it: str) -> str:
    return f"""static inline {vt} vexp_{vt}({vt} x) {{
  const {vt} zero = ({vt}){{0}};
  /* below ln(FLT_MIN) the result is 0 and no subnormal is ever formed: each one costs a
     microcode assist, and sigmoid(x) of a large activation x asks for exp(-x); for x in
     [ln FLT_MIN, ln FLT_MAX] the exponent field stays in [1, 254]; beyond ln FLT_MAX it is
     inf. max(c, x) keeps a NaN x */
  {vt} y = vexp_in_range_{vt}(max_{vt}(zero - 87.33654f, x));
  y = vsel_{vt}(x > zero + 88.72283f, zero + __builtin_inff(), y);
  return ({vt})(({it})y & ~({it})(x < zero - 87.33654f));
}}"""


def _erf(vt: str, it: str) -> str:
    return f"""static inline {vt} verf_{vt}({vt} a) {{
  const {vt} zero = ({vt}){{0}};
  /* beyond ±4 erf is ±1 in float32; the clamps keep a NaN (`minmax`) */
  {vt} x = max_{vt}(zero - 4.0f, min_{vt}(zero + 4.0f, a));
  {vt} x2 = x * x;
  {vt} p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = p * x2 - 2.10102402082508e-06f;
  p = p * x2 - 5.69250639462346e-05f;
  p = p * x2 - 7.34990630326855e-04f;
  p = p * x2 - 2.95459980854025e-03f;
  p = p * x2 - 1.60960333262415e-02f;
  p = p * x;
  {vt} q = x2 * -1.45660718464996e-05f - 2.13374055278905e-04f;
  q = q * x2 - 1.68282697438203e-03f;
  q = q * x2 - 7.37332916720468e-03f;
  q = q * x2 - 1.42647390514189e-02f;
  return p / q;
}}"""


def _sigmoid(vt: str, it: str) -> str:
    """1 / (1 + exp(-x)) with -x clamped to ±ln FLT_MIN, where exp needs no test of its range.
    Below x = ln FLT_MIN, where float32's sigmoid is subnormal or 0, the clamp gives the
    smallest normal, 2^-126 (times 1 + 5e-6): an absolute error below 2^-126, and no subnormal
    formed. A mask making it 0 cost EfficientNet's swish-fused convolutions 3-8% (EPYC Zen 3,
    1 thread). The clamps keep a NaN (`minmax`)."""
    return f"""static inline {vt} vsigmoid_{vt}({vt} x) {{
  const {vt} zero = ({vt}){{0}};
  {vt} z = max_{vt}(zero - 87.33654f, min_{vt}(zero + 87.33654f, zero - x));
  return 1.0f / (1.0f + vexp_in_range_{vt}(z));
}}"""


def _tanh(vt: str, it: str) -> str:
    return f"""static inline {vt} vtanh_{vt}({vt} x) {{
  const {vt} zero = ({vt}){{0}};
  const {it} sign = ({it})(-zero);
  {vt} z = ({vt})(({it})x & ~sign);
  /* near 0 the exp form cancels: an odd polynomial there (Cephes tanhf) */
  {vt} z2 = x * x;
  {vt} p = z2 * -5.70498872745e-3f + 2.06390887954e-2f;
  p = p * z2 - 5.37397155531e-2f;
  p = p * z2 + 1.33314422036e-1f;
  p = p * z2 - 3.33332819422e-1f;
  {vt} small = p * z2 * x + x;
  /* e^176 would be inf; from e^88 on the quotient is below 2^-126 (and normal) and big 1 */
  {vt} big = 1.0f - 2.0f / (vexp_in_range_{vt}(min_{vt}(zero + 88.0f, z + z)) + 1.0f);
  big = ({vt})(({it})big | (({it})x & sign));  /* big >= 0: x's sign */
  return vsel_{vt}(z > zero + 0.625f, big, small);
}}"""


def helpers(fn: str, lanes: int) -> list[tuple[str, str]]:
    """(name, C definition) pairs `fn` on float32 vectors of `lanes` needs, dependencies first
    (the vector types `f32x{lanes}` and `i32x{lanes}` are the caller's)."""
    vt, it = f"f32x{lanes}", f"i32x{lanes}"
    out = [(f"vsel_{vt}", _blend(vt, it))]
    out += [(f"{op}_{vt}", minmax(op, vt, it, "float32", 4 * lanes)) for op in ("min", "max")]
    if fn in ("exp", "sigmoid", "tanh"):
        out.append((f"vexp_in_range_{vt}", _exp_in_range(vt, it)))
    if fn == "exp":
        out.append((helper_name("exp", vt), _exp(vt, it)))
    if fn == "sigmoid":
        out.append((helper_name("sigmoid", vt), _sigmoid(vt, it)))
    if fn == "tanh":
        out.append((helper_name("tanh", vt), _tanh(vt, it)))
    if fn == "erf":
        out.append((helper_name("erf", vt), _erf(vt, it)))
    return out
