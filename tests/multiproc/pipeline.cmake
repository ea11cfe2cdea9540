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

# What fine-tuning needs (docs/pipeline.md "What a micro-batch carries", "Tied embeddings"), each against its
# own single-process run: packed documents reaching every stage's attention and positions; loss-masked rows
# weighted by their share of the step's unmasked targets (a pipeline micro-batch without one among them: rows
# 2-3), with accumulation re-cut into the pipeline's 8 and with DDP; tied embeddings (Llama as 3.2 1B/3B ties
# them; GPT-2) whose two copies sum their gradients and end equal, the first step's gradient norm counting the
# weight once — over 1F1B, interleaved (the first and the last model chunk), 4 stages (the pair is ranks 0 and 3
# of the pp group), FSDP and TP (the copy a vocabulary block per tp rank) inside the stages.
parallel_reference(llama_pp_packed --family llama --pp-model --packed)
parallel_reference(gpt2_pp_masked --family gpt2 --pp-model --masked)
parallel_reference(llama_pp_instruct --family llama --pp-model --packed --masked)
parallel_reference(gpt2_pp_tied --family gpt2 --pp-model --tie)
parallel_reference(llama_pp_tied --family llama --pp-model --tie)
parallel_reference(llama_tpm_pp_tied --family llama --tp-model --pp-model --tie)
parallel_layout(pp2_packed 2 llama_pp_packed --family llama --pp-model --packed --layout ddp --pp 2)
parallel_layout(pp2_masked_accum2 2 gpt2_pp_masked --family gpt2 --pp-model --masked --layout ddp --pp 2 --accum 2
                --microbatches 8)
parallel_layout(pp2_dp2_instruct 4 llama_pp_instruct --family llama --pp-model --packed --masked --layout ddp --pp 2)
parallel_layout(pp2_tied 2 llama_pp_tied --family llama --pp-model --tie --layout ddp --pp 2)
parallel_layout(pp2_interleaved_tied 2 llama_pp_tied --family llama --pp-model --tie --layout ddp --pp 2
                --schedule interleaved-1f1b)
parallel_layout(pp4_tied 4 gpt2_pp_tied --family gpt2 --pp-model --tie --layout ddp --pp 4)
parallel_layout(pp2_fsdp2_tied 4 gpt2_pp_tied --family gpt2 --pp-model --tie --layout fsdp --pp 2)
parallel_layout(pp2_tp2_tied 4 llama_tpm_pp_tied --family llama --tp-model --pp-model --tie --layout ddp --pp 2 --tp 2)
