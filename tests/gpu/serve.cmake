# serve's GPU checks (label gpu; exit 77 = skipped without a GPU: tests/support/gpu_test_main.h).

# The paged forward on CUDA: bf16 within bf16 rounding of the plain forward, fp32 equal to it, for chunked ragged
# steps over scrambled blocks (Llama with GQA, GPT-2).
meshtrain_gpu_test(paged_forward paged_forward_test.cpp ROOM serve)

# The decode-attention kernel (model/kernels/paged_decode.h) against the reference paged attention in fp32: fp32,
# bf16 and fp16, GQA 1 to 12, head dims 64 and 128, block sizes 1 to 16, contexts of 1 to 4000 tokens in one
# batch over scrambled blocks, one split and many; a padding row; paged_attention's decode path; a captured
# CUDA graph replayed with new lengths.
meshtrain_gpu_test(paged_decode paged_decode_test.cpp ROOM serve)

# The paged cache's write kernel (model/kernels/paged_kv_write.h) against index_copy_: strided keys and values of
# one projection output into scattered slots, fp32/bf16/fp16, bit for bit; a slot past the cache not written.
meshtrain_gpu_test(paged_kv_write paged_kv_write_test.cpp ROOM serve TIMEOUT 300)

# The kernel timed against the reference at Llama 3.1 8B's attention shape (bf16), batch 1/8/64 × context
# 128/1024/4096: time, speedup and the kernel's K/V bandwidth; table + JSON.
meshtrain_gpu_bench(paged_decode_bench ROOM serve)

# The decode step's GEMMs with their weights read from HBM (copies past the L2, one CUDA graph), Llama 3.2 1B and
# 3.1 8B projection shapes at 1/8/64 rows: ATen's cuBLAS against cuBLASLt, heuristic and tuned, and ATen's with W in
# the L2 (what a read-ahead could reach); table + JSON.
meshtrain_gpu_bench(decode_gemm_bench ROOM serve)

# CUDA graphs of decode steps: every step's logits with graphs within bf16 rounding of the eager step's (padded
# batches, shrinking batches, prefills between), padding writing only the scratch block; the engine's greedy tokens
# with graphs on and off equal up to a near-tie.
meshtrain_gpu_test(decode_graphs decode_graphs_test.cpp ROOM serve LIB meshtrain_serve_engine)

# Where an engine step's time goes on a preset shape (default Llama 3.1 8B, bf16): the whole step and its parts
# (step batch, graph replay, eager forward, sampler) at batch 1/8/64, the prefill step, and a kernel profile of
# the eager and replayed steps; table + JSON. Run by scripts/gpu-check.sh's serve part, not by ctest (16 GB of
# weights and a minute of GPU).
add_executable(serve_step_bench ${CMAKE_CURRENT_LIST_DIR}/serve_step_bench.cpp)
target_link_libraries(serve_step_bench PRIVATE meshtrain_serve_engine)
meshtrain_warnings(serve_step_bench)
meshtrain_use_torch(serve_step_bench)
