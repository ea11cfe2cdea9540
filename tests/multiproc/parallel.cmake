# Multi-process tests of the parallel layouts (tests/multiproc/parallel/): each layout trains the same tiny
# model from the same initial weights on the same data as a single process and must end with the same
# losses, first gradient norm and whole parameters (tolerance in parallel_worker.cpp: fp32, loss and norm rtol
# 1e-5, params atol 5e-5 + rtol 1e-4). Real processes through meshrun on the CPU backend. Every run also checks, with --check-plan, that
# each rank holds exactly the parameter, master, gradient and optimizer bytes `meshtrain plan` predicts for its
# coordinate (plan/rank_state.h; docs/plan.md).
add_executable(parallel_worker ${CMAKE_CURRENT_LIST_DIR}/parallel/parallel_worker.cpp)
target_link_libraries(parallel_worker PRIVATE meshtrain_parallel meshtrain_train meshtrain_plan)
meshtrain_warnings(parallel_worker)
meshtrain_use_torch(parallel_worker)
target_include_directories(parallel_worker PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)  # support/tiny_model.h

set(_pw ${MESHTRAIN_BIN}/parallel_worker)
set(_pdir ${CMAKE_CURRENT_BINARY_DIR}/parallel)
file(MAKE_DIRECTORY ${_pdir})

# References: one single-process run per (family, accumulation) the layouts compare against.
function(parallel_reference name)
  meshtrain_add_test(multiproc parallel ref_${name}
    COMMAND ${_pw} --layout single ${ARGN} --out ${_pdir}/ref_${name}.safetensors --check-plan
    PROPERTIES TIMEOUT 300 FIXTURES_SETUP parallel_ref_${name})
endfunction()
parallel_reference(gpt2 --family gpt2)
parallel_reference(llama --family llama)
parallel_reference(gpt2_tpm --family gpt2 --tp-model)
parallel_reference(llama_tpm --family llama --tp-model)
parallel_reference(gpt2_freeze --family gpt2 --freeze-half)
parallel_reference(llama_tpm_freeze --family llama --tp-model --freeze-half)
parallel_reference(llama_lora --family llama --lora --accum 2)
parallel_reference(llama_tpm_lora --family llama --tp-model --lora --accum 2)
parallel_reference(llama_qlora --family llama --lora --nf4 --accum 2)
parallel_reference(llama_tpm_lora_drop --family llama --tp-model --lora --lora-dropout 0.2 --accum 2)

# parallel_layout(NAME NPROC REF worker-args...)
function(parallel_layout name nproc ref)
  meshtrain_add_test(multiproc parallel ${name}
    COMMAND ${MESHTRAIN_BIN}/meshrun --standalone --nproc-per-node ${nproc} --no-python ${_pw} ${ARGN}
            --compare ${_pdir}/ref_${ref}.safetensors --check-plan
    PROPERTIES TIMEOUT 600 FIXTURES_REQUIRED parallel_ref_${ref} PASS_REGULAR_EXPRESSION "PASS"
               FAIL_REGULAR_EXPRESSION "FAIL")
