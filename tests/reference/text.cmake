# meshtrain's tokenizer and chat templates against the Python packages they must agree with: `tokenizers`
# (ids, decoded text, streamed text) and `transformers` (apply_chat_template). The tokenizers are trained in
# the test on the KJV text, nothing is downloaded; exit code 77 (skipped) when the Python lacks the packages.
add_executable(text_driver ${CMAKE_CURRENT_LIST_DIR}/text_driver.cpp)
target_link_libraries(text_driver PRIVATE meshtrain_text)
meshtrain_warnings(text_driver)

foreach(style gpt2 gpt2_prefix_space llama3 qwen2 llama2 mistral gemma metaspace_split)
  meshtrain_add_test(reference text tokenizer_${style}
    COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/tokenizer_test.py
            --driver $<TARGET_FILE:text_driver> --style ${style}
            --kjv ${CMAKE_SOURCE_DIR}/data/kjv/kjv-genesis-2kings.txt
    PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
meshtrain_add_test(reference text chat_template
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/chat_template_test.py
          --driver $<TARGET_FILE:text_driver> --kjv ${CMAKE_SOURCE_DIR}/data/kjv/kjv-genesis-2kings.txt
  PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
meshtrain_add_test(reference text chat_template_models
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/chat_template_test.py
          --driver $<TARGET_FILE:text_driver> --kjv ${CMAKE_SOURCE_DIR}/data/kjv/kjv-genesis-2kings.txt
          --fixtures ${CMAKE_SOURCE_DIR}/tests/fixtures/chat_templates
  PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
