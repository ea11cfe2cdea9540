# The parallel layouts on one GPU (label gpu): several ranks share cuda:0 over the CPU backend, whose
# communicator stages the GPU tensors through host memory (NCCL refuses two ranks on one GPU). Each layout,
# fp32 (the bf16 runs at the end: --bf16), against the single-GPU run of the same global batch. The reference
# accumulates one micro-batch per data-parallel rank (REF_ARGS --accum), so each GPU kernel sees the shapes a
# rank sees and only the reduction's order differs, as on the CPU; the tolerance per layout, and why, is in
# parallel_worker.cpp (tolerance()). Skipped (77) where no CUDA device is visible or this build has no CUDA:
# checked before meshrun starts the ranks (parallel/gpu_layout.sh). The reference is rerun per test (seconds
# on a GPU), so each test stands alone.
set(_pg_dir ${CMAKE_CURRENT_BINARY_DIR}/parallel_gpu)
file(MAKE_DIRECTORY ${_pg_dir})

# parallel_gpu_layout(NAME NPROC "REF_ARGS" layout-args...)
function(parallel_gpu_layout name nproc ref_args)
  meshtrain_add_test(multiproc parallel gpu_${name}
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/parallel/gpu_layout.sh ${MESHTRAIN_BIN}/parallel_worker
            ${MESHTRAIN_BIN}/meshrun ${_pg_dir}/ref_${name}.safetensors ${nproc} "${ref_args}" ${ARGN}
    LABELS gpu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 FAIL_REGULAR_EXPRESSION "FAIL")
endfunction()
parallel_gpu_layout(ddp2 2 "--family gpt2 --accum 2" --family gpt2 --layout ddp)
# Optimizer offload against the on-device optimizer's run: streamed from the backward (pinned buffers,
# download and upload streams; one process), downloaded after a DDP 2 backward with accumulation, and FSDP 2
# streaming each unit's reduced shard with accumulation (the host sums through the pinned staging buffers).
parallel_gpu_layout(ddp2_offload_accum2 2 "--family gpt2 --accum 4" --family gpt2 --layout ddp --accum 2 --offload)
parallel_gpu_layout(single_offload 1 "--family llama" --family llama --layout single --offload)
parallel_gpu_layout(fsdp2_offload_accum2 2 "--family llama --accum 4" --family llama --layout fsdp --accum 2 --offload)
parallel_gpu_layout(zero1 2 "--family gpt2 --accum 2" --family gpt2 --layout zero1)
parallel_gpu_layout(zero2 2 "--family gpt2 --accum 2" --family gpt2 --layout zero2)
parallel_gpu_layout(fsdp2 2 "--family llama --accum 2" --family llama --layout fsdp)
# QLoRA under FSDP 2: the NF4 rows sharded, gathered as bytes (staged through the host as 32-bit words) and
# dequantized by the CUDA kernel over the gathered rows' views, in the forward, the recompute and the backward.
parallel_gpu_layout(fsdp2_qlora 2 "--family llama --lora --nf4 --accum 2" --family llama --lora --nf4 --layout fsdp
                    --accum 2 --ac)
parallel_gpu_layout(hsdp2x2 4 "--family gpt2 --accum 4" --family gpt2 --layout hsdp --fsdp 2)
parallel_gpu_layout(tp2 2 "--family gpt2 --tp-model" --family gpt2 --tp-model --layout ddp --tp 2)
parallel_gpu_layout(tp2_sp 2 "--family llama --tp-model" --family llama --tp-model --layout ddp --tp 2 --sp)
parallel_gpu_layout(fsdp2_tp2 4 "--family llama --tp-model --accum 2" --family llama --tp-model --layout fsdp --tp 2)
parallel_gpu_layout(ddp2_tp2_ac 4 "--family gpt2 --tp-model --accum 2" --family gpt2 --tp-model --layout ddp --tp 2
                    --ac)
# Pipelines (docs/pipeline.md) on the one GPU: the reference accumulates the pipeline's micro-batches (8 / m
# sequences each), so every kernel sees a stage's shapes.
parallel_gpu_layout(pp2_1f1b 2 "--family llama --pp-model --accum 4" --family llama --pp-model --layout ddp --pp 2)
parallel_gpu_layout(pp4_interleaved 4 "--family gpt2 --pp-model --accum 8" --family gpt2 --pp-model --layout ddp
                    --pp 4 --schedule interleaved-1f1b)
parallel_gpu_layout(pp2_fsdp2_tp2 8 "--family llama --tp-model --pp-model --accum 8" --family llama --tp-model
                    --pp-model --layout fsdp --pp 2 --tp 2)
# Fine-tuning's data and tied embeddings (docs/pipeline.md): packed documents whose boundaries are read back from
# the device and re-based per pipeline micro-batch, loss weights computed on the device; a tied embedding's
# copies summed between the stages.
parallel_gpu_layout(pp2_instruct 2 "--family llama --pp-model --packed --masked --accum 4" --family llama --pp-model
                    --packed --masked --layout ddp --pp 2)
parallel_gpu_layout(pp2_tied 2 "--family gpt2 --pp-model --tie --accum 4" --family gpt2 --pp-model --tie
                    --layout ddp --pp 2)
# The same comparisons in bf16 (train.dtype bf16: autocast, the GEMMs writing the fp32 masters' weight gradients
# and adding the residual), held to the bf16 bound: the layouts run the trainer's bf16 kernels too.
parallel_gpu_layout(ddp2_bf16 2 "--family gpt2 --accum 2 --bf16" --family gpt2 --layout ddp --bf16)
parallel_gpu_layout(zero2_bf16 2 "--family gpt2 --accum 2 --bf16" --family gpt2 --layout zero2 --bf16)
parallel_gpu_layout(fsdp2_bf16 2 "--family llama --accum 2 --bf16" --family llama --layout fsdp --bf16)
parallel_gpu_layout(pp2_1f1b_bf16 2 "--family llama --pp-model --accum 4 --bf16" --family llama --pp-model
                    --layout ddp --pp 2 --bf16)
