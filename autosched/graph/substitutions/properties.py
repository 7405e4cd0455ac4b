"""The operator properties substitutions are proved from.

Each property is an equation between two terms over variables of given symbolic shapes; it
holds for every value of its dimension symbols. The verifier turns each into a universally
quantified z3 axiom (`verify.py`), and `tests/test_substitution_properties.py` evaluates both
sides through the op records' numpy references on random tensors at random shapes, so a wrong
axiom cannot prove a wrong rule.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from autosched.graph.substitutions.terms import SymShape, Term, parse_shape, parse_term


@dataclass(frozen=True)
class Property:
    name: str
    shapes_text: tuple[tuple[str, str], ...]
    lhs_text: str
    rhs_text: str

    @cached_property
    def shapes(self) -> dict[str, SymShape]:
        return {v: parse_shape(s) for v, s in self.shapes_text}

    @cached_property
    def lhs(self) -> Term:
        return parse_term(self.lhs_text)

    @cached_property
    def rhs(self) -> Term:
        return parse_term(self.rhs_text)


def _p(name: str, shapes: str, lhs: str, rhs: str) -> Property:
    """`shapes` is `x:M,K; s:` (a scalar has an empty shape)."""
    pairs = tuple((v.strip(), s.strip()) for v, _, s in (part.partition(":") for part in shapes.split(";")))
    return Property(name, pairs, lhs, rhs)


MAT2 = "x:M,K; y:M,K; z:M,K"
ANY = "x:B,C,H,W; y:B,C,H,W; z:B,C,H,W"
CONV = "x:B,C,H,W; y:B,C,H,W; w:F,C,3,3; v:F,C,3,3; s:"

PROPERTIES: tuple[Property, ...] = (
    # elementwise algebra (rank-agnostic ops, stated on 4-D tensors)
    _p("add-commutative", ANY, "add(x,y)", "add(y,x)"),
    _p("add-associative", ANY, "add(add(x,y),z)", "add(x,add(y,z))"),
    _p("mul-commutative", ANY, "mul(x,y)", "mul(y,x)"),
    _p("mul-associative", ANY, "mul(mul(x,y),z)", "mul(x,mul(y,z))"),
    _p("mul-distributes-over-add", ANY, "mul(add(x,y),z)", "add(mul(x,z),mul(y,z))"),
    _p("scale-distributes-over-add", ANY + "; s:", "scale(add(x,y),s)", "add(scale(x,s),scale(y,s))"),
    _p("scale-mul", ANY + "; s:", "scale(mul(x,y),s)", "mul(scale(x,s),y)"),
    _p("scale-commutes", ANY + "; s:; t:", "scale(scale(x,s),t)", "scale(scale(x,t),s)"),
    _p("relu-idempotent", ANY, "relu(relu(x))", "relu(x)"),
    # matrix products
    _p("matmul-associative", "x:M,K; a:K,N; b:N,P", "matmul(matmul(x,a),b)", "matmul(x,matmul(a,b))"),
    _p("matmul-distributes-left", "x:M,K; a:K,N; b:K,N", "matmul(x,add(a,b))", "add(matmul(x,a),matmul(x,b))"),
    _p("matmul-distributes-right", "x:M,K; y:M,K; a:K,N", "matmul(add(x,y),a)", "add(matmul(x,a),matmul(y,a))"),
    _p("matmul-scale-left", "x:M,K; a:K,N; s:", "matmul(scale(x,s),a)", "scale(matmul(x,a),s)"),
    _p("matmul-scale-right", "x:M,K; a:K,N; s:", "matmul(x,scale(a,s))", "scale(matmul(x,a),s)"),
    # transposes
    _p("transpose-involution", "x:M,K", "transpose(transpose(x))", "x"),
    _p("transpose-matmul", "x:M,K; a:K,N", "transpose(matmul(x,a))", "matmul(transpose(a),transpose(x))"),
    _p("transpose-add", MAT2, "transpose(add(x,y))", "add(transpose(x),transpose(y))"),
    _p("transpose-mul", MAT2, "transpose(mul(x,y))", "mul(transpose(x),transpose(y))"),
    _p("transpose-relu", "x:M,K", "transpose(relu(x))", "relu(transpose(x))"),
    _p("transpose-scale", "x:M,K; s:", "transpose(scale(x,s))", "scale(transpose(x),s)"),
    _p("transpose-concat0", "x:M,K; y:N,K", "transpose(concat0(x,y))", "concat1(transpose(x),transpose(y))"),
    _p("transpose-concat1", "x:M,K; y:M,N", "transpose(concat1(x,y))", "concat0(transpose(x),transpose(y))"),
    # concatenation and split
    _p("split0-concat0", "x:M,K; y:N,K", "split0_0[M](concat0(x,y))", "x"),
    _p("split1-concat0", "x:M,K; y:N,K", "split1_0[M](concat0(x,y))", "y"),
    _p("split0-concat1", "x:B,C,H,W; y:B,D,H,W", "split0_1[C](concat1(x,y))", "x"),
    _p("split1-concat1", "x:B,C,H,W; y:B,D,H,W", "split1_1[C](concat1(x,y))", "y"),
    _p("concat0-split", "x:M+N,K", "concat0(split0_0[M](x),split1_0[M](x))", "x"),
    _p("concat1-split", "x:B,C+D,H,W", "concat1(split0_1[C](x),split1_1[C](x))", "x"),
    _p("concat0-associative", "x:M,K; y:N,K; z:P,K", "concat0(concat0(x,y),z)", "concat0(x,concat0(y,z))"),
    _p("concat1-associative", "x:B,C,H,W; y:B,D,H,W; z:B,E,H,W", "concat1(concat1(x,y),z)",
       "concat1(x,concat1(y,z))"),
    _p("add-concat0", "x:M,K; y:N,K; z:M,K; w:N,K", "add(concat0(x,y),concat0(z,w))",
       "concat0(add(x,z),add(y,w))"),
    _p("add-concat1", "x:B,C,H,W; y:B,D,H,W; z:B,C,H,W; w:B,D,H,W", "add(concat1(x,y),concat1(z,w))",
       "concat1(add(x,z),add(y,w))"),
    _p("mul-concat0", "x:M,K; y:N,K; z:M,K; w:N,K", "mul(concat0(x,y),concat0(z,w))",
       "concat0(mul(x,z),mul(y,w))"),
    _p("mul-concat1", "x:M,K; y:M,N; z:M,K; w:M,N", "mul(concat1(x,y),concat1(z,w))",
       "concat1(mul(x,z),mul(y,w))"),
    _p("relu-concat0", "x:M,K; y:N,K", "relu(concat0(x,y))", "concat0(relu(x),relu(y))"),
    _p("relu-concat1", "x:B,C,H,W; y:B,D,H,W", "relu(concat1(x,y))", "concat1(relu(x),relu(y))"),
    _p("scale-concat0", "x:M,K; y:N,K; s:", "scale(concat0(x,y),s)", "concat0(scale(x,s),scale(y,s))"),
    _p("scale-concat1", "x:M,K; y:M,N; s:", "scale(concat1(x,y),s)", "concat1(scale(x,s),scale(y,s))"),
    _p("matmul-concat-columns", "x:M,K; a:K,N; b:K,P", "matmul(x,concat1(a,b))",
       "concat1(matmul(x,a),matmul(x,b))"),
    _p("matmul-concat-rows", "x:M,K; y:N,K; a:K,P", "matmul(concat0(x,y),a)", "concat0(matmul(x,a),matmul(y,a))"),
    _p("matmul-concat-inner", "x:M,K; y:M,L; a:K,N; b:L,N", "matmul(concat1(x,y),concat0(a,b))",
       "add(matmul(x,a),matmul(y,b))"),
    # linear layers (weights [N, K], a bias [N]): stacked weights give concatenated columns
    _p("gemmt-concat-weights", "x:M,K; w:N,K; v:P,K; b:N; c:P", "gemmt(x,concat0(w,v),concat0(b,c))",
       "concat1(gemmt(x,w,b),gemmt(x,v,c))"),
    _p("gemmt-concat-rows", "x:M,K; y:L,K; w:N,K; b:N", "gemmt(concat0(x,y),w,b)",
       "concat0(gemmt(x,w,b),gemmt(y,w,b))"),
    # dense layers on batches of rows ([batch, tokens, features] by a matrix, plus a bias vector)
    _p("matmul3-concat-columns", "x:B,M,K; a:K,N; b:K,P", "matmul3(x,concat1(a,b))",
       "concat2(matmul3(x,a),matmul3(x,b))"),
    _p("addb-concat2", "y:B,M,N; z:B,M,P; d:N; e:P", "addb(concat2(y,z),concat0(d,e))",
       "concat2(addb(y,d),addb(z,e))"),
    _p("relu-concat2", "x:B,M,N; y:B,M,P", "relu(concat2(x,y))", "concat2(relu(x),relu(y))"),
    _p("split0-concat2", "x:B,M,N; y:B,M,P", "split0_2[N](concat2(x,y))", "x"),
    _p("split1-concat2", "x:B,M,N; y:B,M,P", "split1_2[N](concat2(x,y))", "y"),
    _p("concat2-split", "x:B,M,N+P", "concat2(split0_2[N](x),split1_2[N](x))", "x"),
    _p("concat2-associative", "x:B,M,N; y:B,M,P; z:B,M,Q", "concat2(concat2(x,y),z)", "concat2(x,concat2(y,z))"),
    # products of batched activations (attention's scores and context): a scalar factor passes through
    _p("bmatmul-scale-left", "x:B,H,M,K; y:B,H,K,N; s:", "bmatmul(scale(x,s),y)", "scale(bmatmul(x,y),s)"),
    _p("bmatmul-scale-right", "x:B,H,M,K; y:B,H,K,N; s:", "bmatmul(x,scale(y,s))", "scale(bmatmul(x,y),s)"),
    _p("bmatmul-distributes-left", "x:B,H,M,K; y:B,H,K,N; z:B,H,K,N", "bmatmul(x,add(y,z))",
       "add(bmatmul(x,y),bmatmul(x,z))"),
    # convolution: bilinear, and concatenations of inputs and kernels
    _p("conv-distributes-input", CONV, "conv(add(x,y),w)", "add(conv(x,w),conv(y,w))"),
    _p("conv-distributes-kernel", CONV, "conv(x,add(w,v))", "add(conv(x,w),conv(x,v))"),
    _p("conv-scale-input", CONV, "conv(scale(x,s),w)", "scale(conv(x,w),s)"),
    _p("conv-scale-kernel", CONV, "conv(x,scale(w,s))", "scale(conv(x,w),s)"),
    _p("conv-concat-kernels", "x:B,C,H,W; w:F,C,3,3; v:G,C,3,3", "conv(x,concat0(w,v))",
       "concat1(conv(x,w),conv(x,v))"),
    _p("conv-concat-batch", "x:B,C,H,W; y:D,C,H,W; w:F,C,3,3", "conv(concat0(x,y),w)",
       "concat0(conv(x,w),conv(y,w))"),
    _p("conv-concat-channels", "x:B,C,H,W; y:B,D,H,W; w:F,C,3,3; v:F,D,3,3", "conv(concat1(x,y),concat1(w,v))",
       "add(conv(x,w),conv(y,v))"),
    # kernel enlarging: a zero ring around a kernel leaves a "same" convolution unchanged
    _p("conv-enlarge", "x:B,C,H,W; w:F,C,1,1", "conv(x,enlarge(w))", "conv(x,w)"),
    _p("conv-enlarge-3x3", "x:B,C,H,W; w:F,C,3,3", "conv(x,enlarge(w))", "conv(x,w)"),
    _p("enlarge-concat0", "w:F,C,R,S; v:G,C,R,S", "enlarge(concat0(w,v))", "concat0(enlarge(w),enlarge(v))"),
    _p("enlarge-add", "w:F,C,R,S; v:F,C,R,S", "enlarge(add(w,v))", "add(enlarge(w),enlarge(v))"),
    _p("enlarge-scale", "w:F,C,R,S; s:", "enlarge(scale(w,s))", "scale(enlarge(w),s)"),
    # convolution with a bias
    _p("convb-concat-kernels", "x:B,C,H,W; w:F,C,3,3; v:G,C,3,3; b:F; c:G", "convb(x,concat0(w,v),concat0(b,c))",
       "concat1(convb(x,w,b),convb(x,v,c))"),
    _p("convb-enlarge", "x:B,C,H,W; w:F,C,1,1; b:F", "convb(x,enlarge(w),b)", "convb(x,w,b)"),
    _p("convb-concat-batch", "x:B,C,H,W; y:D,C,H,W; w:F,C,3,3; b:F", "convb(concat0(x,y),w,b)",
       "concat0(convb(x,w,b),convb(y,w,b))"),
    # pooling: windows never cross the channel or batch axes
    _p("maxpool-concat0", "x:B,C,H,W; y:D,C,H,W", "maxpool(concat0(x,y))", "concat0(maxpool(x),maxpool(y))"),
    _p("maxpool-concat1", "x:B,C,H,W; y:B,D,H,W", "maxpool(concat1(x,y))", "concat1(maxpool(x),maxpool(y))"),
    _p("maxpool-relu", "x:B,C,H,W", "maxpool(relu(x))", "relu(maxpool(x))"),
)
