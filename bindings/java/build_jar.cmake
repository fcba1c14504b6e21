# cmake -DJAVAC= -DJAR= -DGEN_DIR= -DHAND_DIR= -DCLASSES= -DOUT= -P build_jar.cmake
file(GLOB gen "${GEN_DIR}/*.java")
file(GLOB hand "${HAND_DIR}/*.java")
file(REMOVE_RECURSE "${CLASSES}")
file(MAKE_DIRECTORY "${CLASSES}")
execute_process(COMMAND "${JAVAC}" -nowarn -Xlint:none --release 11 -d "${CLASSES}" ${gen} ${hand}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "javac failed (${rc})")
endif()
execute_process(COMMAND "${JAR}" cf "${OUT}" -C "${CLASSES}" . RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "jar failed (${rc})")
endif()
