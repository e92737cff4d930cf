"""Kernel families: the same job on different GPUs gets the same family."""
from __future__ import annotations

import gzip
import json

import pytest

from cuptiprof.analyse.families import base_name, family

# Real kernel names from the traces in ../shared/traces (V100, A100) and common H100/T4 names.
CASES = {
    "volta_sgemm_128x64_nn": "gemm",
    "ampere_sgemm_128x128_tn": "gemm",
    "turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn": "gemm",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel": "gemm",
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nt_align1>(cutlass_80_tensorop_s1688gemm_128x128_16x4_nt_align1::Params)": "gemm",
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, cublasGemvParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >, float>(cublasGemvParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >, float, float)": "gemm",
    "void splitKreduce_kernel<float, float, float, float>(cublasSplitKParams<float>, float const*, float const*, float*, float const*, float const*, float const*)": "gemm",
    "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT": "gemm",
    "volta_scudnn_128x64_relu_interior_nn_v1": "conv",
    "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel_cudnn_infer": "conv",
    "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, true, true>(int, int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, float const*, float const*, bool, int, int)": "conv",
    "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams<float, float>)": "conv",
    "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t> >(Flash_fwd_params)": "flash_attention",
    "fmha_cutlassF_f16_aligned_64x64_rf_sm80": "flash_attention",
    "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true>(float*, float const*, int, int, int)": "softmax",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, float const*, float const*, float*, float*, float*)": "layernorm",
    "void cudnn::bn_fw_tr_1C11_singleread<float, 512, true, 1, 2, 0>(cudnn::bn_fw_tr_1C11_args<float>)": "batchnorm",
    "triton_poi_fused_add_mul_0": "triton_pointwise",
    "triton_red_fused_native_layer_norm_1": "triton_reduction",
    "triton__0d1d2d3d": "triton_fused",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)": "elementwise",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1})": "copy",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float>, unsigned int, float, 4>)": "reduce",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, std::multiplies<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, std::multiplies<float>, float)": "optimizer",
    "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<8> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<8> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char*, long)#1} const&, bool)::{lambda(int)#1}>(long, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<8> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<8> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char*, long)#1} const&, bool)::{lambda(int)#1})": "index_scatter",
    "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, int, int, int, int, int, int, int, int, int, int, int, int, int, int, float*, long*)": "pooling",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)": "nccl_allreduce",
    "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)": "nccl_allgather",
    # cub's reductions are reductions; its sorts and scans are sort_scan
    "void cub::DeviceReduceSingleTileKernel<cub::DeviceReducePolicy<float, float, int, cub::Sum>::Policy600, float*, float*, int, cub::Sum, float>(float*, float*, int, cub::Sum, float)": "reduce",
    "void cub::CUB_200200_800_NS::DeviceSegmentedReduceKernel<cub::CUB_200200_800_NS::DeviceReducePolicy<bool, int, int, cub::CUB_200200_800_NS::Sum>::Policy600, bool const*, int*, int*, int, cub::CUB_200200_800_NS::Sum, int>(bool const*, int*, int*, int*, int, cub::CUB_200200_800_NS::Sum, int)": "reduce",
    "void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, long, int>::Policy800, false, long, long, int, int, cub::detail::identity_decomposer_t>(int*, int*, long*, long const*, long*, long const*, int, int, int, cub::detail::identity_decomposer_t)": "sort_scan",
    "void cub::DeviceScanKernel<cub::DeviceScanPolicy<int>::Policy600, int const*, int*, cub::ScanTileState<int, true>, cub::Sum, cub::detail::InputValue<int, int*>, int>(int const*, int*, cub::ScanTileState<int, true>, int, cub::Sum, cub::detail::InputValue<int, int*>, int)": "sort_scan",
    # reductions by key (thrust's agents, cub's kernel) are reductions; thrust's scans and sorts are not
    "void thrust::cuda_cub::core::_kernel_agent<thrust::cuda_cub::__reduce_by_key::ReduceByKeyAgent<thrust::device_ptr<int>, thrust::device_ptr<float>, thrust::device_ptr<int>, thrust::device_ptr<float>, thrust::equal_to<int>, thrust::plus<float>, int*, int>, thrust::device_ptr<int>, thrust::device_ptr<float>, thrust::device_ptr<int>, thrust::device_ptr<float>, thrust::equal_to<int>, thrust::plus<float>, int*, cub::ReduceByKeyScanTileState<float, int, true>, unsigned long>(thrust::device_ptr<int>, thrust::device_ptr<float>, thrust::device_ptr<int>, thrust::device_ptr<float>, thrust::equal_to<int>, thrust::plus<float>, int*, cub::ReduceByKeyScanTileState<float, int, true>, unsigned long, int)": "reduce",
    "void thrust::cuda_cub::core::_kernel_agent<thrust::cuda_cub::__reduce::ReduceAgent<float*, float*, float, int, thrust::plus<float> >, float*, float*, int, cub::GridEvenShare<int>, thrust::plus<float> >(float*, float*, int, cub::GridEvenShare<int>, thrust::plus<float>)": "reduce",
    # (from a real trace in ../shared/traces)
    "void cub::DeviceReduceByKeyKernel<cub::DispatchReduceByKey<long*, long*, cub::ConstantInputIterator<int, int>, int*, int*, cub::Equality, cub::Sum, int>::PtxReduceByKeyPolicy, long*, long*, cub::ConstantInputIterator<int, int>, int*, int*, cub::ReduceByKeyScanTileState<int, int, true>, cub::Equality, cub::Sum, int>(long*, long*, cub::ConstantInputIterator<int, int>, int*, int*, cub::ReduceByKeyScanTileState<int, int, true>, int, cub::Equality, cub::Sum, int)": "reduce",
    "void thrust::cuda_cub::core::_kernel_agent<thrust::cuda_cub::__scan::ScanAgent<int*, int*, thrust::plus<int>, int, int, thrust::detail::integral_constant<bool, true> >, int*, int*, thrust::plus<int>, int, cub::ScanTileState<int, true>, thrust::cuda_cub::__scan::AddInitToScan<int, thrust::plus<int> > >(int*, int*, thrust::plus<int>, int, cub::ScanTileState<int, true>, int, thrust::cuda_cub::__scan::AddInitToScan<int, thrust::plus<int> >)": "sort_scan",
    "void thrust::cuda_cub::core::_kernel_agent<thrust::cuda_cub::__scan_by_key::ScanByKeyAgent<thrust::device_ptr<int>, thrust::device_ptr<float>, thrust::device_ptr<float>, thrust::equal_to<int>, thrust::plus<float>, int, float, thrust::detail::integral_constant<bool, true> >, thrust::device_ptr<int>, thrust::device_ptr<float>, thrust::device_ptr<float>, thrust::plus<float>, thrust::equal_to<int>, cub::ReduceByKeyScanTileState<float, int, true>, int, thrust::cuda_cub::__scan_by_key::DoNothing<float>, thrust::detail::integral_constant<bool, true> >(thrust::device_ptr<int>, thrust::device_ptr<float>, thrust::device_ptr<float>, thrust::plus<float>, thrust::equal_to<int>, cub::ReduceByKeyScanTileState<float, int, true>, int, thrust::cuda_cub::__scan_by_key::DoNothing<float>)": "sort_scan",
    "void thrust::cuda_cub::core::_kernel_agent<thrust::cuda_cub::__merge_sort::BlockSortAgent<thrust::device_ptr<int>, thrust::device_ptr<float>, long, thrust::less<int>, thrust::detail::integral_constant<bool, true>, thrust::detail::integral_constant<bool, false> >, bool, thrust::device_ptr<int>, thrust::device_ptr<float>, long, int*, float*, thrust::less<int> >(bool, thrust::device_ptr<int>, thrust::device_ptr<float>, long, int*, float*, thrust::less<int>)": "sort_scan",
    # fbgemm_gpu (DLRM, from a real trace in ../shared/traces): its embedding kernels name the
    # library only in a parameter type, and are no GEMM for it
    "void split_embedding_codegen_forward_unweighted_kernel<float, float, float, false, long, 1ul, 16ul>(at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>, long, fbgemm_gpu::FixedDivisor)": "embedding",
    "void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)": "copy",
    "void at::native::vectorized_elementwise_kernel<4, fbgemm_gpu::_hfp8_to_float_gpu(at::Tensor const&, long, long)::{lambda(unsigned char)#1}, at::detail::Array<char*, 2> >(int, fbgemm_gpu::_hfp8_to_float_gpu(at::Tensor const&, long, long)::{lambda(unsigned char)#1}, at::detail::Array<char*, 2>)": "elementwise",
    # CCCL 2.8+ puts cub's reduction kernels in cub::detail::reduce (PyTorch's copy under at_cuda_detail)
    "void at_cuda_detail::cub::detail::reduce::DeviceReduceKernel<at_cuda_detail::cub::detail::reduce::policy_hub<int, unsigned long long, cuda::std::__4::plus<void>>::Policy1000, int const*, unsigned long long, cuda::std::__4::plus<void>, int, cuda::std::__4::identity>(int const*, int*, unsigned long long, cub::GridEvenShare<unsigned long long>, cuda::std::__4::plus<void>, cuda::std::__4::identity)": "reduce",
    "void cub::CUB_300000_SM_900_NS::detail::reduce::DeviceReduceSingleTileKernel<cub::CUB_300000_SM_900_NS::detail::reduce::policy_hub<float, int, cuda::std::__4::plus<void>>::Policy1000, float*, float*, int, cuda::std::__4::plus<void>, float, float, cuda::std::__4::identity>(float*, float*, int, cuda::std::__4::plus<void>, float, cuda::std::__4::identity)": "reduce",
    # TorchInductor's persistent reductions and templates (its GEMM templates are no plain gemm)
    "triton_per_fused__softmax_0": "triton_reduction",
    "triton_tem_fused_addmm_0": "triton_template",
    # attention without 'flash' in the name: PyTorch's memory-efficient kernel, cuDNN's SDPA
    "void attention_kernel_batched_impl<AttentionKernel<cutlass::half_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true> >(AttentionKernel<cutlass::half_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)": "flash_attention",
    "cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x64_4x1x1_kernel0_0": "flash_attention",
    # (from real traces in ../shared/traces)
    "void at::native::im2col_kernel<float>(long, float const*, long, long, long, long, long, long, long, long, long, long, long, long, float*)": "conv",
    "void fft2d_r2c_32x32<float, false, 5u, true>(float2*, float const*, int, int, int, int, int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)": "conv",
    "void cudnn::cnn::reduce_wgrad_nchw_helper<float, float>(void*, void const*, float, int, int)": "conv",
    "void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, float*, cublasLtEpilogue_t, int, float*, long, void*, long, long, long)": "gemm",
    "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float, float>(long, float, float const*, float*, float*)": "groupnorm",
    "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>(long, long, float const*, float const*, float const*, float const*, float*, float*)": "layernorm",
    "void at::native::_scatter_gather_elementwise_kernel<128, 4, at::native::_cuda_scatter_gather_internal_kernel<true, float>::operator()<at::native::ReduceAdd>(at::TensorIterator&, long, long, long, at::native::ReduceAdd const&)::{lambda(int)#1}>(int, at::native::_cuda_scatter_gather_internal_kernel<true, float>::operator()<at::native::ReduceAdd>(at::TensorIterator&, long, long, long, at::native::ReduceAdd const&)::{lambda(int)#1})": "index_scatter",
    "void permute_pooled_embs_kernel<float>(float const*, long const*, long const*, long const*, float*, long, long, long)": "embedding",
    "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)": "copy",
    "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<float, unsigned int>, at::cuda::detail::TensorInfo<float, unsigned int>, at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, at::PhiloxCudaState)": "random",
    "void at::native::bitonicSortKVInPlace<2, -1, 16, 16, float, long, at::native::GTOp<float, true>, unsigned int>(at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, unsigned int, unsigned int, unsigned int, at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int, at::native::GTOp<float, true>)": "sort_scan",
    # conversions are no convolutions (PyTorch's sparse index conversion, vLLM's FP8 cache cast)
    "void at::native::(anonymous namespace)::convert_indices_from_coo_to_csr_cuda_kernel<int, long>(long*, int const*, long, long)": "convert_indices_from_coo_to_csr_cuda_kernel",
    "void vllm::convert_fp8_kernel<unsigned char, c10::BFloat16, (vllm::Fp8KVCacheDataType)1>(c10::BFloat16 const*, unsigned char*, float, long)": "convert_fp8_kernel",
    "Memcpy HtoD": "Memcpy HtoD",
    "Memset": "Memset",
    "saxpy(double *, double *, double *, double, int)": "saxpy",
}