endfunction()
parallel_layout(ddp2 2 gpt2 --family gpt2 --layout ddp)
parallel_layout(ddp4 4 llama --family llama --layout ddp)
parallel_layout(zero1 2 gpt2 --family gpt2 --layout zero1)
parallel_layout(zero2 4 gpt2 --family gpt2 --layout zero2)
parallel_layout(fsdp2 2 gpt2 --family gpt2 --layout fsdp)
parallel_layout(fsdp4 4 llama --family llama --layout fsdp)
parallel_layout(fsdp2_ac_noreshard 2 llama --family llama --layout fsdp --ac --no-reshard)
parallel_layout(hsdp2x2 4 gpt2 --family gpt2 --layout hsdp --fsdp 2)
# Accumulation with skipped reductions equals one large batch: 2 ranks × 2 micro-batches of 2 sequences
# (and ZeRO-1 / FSDP, which accumulate differently) against the single process's one batch of 8.
parallel_layout(ddp2_accum2 2 gpt2 --family gpt2 --layout ddp --accum 2)
parallel_layout(zero1_accum2 2 gpt2 --family gpt2 --layout zero1 --accum 2)
parallel_layout(fsdp2_accum2 2 gpt2 --family gpt2 --layout fsdp --accum 2 --ac)
# optimizer.offload: cpu (master and moments in host memory, clipping inside the host update) against the
# on-device optimizer's single-process reference: DDP 2 and FSDP 2 (with accumulation). Without accumulation
# the replicated layouts stream each gradient to the host during the backward (one process: from the
# post-accumulate hooks; DDP 2: the averaged buckets); with it they hold the gradients: summed on the device
# in the compute dtype, taken down in chunks at the step. FSDP and HSDP stream at any accumulation
# (core/gradient_streaming.h): each unit's reduce-scattered shard gradient goes
# to the host during the backward and the host sums the micro-batches; the device keeps the shards only in
# param_dtype (--check-plan: no gradient shard, no fp32 master on the device). Frozen parameters (train.freeze)
# stay bit-identical; HSDP averages each shard gradient over the replicas before it leaves.
parallel_layout(ddp2_offload 2 gpt2 --family gpt2 --layout ddp --offload)
parallel_layout(ddp2_offload_accum2 2 gpt2 --family gpt2 --layout ddp --accum 2 --offload)
parallel_layout(single_offload 1 llama --family llama --layout single --offload)
parallel_layout(single_offload_accum2 1 llama --family llama --layout single --accum 2 --offload)
parallel_layout(fsdp2_offload 2 llama --family llama --layout fsdp --offload)
parallel_layout(fsdp2_offload_accum2 2 llama --family llama --layout fsdp --accum 2 --offload)
parallel_layout(fsdp2_offload_freeze 2 gpt2_freeze --family gpt2 --layout fsdp --freeze-half --accum 2 --ac --offload)
parallel_layout(hsdp2x2_offload 4 gpt2 --family gpt2 --layout hsdp --fsdp 2 --accum 2 --offload)
# Tensor parallelism composed by parallelize() (TP → activation checkpointing → DDP / ZeRO / FSDP), on the model
# TP 2 and 4 can split: TP alone, DDP × TP, ZeRO-1 × TP and FSDP × TP (FSDP's chunks inside uneven vocabulary
# blocks), with sequence parallelism, activation checkpointing and accumulation in some. Gradient clipping is
# active, so the global norm must count TP blocks over tp and replicated parameters once; the parameters are
# assembled from every rank's sharded_parameters(), so their offsets and writers must tile each tensor exactly
# once.
parallel_layout(tp2 2 gpt2_tpm --family gpt2 --tp-model --layout ddp --tp 2)
parallel_layout(tp4 4 llama_tpm --family llama --tp-model --layout ddp --tp 4)
parallel_layout(tp2_sp 2 llama_tpm --family llama --tp-model --layout ddp --tp 2 --sp)
parallel_layout(ddp2_tp2_sp_accum2 4 gpt2_tpm --family gpt2 --tp-model --layout ddp --tp 2 --sp --accum 2)
parallel_layout(fsdp2_tp2 4 llama_tpm --family llama --tp-model --layout fsdp --tp 2)
parallel_layout(fsdp2_tp2_sp_ac 4 gpt2_tpm --family gpt2 --tp-model --layout fsdp --tp 2 --sp --ac)
parallel_layout(zero1_tp2_sp_accum2 4 llama_tpm --family llama --tp-model --layout zero1 --tp 2 --sp
                --accum 2)
