# Pipeline parallelism (parallel/pipeline/pipeline_model.h) through parallel_worker (tests/multiproc/parallel/): every
# schedule over 2 and 4 stages, and a pipeline of 2 stages with DDP, FSDP (+ activation checkpointing), TP + SP
# and FSDP × TP inside each stage, against the single-process run of the same global batch with the same
# tolerance as the other layouts. The model (--pp-model) has 8 blocks, enough for 4 ranks × 2 chunks, and
# untied embeddings. Gradient clipping is active, so the norm must sum every stage's.
parallel_reference(llama_pp --family llama --pp-model)
parallel_reference(gpt2_pp --family gpt2 --pp-model)
parallel_reference(llama_tpm_pp --family llama --tp-model --pp-model)

foreach(schedule gpipe 1f1b interleaved-1f1b zb-h1)
  parallel_layout(pp2_${schedule} 2 llama_pp --family llama --pp-model --layout ddp --pp 2 --schedule ${schedule})
  parallel_layout(pp4_${schedule} 4 gpt2_pp --family gpt2 --pp-model --layout ddp --pp 4 --schedule ${schedule})
endforeach()
# Accumulation: 2 micro-batches of the trainer concatenated, then cut into the pipeline's 8.
parallel_layout(pp2_1f1b_accum2 2 llama_pp --family llama --pp-model --layout ddp --pp 2 --accum 2
                --microbatches 8)
parallel_layout(pp2_dp2 4 gpt2_pp --family gpt2 --pp-model --layout ddp --pp 2)
parallel_layout(pp2_fsdp2_ac 4 llama_pp --family llama --pp-model --layout fsdp --pp 2 --ac)
parallel_layout(pp2_tp2_sp 4 llama_tpm_pp --family llama --tp-model --pp-model --layout ddp --pp 2 --tp 2 --sp)
parallel_layout(pp2_fsdp2_tp2 8 llama_tpm_pp --family llama --tp-model --pp-model --layout fsdp --pp 2 --tp 2)