@pytest.mark.parametrize("name,expected", list(CASES.items()), ids=lambda v: str(v)[:40])
def test_family(name, expected):
    assert family(name) == expected


def test_base_name_strips_arch_shapes_templates_and_params():
    assert base_name("void clover::par_ranged1d_kernel<build_field(global_variables &)>(clover::Range1d, T1)") \
        == "par_ranged1d_kernel"
    assert base_name("sm80_my_custom_kernel_128x64_nn") == "my_custom_kernel"
    assert family(None) == "(unnamed)" and family("") == "(unnamed)"


def test_an_unknown_kernel_gets_one_family_across_architectures():
    # the same library kernel built for two GPUs: other arch prefix, tile, alignment, version
    names = ["sm80_fused_bias_act_128x64_align8", "sm90_fused_bias_act_256x128_align4",
             "volta_fused_bias_act_64x64_v1", "ampere_fused_bias_act_v2"]
    assert {family(n) for n in names} == {"fused_bias_act"}


def test_every_kernel_of_a_real_trace_gets_a_family(shared_traces):
    path = shared_traces / "kineto-tbplugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
    events = json.load(gzip.open(path))["traceEvents"]
    names = {e["name"] for e in events if str(e.get("cat", "")).lower() == "kernel"}
    assert len(names) == 67  # the published count of distinct kernel names
    fams = {family(n) for n in names}
    assert all(fams) and len(fams) < len(names) / 3
    assert {"conv", "gemm", "batchnorm", "elementwise", "pooling"} <= fams


@pytest.mark.parametrize("name", ["void cuApplyLayerNorm<float, float, float>(float*, float*, float*, "
                                  "float const*, int, int, float, float const*, float const*)",
                                  "void cuApplyRMSNorm<c10::BFloat16, float, c10::BFloat16>(float*, int, int)"])
def test_family_rules_match_names_in_any_case(name):
    # apex's fused norms spell LayerNorm / RMSNorm in camel case
    assert family(name) == "layernorm"


@pytest.mark.parametrize("name", ["Sync stream_synchronize", "Sync event_synchronize",
                                  "Memcpy DtoD", "Memset"])
def test_syncs_and_copies_keep_their_activity_name(name):
    # 'Sync stream_synchronize' is not a kernel called stream_synchronize
    assert family(name) == name


def test_a_name_that_strips_to_nothing_keeps_itself():
    assert base_name("<lambda>") == "<lambda>"
    assert family("(anonymous namespace)::<unnamed>") == "(anonymous namespace)::<unnamed>"
