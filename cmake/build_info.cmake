# Run at every build (not only at configure): writes OUT from IN with the
# current git sha ("-dirty" when the tree has uncommitted changes), touching
# OUT only when its content changes, so results always name the code they ran.
# ACCEL_GIT_SHA in the environment wins: the sender of a copied tree names
# the code it sent (a GPU machine's copy can hold another commit's .git, seen
# there as "<older sha>-dirty").
if(DEFINED ENV{ACCEL_GIT_SHA} AND NOT "$ENV{ACCEL_GIT_SHA}" STREQUAL "")
  set(ACCEL_GIT_SHA "$ENV{ACCEL_GIT_SHA}")
else()
  execute_process(COMMAND git describe --always --dirty --abbrev=12
                  WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE ACCEL_GIT_SHA OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET)
endif()
if(NOT ACCEL_GIT_SHA)
  set(ACCEL_GIT_SHA "unknown")
endif()
configure_file(${IN} ${OUT}.tmp @ONLY)
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.tmp ${OUT})
file(REMOVE ${OUT}.tmp)
