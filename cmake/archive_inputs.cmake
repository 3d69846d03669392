# The archives' inputs, one list for the bundle rule (CMakeLists.txt: its file-time
# dependencies) and for cmake/inputs_digest.cmake (their content digest): every kernel source
# and family description, the tuning databases and the builder. Extra arguments
# (CONFIGURE_DEPENDS) go to file(GLOB_RECURSE) ahead of the patterns.
macro(attnpack_archive_inputs out root)
  file(GLOB_RECURSE ${out} ${ARGN}
       "${root}/aot/*.py" "${root}/aot/tuning_db/*" "${root}/python/attnpack/*.py")
endmacro()
