"""Kernel families: one name for the same work across runs, library versions and GPUs.

`family(name)` strips what changes between builds and autotuning choices (template arguments,
function arguments, tile/cluster/warp shapes, architecture tags such as `sm90_`, `ampere_`,
`volta_`, layout suffixes) and keeps what a person acts on: the kind of work (GEMM, attention,
elementwise, NCCL collective...) with the library that ran it, and the **data type** where the
name says it (bf16 -> fp32 is a cause). Examples (the golden table is tests/test_diff_families.py):

    nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT           -> gemm:nvjet bf16
    ampere_sgemm_128x64_nn                                  -> gemm:sgemm fp32
    cutlass_80_simt_sgemm_128x32_8x5_nn_align1              -> gemm:cutlass-simt fp32
    cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4     -> gemm:cutlass tf32
    nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_ovscale_TNT      -> gemm:nvjet fp8
    deep_gemm::sm90_fp8_gemm_1d2d_impl<...>                 -> gemm:deepgemm fp8
    sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128...  -> gemm:xmma bf16
    void at::native::vectorized_elementwise_kernel<4, ...>   -> elementwise (+ dtype of its functor)
    ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>) -> nccl:SendRecv
    void flash::flash_fwd_kernel<...>                        -> attention bf16

`Family.key` is the string used to match across runs: `"<family>"` or `"<family> <dtype>"`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Family:
    family: str          # e.g. 'gemm:nvjet', 'elementwise', 'nccl:AllReduce'
    dtype: str | None    # 'bf16', 'fp16', 'fp32', 'tf32', 'fp8', 'fp64', 'int8', or None

    @property
    def key(self) -> str:
        return f"{self.family} {self.dtype}" if self.dtype else self.family

    @property
    def category(self) -> str:
        return self.family.split(":", 1)[0]


# dtype words as they appear in C++ template arguments and library names (first match wins)
_FP8 = (re.compile(r"e4m3|e5m2|Float8|fp8|\bf8\b"), "fp8")
_FP64 = (re.compile(r"\bdouble\b|\bfp64\b"), "fp64")
_FP32 = (re.compile(r"\bfloat\b|\bfp32\b|\bf32\b"), "fp32")
_INT8 = (re.compile(r"\bint8_t\b|\bint8\b"), "int8")
_DTYPE_WORDS = [
    (re.compile(r"BFloat16|bfloat16|__nv_bfloat16|__hip_bfloat16|\bbf16|_bf16"), "bf16"),
    (re.compile(r"\bc10::Half\b|\b__half\b|\bhalf\b|\bHalf\b|\bfp16\b|_f16_|_fp16|\bf16\b"), "fp16"),
    _FP8, _FP64, _FP32, _INT8,
]

_NVJET_T = {"t": "bf16", "h": "fp16", "s": "fp32", "e": "fp8", "q": "fp8", "d": "fp64", "i": "int8"}
_CUBLAS_LEGACY = {"s": "fp32", "d": "fp64", "h": "fp16", "c": "complex64", "z": "complex128"}
_TENSILE_T = {"B": "bf16", "H": "fp16", "S": "fp32", "D": "fp64", "F": "fp8", "I": "int8", "X": "tf32"}
_XMMA_T = {"bf16": "bf16", "tf32": "tf32", "f16": "fp16", "f32": "fp32", "f64": "fp64", "e4m3": "fp8", "e5m2": "fp8",
           "i8": "int8", "s8": "int8"}
_NCCL_DTYPES = {"bf16": "bf16", "f16": "fp16", "half": "fp16", "f32": "fp32", "float": "fp32", "f64": "fp64",
                "double": "fp64", "i8": "int8", "int8_t": "int8", "u8": "int8", "i32": None, "int32_t": None,
                "u32": None, "i64": None, "u64": None, "f8e4m3": "fp8", "f8e5m2": "fp8"}


def dtype_in(text: str) -> str | None:
    for rx, dt in _DTYPE_WORDS:
        if rx.search(text):
            return dt
    return None


def _demangle_itanium(name: str) -> str:
    """A crude reading of an Itanium-mangled name (`_ZN5aiter24add_rmsnorm...`): the nested
    identifiers joined by '::' (enough to name the family; template arguments are dropped)."""
    m = re.match(r"_ZN?(.*)", name)
    s = m.group(1) if m else name
    parts, i = [], 0
    while i < len(s):
        n = re.match(r"(\d+)", s[i:])
        if not n:
            if s[i] in "LKV":
                i += 1
                continue
            break
        ln = int(n.group(1))
        i += len(n.group(1))
        parts.append(s[i:i + ln])
        i += ln
        if i < len(s) and s[i] == "I":   # template arguments follow: stop
            break
    return "::".join(parts) if parts else name


def _strip_cxx(name: str) -> str:
    """`void ns::(anonymous namespace)::fn<T, ...>(args)` -> `fn` (innermost name, no templates/args)."""
    s = name.strip()
    if s.startswith("void "):
        s = s[5:]
    s = s.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon")
    # drop template arguments and argument lists (balanced)
    out, depth = [], 0
    for ch in s:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    base = "".join(out).strip()
    base = base.split("::")[-1] if base else s
    return base.strip() or s


_ARCH = re.compile(r"^(sm\d+a?_|sm_\d+_|ampere_|volta_|turing_|hopper_|blackwell_|maxwell_|pascal_|"
                   r"gfx\d+_|cutlass_\d+_|cutlass\d+_)")
_SHAPES = re.compile(r"_?\d+x\d+(x\d+)*(_\d+x\d+(x\d+)*)*")

# (regex on the raw name, family, dtype rule): checked in order. dtype rule: None (take it from
# the name's dtype words), a fixed dtype, or a callable(match, name) -> dtype.
_RULES: list = []


def _rule(rx: str, fam, dt=None, flags=0):
    _RULES.append((re.compile(rx, flags), fam, dt))


# memory
_rule(r"^Memcpy (\w+)", lambda m, n: f"memcpy:{m.group(1)}", "")
_rule(r"^Memset", "memset", "")
# collectives
_rule(r"^(?:void )?nccl(?:Dev)?Kernel_([A-Za-z]+)(?:_([A-Za-z0-9]+))?(?:_([A-Za-z0-9_]+))?",
      lambda m, n: f"nccl:{m.group(1)}", lambda m, n: _nccl_dtype(n))
_rule(r"^(?:void )?rccl\w*?_([A-Za-z]+)", lambda m, n: f"rccl:{m.group(1)}", lambda m, n: _nccl_dtype(n))
_rule(r"(dpsk::ep|deep_ep)\S*::(dispatch|combine)", lambda m, n: f"deepep:{m.group(2)}", "")
_rule(r"nvshmem", "nvshmem", "")
_rule(r"cross_device_reduce", "allreduce:custom", None)
# GEMMs
# DeepGEMM (deepseek-ai/DeepGEMM): `deep_gemm::fp8_gemm_kernel<...>` (v1), `deep_gemm::sm90_fp8_gemm_1d2d_impl`,
# `sm100_fp8_gemm_1d1d_impl`, `sm90_bf16_gemm_impl`, `sm100_fp8_fp4_gemm_1d1d_impl`, `sm90_tf32_hc_prenorm_gemm_impl`,
# grouped (MoE) GEMMs are the same kernels with a GemmType template argument
_rule(r"deep_gemm::(?:\w+::)*(?:sm\d+_)?(mx)?(fp8|bf16|fp4|tf32|w4a8|nvfp4)_\w*?(?:gemm|moe|einsum)\w*",
      "gemm:deepgemm", lambda m, n: _DEEPGEMM_T[m.group(2)])
_rule(r"^nvjet_(?:sm\d+a?_)?([a-z]{3,6})_", "gemm:nvjet", lambda m, n: _NVJET_T.get(m.group(1)[0]))
# cuDNN's xmma/CUTLASS implicit-GEMM convolutions (before the GEMM rules: their names say "gemm" too)
_rule(r"xmma_(fprop|dgrad|wgrad)_implicit_gemm(?:_indexed)?_([a-z0-9]+)_([a-z0-9]+)_",
      lambda m, n: f"conv:xmma-{m.group(1)}",
      lambda m, n: _xmma_dtype(m.group(2), m.group(3)))
_rule(r"cutlass\w*?_tensorop_([shi])(\d{3,6})(fprop|dgrad|wgrad)", lambda m, n: f"conv:cutlass-{m.group(3)}",
      lambda m, n: _tensorop_dtype(m.group(1), m.group(2), n))
_rule(r"ImplicitGemmConvolution", "conv:cutlass", lambda m, n: gemm_dtype_in(n))
# cuBLASLt xmma: `<A><B>_<mma in><accumulate>_<C>`: the math runs in the MMA input type (f32f32_tf32f32 is TF32)
_rule(r"xmma_gemm_([a-z0-9]+)_([a-z0-9]+)_", "gemm:xmma", lambda m, n: _xmma_dtype(m.group(1), m.group(2)))
_rule(r"xmma_gemm_(bf16|tf32|f16|f32|f64|e4m3|e5m2|i8|s8)", "gemm:xmma", lambda m, n: _XMMA_T.get(m.group(1)))
_rule(r"^(?:void )?(?:\w+?_)?([sdhcz])gemm(?:_|$|<)", lambda m, n: f"gemm:{m.group(1)}gemm",
      lambda m, n: _CUBLAS_LEGACY[m.group(1)])
_rule(r"magma_([sdhcz])gemm", "gemm:magma", lambda m, n: _CUBLAS_LEGACY[m.group(1)])
# CUTLASS: SIMT kernels (CUDA cores, no tensor cores) are a family of their own, dtype from [sdh]gemm
_rule(r"cutlass\w*?_simt_([sdh])gemm", "gemm:cutlass-simt", lambda m, n: _CUBLAS_LEGACY[m.group(1)])
_rule(r"cutlass\w*?_tensorop_(?:\w*?_)?([shdi])(\d{3,6})(?:tf32)?gemm", "gemm:cutlass",
      lambda m, n: _tensorop_dtype(m.group(1), m.group(2), n))
_rule(r"cutlass\w*?(?:tensorop|wmma|gemm|Gemm)|cutlass::gemm::kernel|GemmUniversal", "gemm:cutlass",
      lambda m, n: gemm_dtype_in(n))
_rule(r"(?:^|_)(bf16_)?([shi])(\d{3,6})gemm", "gemm:tensorop",
      lambda m, n: "bf16" if m.group(1) else _tensorop_dtype(m.group(2), m.group(3), n))
_rule(r"^Cijk_A[a-z]+_B[a-z]+_([A-Z0-9]+)_", "gemm:tensile", lambda m, n: _TENSILE_T.get(m.group(1)[0]))
_rule(r"^(?:void )?(gemmSN|gemmk1|gemv2?N?T?|gemvNSP|gemvx|dot)_?\w*_kernel", "gemm:cublas-small", None)
_rule(r"splitKreduce_kernel", "gemm:splitk-reduce", None)
_rule(r"^(?:void )?(?:\w+::)*(?:ck::tensor_operation\S*)?kernel_\w*gemm", "gemm:ck", None)
_rule(r"_ZN2ck16tensor_operation.*gemm", "gemm:ck", None, re.IGNORECASE)
# convolutions
_rule(r"^igemm_(fwd|bwd|wrw)_\w*?_(bf16|fp16|fp32|f16|f32)", lambda m, n: f"conv:miopen-{m.group(1)}",
      lambda m, n: {"bf16": "bf16", "fp16": "fp16", "f16": "fp16", "fp32": "fp32", "f32": "fp32"}[m.group(2)])
_rule(r"_ZN2ck16tensor_operation.*conv", "conv:ck", None)
_rule(r"scudnn", "conv:cudnn", "fp32")
_rule(r"hcudnn|h884cudnn|h1688cudnn", "conv:cudnn", "fp16")
_rule(r"(implicit|explicit)_convolve_sgemm", "conv:cudnn", "fp32")
_rule(r"cudnn::(?:detail|cnn)::(dgrad|wgrad)", lambda m, n: f"conv:cudnn-{m.group(1)}", None)
_rule(r"winograd", "conv:winograd", None, re.IGNORECASE)
# attention
_rule(r"flash|fmha|sdpa|paged_attention|attention|mha_|_attn_", "attention", None, re.IGNORECASE)
# triton / fusers (name their own op)
_rule(r"^triton_(\w+?)(?:_\d+)*$", lambda m, n: f"triton:{m.group(1)}", None)
_rule(r"nvfuser_", "nvfuser", None)
# framework kernels by what they do
_rule(r"multi_tensor_apply|FusedAdam|adam|Adagrad|adagrad|sgd_", "optimizer", None)
_rule(r"rms_?norm", "norm:rms", None, re.IGNORECASE)
_rule(r"layer_?norm|LayerNorm|GammaBetaBackward", "norm:layer", None)
_rule(r"batch_?norm|\bbn_(fw|bw)|cudnn::bn_", "norm:batch", None)
_rule(r"softmax|SoftMax", "softmax", None)
_rule(r"nll_loss|ClassNLLCriterion|cross_entropy", "loss", None)
_rule(r"topk|TopK|[Ss]ort|radix|Radix", "sort/topk", "")
_rule(r"[Hh]istogram|bincount", "histogram", "")
_rule(r"embedding", "embedding", None)
_rule(r"CatArray|\bcat_", "copy:cat", None)
_rule(r"index|gather|scatter|Gather|Scatter|Index", "index/gather", None)
_rule(r"reduce_kernel|Reduce|reduce_1Block", "reduce", None)
_rule(r"elementwise|Elementwise|direct_copy|copy_kernel", "elementwise", None)
_rule(r"cub::|rocprim::", "cub", "")


_XMMA_TOK = re.compile(r"bf16|tf32|f16|f32|f64|e4m3|e5m2|i8|s8|i32|s32")
_DEEPGEMM_T: dict[str, str] = {"fp8": "fp8", "bf16": "bf16", "fp4": "fp4", "nvfp4": "fp4", "tf32": "tf32",
                               "w4a8": "fp8"}
# GEMM dtype words, most specific math first: an fp8/fp4/tf32 GEMM names its bf16/fp32 output types too
_GEMM_DTYPE_WORDS = [
    (re.compile(r"e2m1|nvfp4|mxfp4|\bfp4\b|_fp4_|float_e2m1"), "fp4"),
    _FP8,
    (re.compile(r"tf32|tfloat32"), "tf32"),
    (re.compile(r"BFloat16|bfloat16|__nv_bfloat16|\bbf16|_bf16"), "bf16"),
    (re.compile(r"\bc10::Half\b|\b__half\b|\bhalf\b|half_t|\bHalf\b|\bfp16\b|_f16_|_fp16|\bf16\b"), "fp16"),
    _FP64, _FP32, _INT8,
]


def gemm_dtype_in(text: str) -> str | None:
    """The math dtype a GEMM kernel name states (fp4, fp8, tf32 before bf16/fp16/fp32), or None."""
    for rx, dt in _GEMM_DTYPE_WORDS:
        if rx.search(text):
            return dt
    return None


def _xmma_dtype(ab: str, mma: str) -> str | None:
    """cuBLASLt xmma `<A><B>_<mma in><acc>`: the MMA input type when it is given, else A's."""
    toks = _XMMA_TOK.findall(mma) or _XMMA_TOK.findall(ab)
    if toks and toks[0] in ("i32", "s32"):   # the group was the accumulator: the storage types decide
        toks = _XMMA_TOK.findall(ab)
    return _XMMA_T.get(toks[0]) if toks else None


