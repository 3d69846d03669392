# cmake -DSOURCE_DIR=... -DSTAMP=... -P inputs_digest.cmake
#
# Writes STAMP with one SHA-256 over the archives' inputs (cmake/archive_inputs.cmake, the list
# CMakeLists.txt's bundle rule depends on: each file's path and content),
# and rewrites it only when that digest changed. The archives depend on STAMP, so they rebuild
# whenever an input's content changes, even where the file's time went backwards: a checkout
# or copy that restores an older database with its old time (the device tool's, run143) left
# the newer archive in place under a time-only rule.
include("${CMAKE_CURRENT_LIST_DIR}/archive_inputs.cmake")
attnpack_archive_inputs(_inputs "${SOURCE_DIR}")
list(SORT _inputs)
set(_all "")
foreach(_f IN LISTS _inputs)
  file(SHA256 "${_f}" _h)
  file(RELATIVE_PATH _rel "${SOURCE_DIR}" "${_f}")
  string(APPEND _all "${_rel} ${_h}\n")
endforeach()
string(SHA256 _digest "${_all}")
set(_old "")
if(EXISTS "${STAMP}")
  file(READ "${STAMP}" _old)
endif()
if(NOT _old STREQUAL "${_digest}")
  file(WRITE "${STAMP}" "${_digest}")
endif()