# Frozen parameters (train.freeze: block 1 whole, block 2's attention): under DDP, ZeRO-1/2, FSDP, HSDP (a block
# with a trainable and a frozen unit, and a block of frozen units only), TP and FSDP × TP they end
# bit-identical to their initial values (the worker checks) and the trainable ones match the single process
# with the same freeze, clipping counting only trainable gradients.
parallel_layout(ddp2_freeze 2 gpt2_freeze --family gpt2 --layout ddp --freeze-half)
parallel_layout(zero1_freeze 2 gpt2_freeze --family gpt2 --layout zero1 --freeze-half --accum 2)
parallel_layout(zero2_freeze 2 gpt2_freeze --family gpt2 --layout zero2 --freeze-half)
parallel_layout(fsdp2_freeze 2 gpt2_freeze --family gpt2 --layout fsdp --freeze-half --accum 2)
parallel_layout(hsdp2x2_freeze 4 gpt2_freeze --family gpt2 --layout hsdp --fsdp 2 --freeze-half --ac)
parallel_layout(tp2_freeze 2 llama_tpm_freeze --family llama --tp-model --layout ddp --tp 2 --sp --freeze-half)
parallel_layout(fsdp2_tp2_freeze 4 llama_tpm_freeze --family llama --tp-model --layout fsdp --tp 2 --freeze-half)
# bf16 reduction: same run within bf16's tolerance.
parallel_layout(ddp2_bf16_reduce 2 gpt2 --family gpt2 --layout ddp --bf16-reduce)

# A rank that skips the gradient all-reduce makes the others fail with the communicator's timeout error
# (3 s), naming it — not a hang.
meshtrain_add_test(multiproc parallel desync_timeout
  COMMAND ${MESHTRAIN_BIN}/meshrun --standalone --nproc-per-node 2 --no-python ${_pw} --layout ddp --desync
  PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION "timed out after 3000 ms waiting for rank\\(s\\) 1")

# LoRA (docs/lora.md): the base frozen, only the adapters train — under DDP and FSDP (the frozen base in
# parameter-only units: sharded, gathered, never reduced) with accumulation and activation checkpointing,
# against one process at the same tolerance.
parallel_layout(ddp2_lora 2 llama_lora --family llama --lora --layout ddp --accum 2 --ac)
parallel_layout(fsdp2_lora 2 llama_lora --family llama --lora --layout fsdp --accum 2 --ac)
# QLoRA (model.base_quant nf4): the NF4 block linears outside the module's parameters — whole on every rank
# under DDP, their rows sharded by FSDP/ZeRO (each rank 1/2 of them, checked) — the rest as under LoRA;
# --check-plan counts the NF4 bytes against the planner's nf4_bytes / nf4_shard_bytes. The NF4 bytes gather
# exactly, so the dequantized base is the single process's to the bit: the losses match it at the layouts'
# fp32 tolerance (the adapters' gradients are averaged in another order).
parallel_layout(ddp2_qlora 2 llama_qlora --family llama --lora --nf4 --layout ddp --accum 2 --ac)
parallel_layout(fsdp2_qlora 2 llama_qlora --family llama --lora --nf4 --layout fsdp --accum 2 --ac)
# FSDP shards the NF4 rows: without activation checkpointing the backward dequantizes from the forward's saved
# views of the gathered rows, freed in between and gathered again; ZeRO-2 keeps them gathered.
parallel_layout(fsdp2_qlora_noac 2 llama_qlora --family llama --lora --nf4 --layout fsdp --accum 2)
parallel_layout(zero2_qlora 2 llama_qlora --family llama --lora --nf4 --layout zero2 --accum 2)
# LoRA under tensor parallelism: the adapters split with their column-/row-parallel layers (the replicated
# piece's partial gradients summed over tp) — TP 2 with sequence parallelism and activation checkpointing,
# FSDP 2 × TP 2, and TP 2 with adapter dropout (masks drawn for the whole input width: the single process's).
parallel_layout(tp2_lora 2 llama_tpm_lora --family llama --tp-model --lora --layout ddp --tp 2 --accum 2)
parallel_layout(tp2_sp_ac_lora 2 llama_tpm_lora --family llama --tp-model --lora --layout ddp --tp 2 --sp --ac
                --accum 2)
parallel_layout(fsdp2_tp2_lora 4 llama_tpm_lora --family llama --tp-model --lora --layout fsdp --tp 2 --accum 2)
parallel_layout(tp2_sp_lora_dropout 2 llama_tpm_lora_drop --family llama --tp-model --lora --lora-dropout 0.2
                --layout ddp --tp 2 --sp --accum 2)
