# Tier-3 reference tests (docs/architecture.md "Test tiers"): the single-process model against the same model
# written in plain PyTorch (tests/reference/torch_reference.py), with the same weights passed as safetensors.
# reference_driver runs meshtrain's forward/loss/backward/generation; reference_test.py compares logits, loss,
# every gradient and greedy tokens within the tolerance it states. One ctest per model variant; exit code 77
# (skipped) when the Python lacks torch/numpy/safetensors.
add_executable(reference_driver ${CMAKE_CURRENT_LIST_DIR}/reference_driver.cpp)
target_link_libraries(reference_driver PRIVATE meshtrain_model meshtrain_ckpt)
meshtrain_warnings(reference_driver)
meshtrain_use_torch(reference_driver)

foreach(variant gpt2_tied gpt2_untied llama_mha_tied llama_gqa_untied llama_rope_scaled)
  meshtrain_add_test(reference model ${variant}
    COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/reference_test.py
            --driver $<TARGET_FILE:reference_driver> --variant ${variant}
    PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
# GGUF's block formats (ckpt/gguf/ggml_types.h) against llama.cpp's own `gguf` Python package: dequantizing bit
# for bit on blocks the package made (or random bytes where it only reads a type), quantizing bit for bit where
# the package quantizes as ggml does and within the type's error elsewhere. Exit 77 without gguf/numpy.
add_executable(gguf_quant_driver ${CMAKE_CURRENT_LIST_DIR}/gguf_quant_driver.cpp)
target_link_libraries(gguf_quant_driver PRIVATE meshtrain_ckpt)
meshtrain_warnings(gguf_quant_driver)
meshtrain_use_torch(gguf_quant_driver)
meshtrain_add_test(reference ckpt gguf_quants
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/gguf_quants_test.py $<TARGET_FILE:gguf_quant_driver>
  PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
# NF4 (model/nf4_tensor.h) against a numpy reference written from the QLoRA paper's definition (the levels from
# the normal quantiles, nearest-level codes over each block's absmax, the double-quantized absmaxes), and
# against bitsandbytes' CPU quantize_4bit where it imports. Exit 77 without numpy.
add_executable(nf4_driver ${CMAKE_CURRENT_LIST_DIR}/nf4_driver.cpp)
target_link_libraries(nf4_driver PRIVATE meshtrain_model)
meshtrain_warnings(nf4_driver)
meshtrain_use_torch(nf4_driver)
meshtrain_add_test(reference model nf4
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/nf4_test.py $<TARGET_FILE:nf4_driver>
  PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
