"""Kernel-family normalization: a golden table of real kernel names (from the trace corpus:
h200_moe, tracelens_*, dlrm, param, nsys h100/h200 exports) and the planted fixture names."""
import pytest

from traceview.diff.families import family

GOLDEN = [
    # cuBLAS / cuBLASLt GEMMs: shapes, tiles, clusters, layouts and architecture tags stripped
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm:nvjet bf16"),
    ("nvjet_sm90_tst_128x192_64x5_2x1_v_bz_coopB_NTN", "gemm:nvjet bf16"),
    ("nvjet_sm90_tst_128x32_64x10_2x1_v_bz_splitK_NTT", "gemm:nvjet bf16"),
    ("nvjet_sm103_tst_8x64_64x16_4x1_v_bz_TNN", "gemm:nvjet bf16"),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", "gemm:nvjet bf16"),
    ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT", "gemm:nvjet fp16"),
    ("ampere_sgemm_128x64_nn", "gemm:sgemm fp32"),
    ("volta_sgemm_128x32_nt", "gemm:sgemm fp32"),
    ("volta_sgemm_64x32_sliced1x4_nn", "gemm:sgemm fp32"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "gemm:xmma bf16"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "gemm:xmma bf16"),
    # xmma `<A><B>_<MMA input><accumulator>_<C>`: fp32 storage with TF32 math is a TF32 GEMM
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_kernel",
     "gemm:xmma tf32"),
    # fp32 on CUDA cores (ffma): h100_2gpu_inference nsys export
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x256x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
     "gemm:xmma fp32"),
    # fp8 (cuBLASLt on Ada/Hopper): A e4m3, MMA e4m3 with fp32 accumulation
    ("sm89_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x64_stage3_warpsize2x2x1_tensor16x8x32_kernel",
     "gemm:xmma fp8"),
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_cgasize1x2x1_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "gemm:xmma fp8"),
    # nvjet fp8 (`qq` inputs, seen under aten::_scaled_mm)
    ("nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_ovscale_TNT", "gemm:nvjet fp8"),
    # CUTLASS: SIMT sgemm is an fp32 GEMM family; s1688 tensor-op with fp32 operands is TF32 (hta_nccl_parser_config)
    ("void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>"
     "(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)",
     "gemm:cutlass-simt fp32"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>"
     "(cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4::Params)", "gemm:cutlass tf32"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>"
     "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8::Params)", "gemm:cutlass bf16"),
    ("cutlass3x_sm90_tensorop_gemm_e4m3_e4m3_f32_bf16_bf16_128x128x128_1x1x1_0_tnn_align16_warpspecialized_cooperative_"
     "fp8_fastaccum_epi_tma", "gemm:cutlass fp8"),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
     "cutlass::gemm::collective::CollectiveMma<cutlass::float_e4m3_t, cutlass::bfloat16_t>>>(Params)",
     "gemm:cutlass fp8"),
    ("volta_s884gemm_fp16_128x128_ldg8_f2f_nn", "gemm:tensorop fp16"),
    # cuBLAS legacy and MAGMA fp32 GEMMs with C++ signatures (hta_trace_filter, hta_df_index_resolver)
    ("void sgemm_largek_lds64<true, true, 6, 3, 4, 5, 2, 66>(float*, float const*, float const*, int, int, int, int, "
     "int, int, float const*, float const*, float, float, int, int, int*, int*)", "gemm:sgemm fp32"),
    ("void magma_sgemmEx_kernel<float, float, float, true, false, 6, 4, 6, 3, 4>(int, int, int, Tensor, int, Tensor, "
     "int, Tensor, int, Tensor, int, int, int, float const*, float const*, float, float, int)", "gemm:magma fp32"),
    # DeepGEMM (deepseek-ai/DeepGEMM kernel templates: fp8_gemm_kernel, sm90_fp8_gemm_1d2d_impl, ...)
    ("void deep_gemm::fp8_gemm_kernel<7168u, 2048u, 128u, 128u, 128u, 0u, 0u, 1u, 5u, 128u, 128u, 1u, false, "
     "(deep_gemm::GemmType)1>(__nv_bfloat16*, float*, int*, unsigned int, CUtensorMap, CUtensorMap, CUtensorMap, "
     "CUtensorMap)", "gemm:deepgemm fp8"),
    ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<0u, 0u, 0u, 4u, 128u, 128u, 128u, 128u, 5u, 1u, 128u, 256u, 1u, false, "
     "(deep_gemm::GemmType)1>(float*, int*, unsigned int, unsigned int, unsigned int)", "gemm:deepgemm fp8"),
    ("void deep_gemm::sm100_fp8_gemm_1d1d_impl<(cute::UMMA::Major)0>(int*, unsigned int)", "gemm:deepgemm fp8"),
    ("void deep_gemm::sm90_bf16_gemm_impl<0u, 0u>(int*, unsigned int)", "gemm:deepgemm bf16"),
    # cuDNN implicit-GEMM convolutions are convolutions, with the MMA type (hta_alexnet, hta_nccl_parser_config)
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_"
     "tensor16x8x8_alignc4_execute_kernel_cudnn", "conv:xmma-fprop tf32"),
    ("void cutlass_cudnn_infer::Kernel<"
     "cutlass_tensorop_s1688dgrad_optimized_tf32_128x128_16x4_nhwc_unity_stride_align4>"
     "(cutlass_tensorop_s1688dgrad_optimized_tf32_128x128_16x4_nhwc_unity_stride_align4::Params)",
     "conv:cutlass-dgrad tf32"),
    ("volta_h884gemm_64x64_ldg8_nn", "gemm:tensorop fp16"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "gemm:tensorop bf16"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>"
     "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)", "gemm:cutlass bf16"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x256_MI16x16x1_SN_LDSB1_AFC1", "gemm:tensile bf16"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false, float, "
     "__nv_bfloat16, __nv_bfloat16, true, false, false>(cublasLt::cublasSplitKParams<float>)",
     "gemm:splitk-reduce bf16"),
    # the same work as cuBLAS picks another tile: one family
    # (checked below: every nvjet tst name maps to one key)
    # collectives
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "nccl:SendRecv"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)", "nccl:SendRecv"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "nccl:AllReduce bf16"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "nccl:AllReduce fp32"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "nccl:Generic"),
    ("void dpsk::ep::internode::dispatch<false, 8, 4, 24>(int4*, float*, long*, int*, void*, int, int)",
     "deepep:dispatch"),
    ("void dpsk::ep::internode::combine<nv_bfloat16, 8, 4>(int4*, float*, int4 const*, int*, void*, int, int)",
     "deepep:combine"),
    # attention
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, "
     "false, true>(flash::Flash_fwd_params)", "attention bf16"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0_0",
     "attention fp16"),
    # PyTorch kernels by what they do; dtype from the functor's template argument
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
     "elementwise bf16"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<"
     "float, float, float, at::native::binary_internal::DivFunctor<float> > >(at::TensorIteratorBase&, "
     "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::DivFunctor<float> > const&)::"
     "{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float> >)",
     "elementwise fp32"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, true>(int, float, "
     "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
     "norm:layer bf16"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>"
     "(at::native::(anonymous namespace)::TensorListMetadata<4>)", "optimizer fp32"),
    ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float, "
     "unsigned int>, unsigned int, unsigned int, bool)", "sort/topk"),
    ("triton_poi_fused_add_cos_sin_0", "triton:poi_fused_add_cos_sin"),
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt64x128x32_wt32x32x8_ws1x1_wr2x1_ta1x8x1x1_1x4x1x64_tb1x8x2x1_1x4x1x64_gkgs",
     "conv:miopen-fwd bf16"),
    ("volta_scudnn_128x64_relu_interior_nn_v1", "conv:cudnn fp32"),
    # memory
    ("Memcpy DtoH (Device -> Pinned)", "memcpy:DtoH"),
    ("Memcpy DtoD (Device -> Device)", "memcpy:DtoD"),
    ("Memset (Device)", "memset"),
    # unknown kernels keep their innermost name, without arch tags and shapes
    ("void at::native::(anonymous namespace)::krn_partials_per_segment<long>(long*, long const*, long const*, long)",
     "kernel:krn_partials_per_segment"),
    ("batched_transpose_16x32_half", "kernel:batched_transpose_half"),
]


@pytest.mark.parametrize("name,key", GOLDEN)
def test_golden(name, key):
    assert family(name).key == key


def test_tiles_and_layouts_collapse():
    tiles = [f"nvjet_sm90_tst_{t}_64x4_{c}_{o}_bz_coopA_{lay}"
             for t in ("128x256", "256x128", "192x192", "64x8") for c in ("1x2", "2x1", "4x1")
             for o in ("h", "v") for lay in ("NNT", "TNT", "NTN")]
    assert {family(n).key for n in tiles} == {"gemm:nvjet bf16"}


def test_dtype_is_kept():
    # bf16 -> fp32 is a cause: the same library with another dtype is another family
    assert family("nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NTT").key != \
        family("nvjet_sss_128x64_64x4_1x2_h_bz_NTT").key
    assert family("nvjet_sss_128x64_64x4_1x2_h_bz_NTT").dtype == "fp32"
    assert family("ampere_sgemm_128x64_nn").category == \
        family("nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NTT").category
