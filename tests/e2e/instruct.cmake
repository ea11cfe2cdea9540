# Tier 4: instruction data (docs/data.md) — scripts/prepare_instruct.py with a tokenizer trained in the test on
# the KJV text (nothing fetched); skipped (77) where the venv lacks tokenizers or transformers.
meshtrain_add_test(e2e data prepare_instruct
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/instruct/prepare_instruct_test.py ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# JSONL → prepare_instruct.py → meshtrain train under meshrun (2 CPU workers): the loss is the mean over the
# assistant tokens of the whole step (2 ranks × 2 micro-batches = one batch of 4), and it falls.
meshtrain_add_test(e2e train instruct_train
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/instruct/instruct_train_test.py
          ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# LoRA end to end (docs/lora.md): a tiny Llama made with transformers, imported; LoRA under meshrun with 2
# workers; exact resume; merged and PEFT exports loaded by transformers / peft with meshtrain's logits; the
# held-out loss on assistant tokens lower than the base's. Skipped (77) without peft, transformers, tokenizers.
meshtrain_add_test(e2e train lora_finetune
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/instruct/lora_finetune_test.py
          ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  LABELS ckpt PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# A fine-tune's text (tests/e2e/instruct/finetune_text_test.py): samples through the model's tokenizer and chat
# template during training, LoRA's trainable count, the merged export's tokenizer loaded by AutoTokenizer, eval's
# counted tokens. Skipped (77) without transformers, tokenizers or tensorboard.
meshtrain_add_test(e2e train finetune_text
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/instruct/finetune_text_test.py
          ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  LABELS ckpt PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# The README's recipe as written (tests/e2e/instruct/readme_recipe_test.py): a Hugging Face directory and a JSONL
# of chats → shards → LoRA under meshrun (2 CPU workers, the shape taken from init_from) → eval → generate →
# serve, and the merged export; only the block's variables are the test's. Skipped (77) without transformers or
# tokenizers. About 4 minutes on 2 idle cores (200 steps of 2 × 4 × 2048 tokens).
meshtrain_add_test(e2e train readme_recipe
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/instruct/readme_recipe_test.py
          ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  LABELS ckpt PROPERTIES TIMEOUT 1800 SKIP_RETURN_CODE 77)
