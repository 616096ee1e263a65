# Lists the doctest cases of the unit test executable, file by file, and
# writes the ctest script that registers each as its own test:
#   unit.<file>.<case>  runs  EXE --source-file=*/<file>.cpp --test-case=<case>
# Every case of <file> holds RESOURCE_LOCK unit.<file>; PROPERTIES apply to
# all. The script also sets THROWBOX_UNIT_CASES (every name) and
# THROWBOX_UNIT_CASES_<file>, lists for properties set after it.
# Run by tests/unit/CMakeLists.txt after each link of unit_tests:
#   cmake -D EXE=<exe> -D FILES=<file>,<file>... -D WORKDIR=<dir>
#         -D PROPERTIES=<name>,<value>,... -D OUT=<script> -P discover_cases.cmake
cmake_minimum_required(VERSION 3.20)

# Case names may hold ';', CMake's list separator: while they are handled
# here as list items it stands in as the ASCII record separator.
string(ASCII 30 SEMI)

# list_cases(<var> <args>...): the names --list-test-cases prints between
# doctest's own lines.
function(list_cases out_var)
  execute_process(COMMAND "${EXE}" ${ARGN} --list-test-cases
                  WORKING_DIRECTORY "${WORKDIR}" OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${EXE} ${ARGN} --list-test-cases: exit ${rc}\n${out}${err}")
  endif()
  string(REGEX REPLACE "\\[doctest\\][^\n]*" "" out "\n${out}\n")
  string(REGEX REPLACE "\n=+\n" "\n\n" out "${out}")
  string(REGEX REPLACE "\n=+\n" "\n\n" out "${out}")
  string(STRIP "${out}" out)
  # A '[' pairs with a ']' in CMake's lists, and ctest reads DEPENDS as one.
  foreach(c "[" "]")
    string(FIND "${out}" "${c}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "unit test case names may not contain '[' or ']':\n${out}")
    endif()
  endforeach()
  string(REPLACE ";" "${SEMI}" out "${out}")
  string(REGEX MATCHALL "[^\n]+" out "${out}")
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# as_list(<var> <names>...): the names as bracket arguments of set(), each ';'
# escaped so that the list keeps it inside its item.
function(as_list out_var)
  set(quoted "")
  foreach(name IN LISTS ARGN)
    string(REPLACE "${SEMI}" "\\;" name "${name}")
    string(APPEND quoted " [==[${name}]==]")
  endforeach()
  set(${out_var} "${quoted}" PARENT_SCOPE)
endfunction()

string(REPLACE "," ";" files "${FILES}")
string(REPLACE "," ";" properties "${PROPERTIES}")
set(props "")
foreach(p IN LISTS properties)
  string(APPEND props " [==[${p}]==]")
endforeach()

set(script "")
set(all_names "")
set(count 0)
foreach(file IN LISTS files)
  list_cases(cases "--source-file=*/${file}.cpp")
  if(cases STREQUAL "")
    message(FATAL_ERROR "tests/unit/${file}.cpp has no test case")
  endif()
  set(names "")
  foreach(case IN LISTS cases)
    set(name "unit.${file}.${case}")
    if(name IN_LIST names)
      message(FATAL_ERROR "tests/unit/${file}.cpp: two test cases named \"${case}\"")
    endif()
    list(APPEND names "${name}")
    string(REPLACE "${SEMI}" ";" name "${name}")
    string(REPLACE "${SEMI}" ";" case "${case}")
    # doctest's filters split on ',' unless escaped, and '\' escapes
    string(REPLACE "\\" "\\\\" filter "${case}")
    string(REPLACE "," "\\," filter "${filter}")
    string(APPEND script
      "add_test([==[${name}]==] [==[${EXE}]==] [==[--source-file=*/${file}.cpp]==] [==[--test-case=${filter}]==])\n"
      "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY [==[${WORKDIR}]==]"
      " RESOURCE_LOCK [==[unit.${file}]==]${props})\n")
    math(EXPR count "${count} + 1")
  endforeach()
  as_list(quoted ${names})
  string(APPEND script "set(THROWBOX_UNIT_CASES_${file}${quoted})\n")
  list(APPEND all_names ${names})
endforeach()

# A case in no *_test.cpp (in a header, say) would be listed by no file above.
list_cases(every)
list(LENGTH every total)
if(NOT total EQUAL count)
  message(FATAL_ERROR "${EXE} has ${total} test cases, its files ${count}: "
                      "every case must be in one of the files ${FILES}")
endif()

as_list(quoted ${all_names})
string(APPEND script "set(THROWBOX_UNIT_CASES${quoted})\n")
file(WRITE "${OUT}" "${script}")
