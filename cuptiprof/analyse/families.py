"""Kernel families: one name for the kernels that do the same job on different GPUs.

An sm75 GEMM and an sm90 GEMM are different kernels (different libraries, tile shapes,
template arguments), so comparing runs across GPUs by exact kernel name matches almost
nothing. `family(name)` maps a (demangled) kernel name to a coarse family such as 'gemm',
'conv', 'flash_attention', 'softmax', 'layernorm', 'elementwise', 'triton_pointwise',
'reduce', 'copy'. Reductions are 'reduce' whoever wrote them (PyTorch, cub's DeviceReduce*
and DeviceReduceByKey*, thrust's reduce and reduce_by_key), while cub's and thrust's sorts and
scans (scans by key too) are 'sort_scan'. Names no rule knows fall back to their bare
function name with the architecture prefix, tile shapes, template arguments and parameters
stripped.

>>> family("volta_sgemm_128x64_nn"), family("sm90_xmma_gemm_bf16bf16_f32_tn_n_tilesize128x128x64")
('gemm', 'gemm')

Copies, memsets and syncs keep their activity name ('Memcpy HtoD', 'Memset'), so the family
of a copy is its direction. This module is the only place that knows these rules.
"""
from __future__ import annotations

import functools
import re

# How comparisons key their ops: the exact name, the kernel family, or the enclosing range.
BY = ("op", "family", "range", "region")

# (family, pattern on the lower-cased full name); the first match wins, so specific families
# come before the generic ones they overlap with (a conv's implicit GEMM is a conv; a copy
# written as an elementwise kernel is a copy).
RULES: tuple[tuple[str, str], ...] = (
    # Compiler-generated kernels first: their names spell the fused ops ('..._layer_norm_1').
    ("triton_pointwise", r"^triton_poi"),
    ("triton_reduction", r"^triton_(red|per)"),
    ("triton_template", r"^triton_tem"),
    ("triton_fused", r"^triton"),
    ("flash_attention", r"flash|fmha|attention|sdpa|_attn|mha_fwd|mha_bwd"),
    # 'conv' but not 'convert'/'conversion': a cast is no convolution
    ("conv", r"conv(?!er)|scudnn|winograd|fft2d_|wgrad|dgrad|fprop|im2col|implicit_gemm|cask_cudnn"),
    # fbgemm_gpu is a library, mostly of embedding and sparse kernels, not a GEMM
    ("gemm", r"(?<!fb)gemm|gemv|cublas|cutlass|matmul|splitkreduce|xmma|magma_|nvjet|_mm_|bmm_"),
    ("softmax", r"softmax"),
    ("layernorm", r"layer_?norm|rms_?norm|gammabetabackward"),
    ("batchnorm", r"batch_?norm|\bbn_(fw|bw)|cudnn::bn_"),
    ("groupnorm", r"group_?norm|rowwisemoments|computefusedparams"),
    ("optimizer", r"multi_tensor_apply|adamfunctor|fused_adam|sgd_"),
    ("embedding", r"embedding|_embs_|bucketize"),
    ("index_scatter", r"index_(select|put|add|copy|fill|elementwise|kernel)|indexselect|gather|scatter"),
    # Reductions of cub (DeviceReduce*, DeviceSegmentedReduce*, DeviceReduceByKey*) and thrust
    # (its __reduce and __reduce_by_key agents, run in thrust::cuda_cub::core::_kernel_agent)
    # come before the other cub/thrust kernels (sorts, scans) in sort_scan. Matched on the
    # kernel or agent name: a scan by key also carries cub::ReduceByKeyScanTileState. The kernel
    # may sit in namespaces of its own (cub::CUB_200200_800_NS::, CCCL 2.8's cub::detail::reduce::).
    ("reduce", r"\bcub::(\w+::)*device(segmented)?reduce|cuda_cub::__reduce(_by_key)?::"),
    ("sort_scan", r"radixsort|devicescan|sort|topk|cub::|\bscan"),
    ("reduce", r"reduce|welford|sum_functor|meanops|argmax|argmin"),
    ("copy", r"copy|\bcat|transpose|nchwtonhwc|nhwctonchw|permute"),
    ("pooling", r"pool"),
    ("random", r"dropout|distribution|philox|curand|random"),
    ("elementwise", r"elementwise|pointwise|functor|fill"),
)
_COMPILED = tuple((fam, re.compile(pat)) for fam, pat in RULES)
_NCCL = re.compile(r"nccl(?:devkernel|kernel)?_?([a-z]+)", re.I)
_ARCH = re.compile(r"^(sm\d+|volta|ampere|turing|hopper|ada|blackwell|maxwell|pascal)_", re.I)
_SHAPES = re.compile(r"_\d+x\d+(x\d+)?|_v\d+$|_align\d+|_(nn|nt|tn|tt)$")


def _strip_balanced(text: str, open_: str, close: str) -> str:
    out, depth = [], 0
    for ch in text:
        if ch == open_:
            depth += 1
        elif ch == close and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def base_name(name: str) -> str:
    """The bare function name: no return type, namespaces, template arguments or parameters."""
    s = name.replace("(anonymous namespace)::", "")
    s = _strip_balanced(_strip_balanced(s, "<", ">"), "(", ")").strip()
    s = s.split()[-1] if s.split() else s  # drop 'void' and return types
    s = s.rsplit("::", 1)[-1]
    s = _ARCH.sub("", s)
    s = _SHAPES.sub("", s)
    return s or name


@functools.lru_cache(maxsize=65536)
def family(name: str | None) -> str:
    """Normalised kernel family of a kernel or activity name (see the module docstring)."""
    if not name:
        return "(unnamed)"
    if name.startswith(("Memcpy ", "Memset", "Sync ")):
        return name
    low = name.lower()
    if "nccl" in low:
        m = _NCCL.search(name)
        return f"nccl_{m.group(1).lower()}" if m else "nccl"
    for fam, pat in _COMPILED:
        if pat.search(low):
            return fam
    return base_name(name)


def families(names) -> dict[str, str]:
    """name -> family for many names at once."""
    return {n: family(n) for n in names}
