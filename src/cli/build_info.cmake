# Writes OUT defining build_commit() from SRC's git state; the file changes only when the commit
# does, so a build without a new commit relinks nothing.
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --abbrev=7
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
endif()
set(text "#include \"cli/build_info.h\"\nconst char* serve8::build_commit() { return \"${commit}\"; }\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
