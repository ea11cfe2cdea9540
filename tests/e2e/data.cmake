# Tier 4: several data sources (docs/data.md "Several sources"): a weighted mixture under meshrun with 2 CPU
# workers — each source's tokens in the step records, each validation source's loss, an exact kill/resume — and
# the mistakes meshrun's config check refuses.
meshtrain_add_test(e2e data mixture
  COMMAND ${MESHTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/e2e/data_mix_test.py ${MESHTRAIN_BIN} ${CMAKE_SOURCE_DIR}
  LABELS train PROPERTIES TIMEOUT 600)
