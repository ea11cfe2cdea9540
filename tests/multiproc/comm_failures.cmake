# Failure diagnosis of the communicators (tests/multiproc/comm/flight_check.py): one rank skips a collective,
# the others time out, and every rank's flight-recorder dump lands in meshrun's log folder showing the mismatch.
meshtrain_add_test(multiproc comm flight_recorder
  COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/comm/flight_check.py ${MESHTRAIN_BIN}/meshrun
          ${MESHTRAIN_BIN}/comm_worker ${CMAKE_CURRENT_BINARY_DIR}/comm_flight
  PROPERTIES TIMEOUT 150)