def _tensorop_dtype(acc: str, shape: str, name: str) -> str | None:
    """cuBLAS/CUTLASS tensor-op names `<acc><MMA shape>gemm` (s1688gemm, h884gemm, bf16_s16816gemm_bf16): the
    input type is the name's dtype word where there is one; `s1688` without one is TF32 (m16n8k8 with fp32
    operands exists only as TF32); `h` is fp16, `i` int8, `d` fp64; other `s` shapes take 16-bit inputs (fp16)."""
    word = gemm_dtype_in(re.sub(r"_align\d+|::Params.*", "", name))
    if word and word not in ("fp32",):
        return word
    if acc == "h":
        return "fp16"
    if acc == "i":
        return "int8"
    if acc == "d":
        return "fp64"
    return "tf32" if shape == "1688" else "fp16"


def _nccl_dtype(name: str) -> str | None:
    parts = re.split(r"[_(]", name)
    for p in parts:
        if p in _NCCL_DTYPES:
            return _NCCL_DTYPES[p]
    return None


@lru_cache(maxsize=65536)
def family(name: str) -> Family:
    """The family of one kernel / memcpy / memset name."""
    raw = name or ""
    probe = _demangle_itanium(raw) + " " + raw if raw.startswith("_Z") else raw
    for rx, fam, dt in _RULES:
        m = rx.search(probe)
        if not m:
            continue
        f = fam(m, raw) if callable(fam) else fam
        if callable(dt):
            d = dt(m, raw)
        elif dt is None:
            d = dtype_in(raw)
        else:
            d = dt or None
        return Family(f, d)
    # fallback: the innermost function name, with architecture tags and shapes removed
    base = _demangle_itanium(raw).split("::")[-1] if raw.startswith("_Z") else _strip_cxx(raw)
    base = _ARCH.sub("", base)
    base = _SHAPES.sub("", base).strip("_") or base
    return Family(f"kernel:{base}", dtype_in(raw))


def family_key(name: str) -> str:
    return family(name).key
