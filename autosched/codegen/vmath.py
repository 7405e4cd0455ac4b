"""Vector exp, erf and tanh for float32 written in GCC vector extensions, branch-free.

Why: a lane-by-lane loop over libm's expf/erff stays scalar (gcc vectorizes libm calls only
under -ffast-math), and softmax and GELU spend most of their time there: 12·128·128
exponentials cost 0.25 ms on two AVX-512 cores, 393 K erf calls in BERT's intermediate dense
more than its GEMM does. These helpers use only vector arithmetic, compares and bit casts, so
the ISA comes from gcc's -march (the target's), never from this code.

Accuracy, measured against float64 math on a dense grid (tests/test_codegen_vmath.py):
exp within 2 ulp over [-87, 88] (Cephes' range reduction and polynomial), exactly 0 below
ln(FLT_MIN) = -87.34 where the result would be subnormal (each instruction that forms or
reads a subnormal takes a microcode assist: flushing only below -104 made x·sigmoid(x) 7x
slower on activations beyond ±87), inf above 88.73, NaN kept; erf
within 3e-7 absolute (a few ulp) everywhere, ±1 beyond ±4 (Eigen's rational approximation),
NaN kept; tanh within 2 ulp (Cephes' odd polynomial below |x| = 0.625, 1 - 2/(e^2|x| + 1)
above), NaN kept. A tanh GELU fused into a ViT's MLP MatMul spent 4× the
MatMul's time in libm's tanhf before this.
"""
from __future__ import annotations

#: Call names with a vector implementation here (float32 only)
FUNCTIONS = ("exp", "erf", "sigmoid", "tanh")


def helper_name(fn: str, vt: str) -> str:
    return f"v{fn}_{vt}"


def _blend(vt: str, it: str) -> str:
    """sel(mask, a, b): a where mask lanes are all ones, else b (C has no vector ?:)."""
    return (f"static inline {vt} vsel_{vt}({it} m, {vt} a, {vt} b) "
            f"{{ return ({vt})((m & ({it})a) | (~m & ({it})b)); }}")


def _exp(vt: str, it: str) -> str:
    return f"""static inline {vt} vexp_{vt}({vt} x) {{
  const {vt} zero = ({vt}){{0}};
  /* below ln(FLT_MIN) the result is 0 and no subnormal is ever formed: each one costs a
     microcode assist, and sigmoid(x) of a large activation x asks for exp(-x) */
  {it} under = x < zero - 87.33654f;
  {vt} xc = vsel_{vt}(under, zero - 87.33654f, x);
  /* n = round(x / ln 2) by the 1.5 * 2^23 trick; r = x - n ln 2 in two parts (Cephes) */
  {vt} n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  {vt} r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  {vt} p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  {vt} y = p * r * r + r + 1.0f;
  /* y * 2^n by adding n to the exponent field: y is in [0.7, 1.42], so for x in
     [ln FLT_MIN, ln FLT_MAX] that field stays in [1, 254]; beyond ln FLT_MAX it is inf, and a
     NaN x stays NaN through the arithmetic (its n converts to 0) */
  y = ({vt})(({it})y + (__builtin_convertvector(n, {it}) << 23));
  y = vsel_{vt}(x > zero + 88.72283f, zero + __builtin_inff(), y);
  return vsel_{vt}(under, zero, y);
}}"""


def _erf(vt: str, it: str) -> str:
    return f"""static inline {vt} verf_{vt}({vt} a) {{
  const {vt} zero = ({vt}){{0}};
  /* beyond ±4 erf is ±1 in float32; NaN fails both compares and stays NaN */
  {vt} x = vsel_{vt}(a > zero + 4.0f, zero + 4.0f, a);
  x = vsel_{vt}(x < zero - 4.0f, zero - 4.0f, x);
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
    return f"static inline {vt} vsigmoid_{vt}({vt} x) {{ return 1.0f / (1.0f + vexp_{vt}(-x)); }}"


def _tanh(vt: str, it: str) -> str:
    return f"""static inline {vt} vtanh_{vt}({vt} x) {{
  const {vt} zero = ({vt}){{0}};
  {vt} z = vsel_{vt}(x < zero, zero - x, x);
  /* near 0 the exp form cancels: an odd polynomial there (Cephes tanhf) */
  {vt} z2 = x * x;
  {vt} p = z2 * -5.70498872745e-3f + 2.06390887954e-2f;
  p = p * z2 - 5.37397155531e-2f;
  p = p * z2 + 1.33314422036e-1f;
  p = p * z2 - 3.33332819422e-1f;
  {vt} small = p * z2 * x + x;
  {vt} big = 1.0f - 2.0f / (vexp_{vt}(z + z) + 1.0f);
  big = vsel_{vt}(x < zero, zero - big, big);
  return vsel_{vt}(z > zero + 0.625f, big, small);
}}"""


def helpers(fn: str, vt: str, it: str) -> list[tuple[str, str]]:
    """(name, C definition) pairs `fn` on vector type `vt` needs, dependencies first; `it` is
    the int32 vector type of the same lane count."""
    out = [(f"vsel_{vt}", _blend(vt, it))]
    if fn in ("exp", "sigmoid", "tanh"):
        out.append((helper_name("exp", vt), _exp(vt, it)))
    if fn == "sigmoid":
        out.append((helper_name("sigmoid", vt), _sigmoid(vt, it)))
    if fn == "tanh":
        out.append((helper_name("tanh", vt), _tanh(vt, it)))
    if fn == "erf":
        out.append((helper_name("erf", vt), _erf(vt, it)))
    return out
