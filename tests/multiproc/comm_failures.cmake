# Failure diagnosis of the communicators (tests/multiproc/comm/flight_check.py): one rank skips a collective,
# the others time out, and every rank's flight-recorder dump lands in meshrun's log folder showing the mismatch.
add_test(NAME comm_flight_recorder
         COMMAND ${MESHTRAIN_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/comm/flight_check.py ${MESHTRAIN_BIN}/meshrun
                 ${MESHTRAIN_BIN}/comm_worker ${CMAKE_CURRENT_BINARY_DIR}/comm_flight)
set_tests_properties(comm_flight_recorder PROPERTIES LABELS "multiproc;comm" TIMEOUT 150)
