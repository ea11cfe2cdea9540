# Tier 4: the quickstart under meshrun (two CPU workers), against the single-process run and a baseline.
meshtrain_add_test(e2e train quickstart
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/quickstart_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)
meshtrain_add_test(e2e core cli_errors
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/cli_errors_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 300)
# meshtrain eval against the trainer's validation loss: one process, meshrun 2 ranks, FSDP-sharded eval.
meshtrain_add_test(e2e train eval
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/eval_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600)
meshtrain_add_test(e2e train preempt
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/preempt_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600)
meshtrain_add_test(e2e parallel tp_train
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/tp_train_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600)
# LoRA under TP 2 (+ sequence parallelism) against one process: losses, checkpoints resumed across tp 1 ↔ 2,
# merged and PEFT exports of either run alike (docs/lora.md).
meshtrain_add_test(e2e parallel lora_tp
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/lora_tp_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  LABELS ckpt PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# On a machine with ≥ 2 GPUs: TP 2 over NCCL against one GPU (fp32), and bf16; skipped (77) otherwise.
meshtrain_add_test(e2e parallel tp_gpu
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/tp_gpu_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  LABELS gpu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# train.cuda_graph: the captured step against the eager step (GPT-2 bf16, Llama fp32); skipped (77) without a GPU.
meshtrain_add_test(e2e train cuda_graph_gpu
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/cuda_graph_gpu_test.py
          ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  LABELS gpu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# bench train --memory-snapshot: the allocator's history as PyTorch's memory viewer reads it (GPU only).
meshtrain_add_test(e2e train memory_snapshot_gpu
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/memory_snapshot_gpu_test.py
          ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  LABELS gpu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# A run that does not fit the GPU: exit 1 and one line naming the shortage, no C++ stack (GPU only).
meshtrain_add_test(e2e train out_of_memory_gpu
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/out_of_memory_gpu_test.py
          ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  LABELS gpu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# scripts/memory_peak.py on snapshots written in PyTorch's format: the peak replayed, its blocks by call site, two
# snapshots set side by side, bad files one line and exit 2.
meshtrain_add_test(e2e train memory_peak
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/memory_peak_test.py ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 120)
# bench train --profile: trace and phase table on CPU; the same with CUDA kernels on a GPU machine.
meshtrain_add_test(e2e train profile
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/profile_test.py ${MESHTRAIN_BIN}
  PROPERTIES TIMEOUT 300)
meshtrain_add_test(e2e train profile_gpu
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/profile_test.py ${MESHTRAIN_BIN} --device cuda
  LABELS gpu PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)

# `meshtrain plan`: the table, --json, --search and its flag errors (tests/e2e/plan_cli_test.py).
meshtrain_add_test(e2e plan cli
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/plan_cli_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 120)
# Watching a run: TensorBoard events read back by the tensorboard package, no GPU readings without a GPU, a
# slowed rank named as the straggler (two CPU ranks under meshrun). Skipped (77) without tensorboard.
meshtrain_add_test(e2e train observe
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/observe_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
# Experiment tracking: the resolved config as TensorBoard hyperparameters and text, samples as text, W&B in
# offline mode read back with wandb's own record reader, a resume continuing the W&B run, a Python without wandb
# refused in one line (tests/e2e/tracking_test.py). Skipped (77) without tensorboard or wandb.
meshtrain_add_test(e2e train tracking
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/tracking_test.py ${MESHTRAIN_BIN}
  PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# meshtrain doctor against the GPU-health fixtures and on this machine; meshrun --preflight stopping a launch.
meshtrain_add_test(e2e hw doctor
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/doctor_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  LABELS launch PROPERTIES TIMEOUT 300)
# On a GPU machine: NVML telemetry in the trainer's metrics and `meshtrain doctor` on real readings.
meshtrain_add_test(e2e train observe_gpu
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/observe_gpu_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  LABELS gpu hw PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# meshtrain generate through a model's tokenizer.json and chat template against transformers' greedy generate.
meshtrain_add_test(e2e text generate_tokenizer
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/generate_tokenizer_test.py
          ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# meshtrain serve: a real server on a free loopback port, stdlib HTTP clients, greedy output against transformers.
meshtrain_add_test(e2e serve http
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/serve_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# meshtrain serve under load (500 requests from 64 clients: each answered or refused, none lost, no block leaked)
# and clients that go away mid-request (their KV blocks return, counted as aborted).
meshtrain_add_test(e2e serve load
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/serve_load_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# meshtrain serve's settings: the checkpoint's recorded serve section, --config FILE's, --set and the flags, each
# over the one before; refused values one line naming their source, exit 2.
meshtrain_add_test(e2e serve settings
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/serve_settings_test.py ${MESHTRAIN_BIN}
          ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 300)
# meshtrain serve's shutdown: SIGTERM drains (503 for new requests, the ones in flight finish, exit 0); a second
# signal or --drain-timeout cuts it short (exit 1, the unfinished counted).
meshtrain_add_test(e2e serve drain
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/serve_drain_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# meshtrain generate --input/--output: a JSONL file of prompts through the serving engine, greedy ids against
# transformers, batched against alone, stop strings, ids and order kept; bad lines exit 2 naming file:line.
meshtrain_add_test(e2e serve generate_batch
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/generate_batch_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# generate --input on a GPU: the KV cache sized from serve.gpu_memory_fraction or serve.blocks, the same tokens
# whichever cache; skipped (77) without a GPU.
meshtrain_add_test(e2e serve generate_gpu
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/generate_gpu_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  LABELS gpu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# Tensor-parallel serving: meshrun --nproc-per-node 2 --no-python meshtrain generate|serve on the CPU backend against
# the single process (greedy ids, Llama and GPT-2; an httpx client, whole and streamed); TP 3 refused in one line;
# SIGTERM drains every rank; kill -9 of a rank fails the job; no worker left.
meshtrain_add_test(e2e serve tp
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/serve_tp_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
# scripts/bench/serve_compare.py (meshtrain serve vs transformers generate) on the CPU with a tiny model: both
# sides run, the JSON holds both, fp32 greedy tokens equal; bad flags are one line and exit 2.
meshtrain_add_test(e2e serve bench_smoke
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/serve_bench_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# meshtrain bench serve, the C++ load generator, against a real meshtrain serve on the CPU (serve_compare.py's tiny
# model): every request counted, the JSON's figures, the server's /metrics agreeing; failures and bad flags.
meshtrain_add_test(e2e serve bench_serve
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/bench_serve_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# No silent state changes between runs of one directory (tests/e2e/run_state_test.py): a fresh run over a previous
# one refused (or --overwrite), the global batch kept across world sizes, a re-derived schedule said, eval_every 0
# and a data.val too small for one step.
meshtrain_add_test(e2e train run_state
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_state_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600)
# QLoRA (model.base_quant nf4) over a base checkpoint against LoRA over the same base: losses within a stated
# bound, DDP 2 and FSDP 2 against one process, adapters-only checkpoints resumed exactly, the export merged into
# the dequantized base (docs/lora.md "QLoRA").
meshtrain_add_test(e2e train qlora
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/qlora_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  LABELS ckpt PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
